"""Providers only build and parse wire formats; runtime/net/endpoint.py does the calling.

Retry, backoff, timeouts, the concurrency bound and the cache wrap every provider once,
in one place, so adding a provider is one package (``providers/<name>/``: its class with a
request builder, a parser, a stream reader and its facts; its batch format) and one line in
registry.py (docs/providers/providers.md, "Adding a provider").
"""
