"""Strict JSON at the boundary: hostile bytes in, plain finite JSON values out.

``loads`` reads bytes or text from outside and raises nothing but ``ValueError``: bare
``NaN`` / ``Infinity`` / ``-Infinity`` and floats that overflow (``1e999``) become ``None``, an
integer too long for Python's int-string limit becomes ``None`` (it would overflow a float
too), lone UTF-16 surrogates in strings become U+FFFD (they cannot be written as UTF-8), and
nesting deeper than ``MAX_DEPTH`` is refused. ``sanitize`` does the same to values already in
memory and reports the JSON paths it replaced, so what the cache holds the run files can hold.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

#: Deepest nesting accepted; no real provider body or judge reply comes near it.
MAX_DEPTH = 200

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 0)() or 4300


def _float(token: str) -> float | None:
    value = float(token)
    return value if math.isfinite(value) else None


def _int(token: str) -> int | None:
    # Past the int-string limit int() raises; such a number overflows a float as well.
    return int(token) if len(token.lstrip("-")) <= _INT_DIGITS else None


_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=lambda _: None)


def decode(text: str) -> Any:
    """``text`` as one JSON value with the safe hooks; nesting and surrogates are not checked."""
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}") from None


def loads(data: bytes | bytearray | str) -> Any:
    """Parse JSON from outside; raises only ``ValueError`` (with a short reason)."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"invalid UTF-8 at byte {exc.start}") from None
        text = text.removeprefix("\ufeff")
    elif isinstance(data, str):
        text = data
    else:
        raise ValueError(f"expected bytes or str, got {type(data).__name__}")
    value = decode(text)
    return _check(value)


def _check(value: Any) -> Any:
    """Refuse nesting deeper than MAX_DEPTH; replace lone surrogates (iterative, in place)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
        if isinstance(node, dict):
            if any(isinstance(k, str) and _LONE_SURROGATE.search(k) for k in node):
                fixed = {_clean(k): v for k, v in node.items()}
                node.clear()
                node.update(fixed)
            for key, item in node.items():
                if isinstance(item, str):
                    node[key] = _clean(item)
                elif isinstance(item, (dict, list)):
                    stack.append((item, depth + 1))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    node[i] = _clean(item)
                elif isinstance(item, (dict, list)):
                    stack.append((item, depth + 1))
    return _clean(value) if isinstance(value, str) else value


def _clean(text: str) -> str:
    return _LONE_SURROGATE.sub("\ufffd", text) if _LONE_SURROGATE.search(text) else text


def _path(parent: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(str(key), ensure_ascii=False)}]"


def sanitize(value: Any) -> tuple[Any, list[str]]:
    """A copy of ``value`` with every non-finite float replaced by ``None``, and the JSON paths
    (``$.usage.cost``, ``$.items[2]``) it replaced, each once.

    Dicts and lists (tuples become lists) are copied, any depth, without recursion; a shared
    container is copied once and shared in the copy, so cycles end too. Other values are kept.
    """
    replaced: list[str] = []
    memo: dict[int, Any] = {}

    def copy_of(item: Any, path: str, todo: list[tuple[Any, Any, str]]) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            replaced.append(path)
            return None
        if isinstance(item, (dict, list, tuple)):
            if id(item) in memo:
                return memo[id(item)]
            clone: Any = {} if isinstance(item, dict) else []
            memo[id(item)] = clone
            todo.append((item, clone, path))
            return clone
        return item

    root_todo: list[tuple[Any, Any, str]] = []
    result = copy_of(value, "$", root_todo)
    stack = root_todo
    while stack:
        source, clone, path = stack.pop()
        children: list[tuple[Any, Any, str]] = []
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            copied = copy_of(item, _path(path, key), children)
            if isinstance(clone, dict):
                clone[key] = copied
            else:
                clone.append(copied)
        stack.extend(reversed(children))
    return result, replaced


def strict(value: Any) -> tuple[Any, tuple[str, ...]]:
    """``value`` with non-finite numbers as null (so the cache and run files can hold it), and a note."""
    clean, paths = sanitize(value)
    if not paths:
        return value, ()
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return clean, (f"non-finite numbers replaced by null at {shown}",)


def decode_json(data: bytes) -> tuple[Any, tuple[str, ...]]:
    """A body as strict JSON plus notes, or a marker holding its first bytes when it is not JSON."""
    try:
        value = json.loads(data)  # fast path; accepts NaN/Infinity, which ``strict`` then nulls
    except (ValueError, RecursionError):
        try:
            value = loads(data)  # huge numbers, odd bytes: never raises but ValueError
        except ValueError:
            return {"non_json_body": data[:2000].decode("utf-8", "replace")}, ()
    return strict(value)
