"""What a credential looks like where a config must never hold one: pure rules, no I/O.

A config names the VARIABLE that holds a key (``api_key_env``); the key itself never enters
it, because everything in a config is written down (Hydra's ``.hydra/``, ``config.json``,
MLflow params, cache entries keyed by the URL). These rules find a key where it does not
belong: in a URL's user info or query, under a key-like name in a mapping (``extra_body``),
or pasted where a variable's name goes. They say where, never what: no text they return
holds the value.
"""

from __future__ import annotations

import re

#: Names (lower case, ``-`` and ``_`` dropped) under which a value is a credential.
KEY_NAMES = frozenset({
    "key", "apikey", "token", "accesstoken", "authtoken", "apitoken", "bearer", "bearertoken", "idtoken",
    "refreshtoken", "sessiontoken", "secret", "secretkey", "clientsecret", "password", "passwd", "pwd",
    "authorization", "auth", "credential", "credentials", "xapikey", "xgoogapikey", "signature", "sig",
})
#: Endings that make any name a credential's (``openai_api_key``, ``my_secret``).
KEY_ENDINGS = ("apikey", "secret", "password", "accesstoken", "authtoken", "apitoken")
#: How keys of the providers wildtrace speaks to begin (OpenAI, Anthropic, Google, xAI, Groq, Hugging Face, …).
KEY_PREFIXES = ("sk-", "sk_", "AIza", "xai-", "gsk_", "hf_", "pk-", "ghp_", "github_pat_", "Bearer ")
#: An environment variable's name as a shell can set it.
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def key_like_name(name: str) -> bool:
    """Whether a field or parameter of this name holds a credential (``api_key``, ``X-Api-Key``, ``token``)."""
    flat = re.sub(r"[-_.\s]", "", name).lower()
    return flat in KEY_NAMES or flat.endswith(KEY_ENDINGS)


def looks_like_key(value: str) -> bool:
    """Whether text given as a variable's NAME is rather a key: a provider's key prefix, a character no
    variable name has, or a long run of mixed-case letters and digits (``AIzaSy…``)."""
    text = value.strip()
    if not text:
        return False
    if text.startswith(KEY_PREFIXES) or not VARIABLE_NAME.fullmatch(text):
        return True
    mixed = any(c.islower() for c in text) and any(c.isupper() for c in text) and any(c.isdigit() for c in text)
    return len(text) >= 20 and mixed
