"""Providers only build and parse wire formats; runtime/http.py does the calling.

Retry, backoff, timeouts, the concurrency bound and the cache wrap every provider once,
in one place, so adding a provider is one module (its class: a request builder, a parser, a
stream reader and its facts) and one line in registry.py (docs/providers/providers.md, "Adding a provider").
"""
