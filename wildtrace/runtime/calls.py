"""The cache wrapped around an endpoint: look up first, call on a miss, store at once."""

from __future__ import annotations

from dataclasses import replace

from wildtrace.core.records import CallResult
from wildtrace.providers.base import WireRequest
from wildtrace.runtime.cache import Cache, cache_key
from wildtrace.runtime.http import Endpoint, encode_body, interpret, is_storable


class CachedEndpoint:
    """An Endpoint behind the outcome cache. Hits never wait for the concurrency bound."""

    def __init__(self, endpoint: Endpoint, cache: Cache) -> None:
        self.endpoint = endpoint
        self.cache = cache
        self.hits = 0

    @property
    def label(self) -> str:
        """The endpoint's role in records: "model" or a judge key."""
        return self.endpoint.provider.spec.label

    async def call(self, request: WireRequest, replicate: int) -> CallResult:
        """The outcome for ``request``: stored if known, otherwise fetched and stored."""
        spec = self.endpoint.provider.spec
        content = encode_body(request.body)
        key, material = cache_key(spec.provider, request.url, spec.route, content, replicate)
        stored = self.cache.get(key)
        if stored is not None:
            self.hits += 1
            result = interpret(self.endpoint.provider, stored["payload"], stored["http_status"], stored["attempts"],
                               stored["latency_s"])
            return replace(result, started_at=stored.get("started_at"))
        result = await self.endpoint.call(request, content)
        if is_storable(result):
            self.cache.put(key, material, {"payload": result.raw, "http_status": result.http_status,
                                           "attempts": result.attempts, "latency_s": result.latency_s,
                                           "started_at": result.started_at})
        return result
