"""Providers only build and parse wire formats; runtime/http.py does the calling.

Retry, backoff, timeouts, the concurrency bound and the cache wrap every provider once,
in one place, so adding a provider is two pure functions and a registry entry.
"""
