"""API keys: read once, checked, and kept out of everything written or printed.

Configs hold only the NAME of the variable (``api_key_env``). The values read here are
registered with the one redaction function, ``redact``, which stands between every error
text, raw body, exception message and log line and anything the harness writes or prints.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from wildtrace.core.credentials import looks_like_key

#: Providers echo keys in error bodies, sometimes masked ("sk-proj-abc1****wxyz"): any run of
#: this many characters of a key is redacted, not only the whole key.
FRAGMENT = 12
MASK = "[REDACTED]"
#: The note a row gets when a key echoed in a reply (or an answers file) was replaced.
ECHO_NOTE = "redacted an echoed credential"

#: A key shorter than this (a local server's "EMPTY", a test's "k") is redacted only where it
#: stands alone: as a substring it would rewrite every "k" of "tokens" in every stored text.
SHORT_KEY = 8

_secrets: set[str] = set()
_fragments: list[str] = []
_short: re.Pattern[str] | None = None


class MissingKeyError(RuntimeError):
    """One or more endpoints' ``api_key_env`` variables are unset or hold an unusable value."""


def register(secret: str) -> None:
    """Make ``redact`` hide ``secret`` (and any FRAGMENT-long run of it) from now on; a key under SHORT_KEY
    characters only where it stands alone (not inside a word)."""
    global _short
    if not secret or secret in _secrets:
        return
    _secrets.add(secret)
    if len(secret) < SHORT_KEY:
        shorts = sorted((k for k in _secrets if len(k) < SHORT_KEY), key=len, reverse=True)
        _short = re.compile(r"(?<![A-Za-z0-9_\-])(?:" + "|".join(map(re.escape, shorts)) + r")(?![A-Za-z0-9_\-])")
        return
    pieces = {secret}
    if len(secret) >= 2 * FRAGMENT:
        pieces.update(secret[i:i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1))
    _fragments[:] = sorted(set(_fragments) | pieces, key=len, reverse=True)


def redact(value: Any) -> Any:
    """``value`` with every registered key (or fragment of one) replaced by ``[REDACTED]``.

    Strings, and strings inside dicts and lists (keys too), are rewritten; other values pass.
    """
    if not _fragments and _short is None:
        return value
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, Mapping):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def scrub(value: Any) -> tuple[Any, bool]:
    """A body from outside with every registered key replaced where it occurs, and whether one was.

    For 2xx replies (a gateway that echoes ``Bearer <key>`` into the answer or any field): it
    walks iteratively, so any depth is safe, and copies nothing when no key occurs (the common
    case costs one scan of the strings). Dict keys are scrubbed too; other values pass.
    """
    if (not _fragments and _short is None) or not _holds_key(value):
        return value, False
    return _rebuilt(value), True


def _holds_key(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(piece in item for piece in _fragments) or (_short is not None and _short.search(item)):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _rebuilt(value: Any) -> Any:
    """A copy of a JSON-like value with every string redacted (tuples become lists), without recursion."""
    todo: list[tuple[Any, Any]] = []

    def fixed(item: Any) -> Any:
        if isinstance(item, str):
            return _redact_text(item)
        if isinstance(item, (Mapping, list, tuple)):
            clone: Any = {} if isinstance(item, Mapping) else []
            todo.append((item, clone))
            return clone
        return item

    root = fixed(value)
    while todo:
        source, clone = todo.pop()
        if isinstance(source, Mapping):
            for key, item in source.items():
                clone[_redact_text(key) if isinstance(key, str) else key] = fixed(item)
        else:
            clone.extend(fixed(item) for item in source)
    return root


def _redact_text(text: str) -> str:
    for piece in _fragments:  # longest first, so a whole key goes before its fragments
        if piece in text:
            text = text.replace(piece, MASK)
    return _short.sub(MASK, text) if _short is not None else text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts keys from every record's formatted message."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place; never drops it."""
        if _fragments or _short is not None:
            message = record.getMessage()
            redacted = _redact_text(message)
            if redacted != message or record.args:
                record.msg, record.args = redacted, None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = _redact_text(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


def install_log_filter() -> None:
    """Put the redacting filter on every handler of the root logger (idempotent)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def _problem(name: str, value: str | None) -> str | None:
    if not value:
        return "is not set"
    if value != value.strip():
        return "holds leading or trailing white space (a newline pasted with the key?); remove it"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "holds white space or control characters; an API key has none"
    if not value.isascii():
        return "holds non-ASCII characters; an API key has none"
    return None


def read_keys(needed: Iterable[tuple[str, str, str]], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Variable name → key for each (where, variable, what) needed; every problem reported at once.

    ``where`` names the config key (``model.api_key_env``), ``what`` the endpoint. A value
    with white space or control characters is refused, naming the variable, never the value.
    """
    keys: dict[str, str] = {}
    problems: list[str] = []
    for where, name, what in needed:
        if looks_like_key(name):  # the key pasted where its variable's name goes: never shown
            problems.append(f"{where} holds what looks like an API key, not the NAME of the variable that holds "
                            f"it (e.g. OPENAI_API_KEY): put the key in that variable and name it here (for {what})")
            continue
        value = environ.get(name)
        problem = _problem(name, value)
        if problem:
            problems.append(f"{where}: environment variable {name} {problem} (it must hold the API key for {what})")
            continue
        assert value is not None
        keys[name] = value
        register(value)
    if problems:
        raise MissingKeyError("\n  ".join(dict.fromkeys(problems)))
    return keys
