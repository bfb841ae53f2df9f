"""The endpoint: the cached, reserved, stored call, over the call loop (runtime/net/call.py) and one
attempt (runtime/net/attempt.py).

Every provider goes through ``Endpoint.call``; providers never touch a socket. Here:

- the outcome cache is looked up first (hits never wait for a slot), and a call in flight
  in another process is waited for rather than paid twice;
- the spend cap's ticket goes to the loop (each attempt reserves before it is sent);
- a request is rebuilt as the endpoint has learned to send it (a Resend from the loop);
- an outcome the provider produced is stored (an fsync, off the event loop); every outcome's
  error text and raw failure body is redacted before it is recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from wildtrace.core.records import CallResult, FailReason
from wildtrace.providers.base import Provider, WireRequest
from wildtrace.runtime.net.attempt import Attempt, Sender, encode_body
from wildtrace.runtime.spend.cap import Ticket
from wildtrace.runtime.store.cache import Cache, StorageError, cache_key
from wildtrace.runtime.net.call import REPLICATE_HEADER, CallLoop, interpret
from wildtrace.runtime.net.client import make_client
from wildtrace.runtime.net.ratelimit import AdaptiveLimit, Cost
from wildtrace.runtime.net.retry import Resend, RetryPolicy, failure_reason
from wildtrace.runtime.store.shared_budget import SharedBudget
from wildtrace.runtime.net.secrets import ECHO_NOTE, redact, scrub


def is_storable(result: CallResult) -> bool:
    """Outcomes the provider really produced (paid for): answers, refusals, empty answers.

    HTTP errors and exhausted retries are not stored, so a rerun tries them again.
    """
    return result.ok or result.reason in (FailReason.REFUSAL, FailReason.EMPTY_OUTPUT)


@dataclass(frozen=True)
class Prepared:
    """A request made ready to send: its exact bytes and its cache key (``prepare_request``)."""

    request: WireRequest  #: the request the bytes encode
    replicate: int  #: the replicate index in the key
    content: bytes  #: ``encode_body(request.body)``
    key: str  #: the cache key
    material: dict  #: what the key was made from (stored beside the outcome)


def prepare_request(provider: Provider, request: WireRequest, replicate: int = 0) -> Prepared:
    """A provider's request as its exact bytes and cache key: the one place a key is made from a request
    (the endpoint's call, the plan's answers and the survey's judges alike)."""
    content = encode_body(request.body)
    key, material = cache_key(provider.spec.provider, request.url, provider.spec.route, content, replicate)
    return Prepared(request, replicate, content, key, material)


class Endpoint:
    """One endpoint (the model, or a judge): its cache, connections, limit and retry rule."""

    def __init__(
        self,
        provider: Provider,
        api_key: str | None,
        retry: RetryPolicy,
        cache: Cache | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[str], None] | None = None,
        seed: int | None = None,
        max_response_bytes: int = 64 << 20,
    ) -> None:
        spec = provider.spec
        self.provider = provider
        self.cache = cache or Cache(Path(), enabled=False)
        local = type(provider).local  # answered in-process (answer_locally)
        self._auth = provider.auth_headers(api_key) if api_key else {}
        # One client, httpx's own pool of at most max_concurrency connections; the loop's slots bound what is in flight.
        self.sender = Sender(provider, self._auth, make_client(spec.timeout_s, spec.max_concurrency, transport),
                             streaming=spec.stream and provider.streams and not local,
                             max_response_bytes=max_response_bytes)
        self.loop = CallLoop(provider, self.sender, retry, local=local, on_retry=on_retry, seed=seed)
        if self.cache.enabled and not local:  # jobs sharing the cache folder share the key's rate budget
            self.limit.shared = SharedBudget.under(self.cache.directory, spec.base_url, spec.route, spec.api_key_env)
        self.hits = 0
        self.served_models: dict[str, int] = {}
        self.storage_error: StorageError | None = None  # the first store that failed; the run stops sending
        #: Outcomes this run already has by cache key (batch mode: runtime/batch), returned instead of sending.
        self.ready: dict[str, CallResult] = {}

    # What the loop and the attempts count and learned, as the run's summary and the batch runner read them.
    @property
    def retry(self) -> RetryPolicy:
        """The endpoint's retry rule."""
        return self.loop.retry

    @property
    def limit(self) -> AdaptiveLimit:
        """The endpoint's rate window."""
        return self.loop.limit

    @limit.setter
    def limit(self, value: AdaptiveLimit) -> None:
        self.loop.limit = value

    @property
    def quota_error(self) -> str | None:
        """The quota refusal that fails every later call of the endpoint at once, once there is one."""
        return self.loop.quota_error

    @quota_error.setter
    def quota_error(self, value: str | None) -> None:
        self.loop.quota_error = value

    @property
    def retries(self) -> int:
        """Attempts retried so far."""
        return self.loop.retries

    @property
    def temperature_dropped(self) -> bool:
        """Whether the endpoint rejected temperature (every later request goes without it)."""
        return self.loop.temperature_dropped

    @property
    def budget_lowered(self) -> int | None:
        """The documented output limit sent since the endpoint rejected more, or None."""
        return self.loop.budget_lowered

    @property
    def requests_sent(self) -> int:
        """Requests sent so far."""
        return self.sender.requests_sent

    @property
    def streaming(self) -> bool:
        """Whether the endpoint's requests are streamed."""
        return self.sender.streaming

    @property
    def max_response_bytes(self) -> int:
        """The largest (decoded) 2xx body read."""
        return self.sender.max_response_bytes

    @staticmethod
    def failure_reason(attempt: Attempt) -> FailReason:
        """A final failure's reason: context_length when the provider says the prompt does not fit."""
        return failure_reason(attempt.status, attempt.payload)

    @property
    def auth(self) -> dict[str, str]:
        """The headers that carry the key (for the batch API's own requests; never logged)."""
        return dict(self._auth)

    @property
    def label(self) -> str:
        """The endpoint's role in records: "model" or a judge key."""
        return self.provider.spec.label

    async def aclose(self) -> None:
        """Close the endpoint's connections (and the shared budget's lock file)."""
        await self.sender.aclose()
        if self.limit.shared is not None:
            self.limit.shared.close()

    # ------------------------------------------------------------------ the call

    def prepare(self, request: WireRequest, replicate: int = 0) -> Prepared:
        """The request's bytes and cache key, made ahead of ``call`` (any thread: no state is touched)."""
        return prepare_request(self.provider, request, replicate)

    async def call(self, request: WireRequest, replicate: int = 0, cost: Cost | None = None,
                   prepared: Prepared | None = None, ticket: Ticket | None = None,
                   cache_ttl: str | None = None) -> CallResult:
        """The outcome of one logical request: from the cache, or fetched (with retries) and stored.

        ``cost``: what the request counts against the rate limits (its estimated tokens), for pacing;
        ``prepared``: ``prepare(request, replicate)`` already made (off the event loop);
        ``ticket``: the call's claim on a spend cap, reserved on a cache miss just before sending
        (runtime/spend/cap.py); refused, the call is not sent and comes back ``budget_exhausted``;
        ``cache_ttl``: the prompt-cache lifetime the run's schedule asks for (``Provider.with_cache_hint``).
        """
        asked = self.provider.budget(request) if self.provider.spec.max_output_tokens is not None else None
        while True:
            request = self.loop.as_learned(request)
            if prepared is None or prepared.request is not request or prepared.replicate != replicate:
                prepared = self.prepare(request, replicate)
            content, key, material = prepared.content, prepared.key, prepared.material
            if key in self.ready:  # fetched through the batch API in this run (runtime/batch)
                return self.ready[key]
            hit = self._lookup(key, request)
            if hit is not None:
                return hit
            async with self.cache.lock(key):
                hit = self._lookup(key, request)  # another process may have paid for it while we waited
                if hit is not None:
                    return hit
                # Each attempt reserves in the loop; a refusal is never stored: a rerun with a higher cap sends it.
                result = await self.loop.fetch(request, content, cost or Cost(), replicate, ticket, cache_ttl)
                if isinstance(result, Resend):
                    continue  # rebuilt with what the endpoint learned; looked up again under its new key
                result = self._finish(self.loop.budget_noted(result, request, asked), request)
                # Stored from a thread: an fsync must not hold up every other call's I/O.
                if is_storable(result) and self.cache.enabled:
                    result = await asyncio.to_thread(self._store, key, material, result)
                return result

    def _store(self, key: str, material: dict, result: CallResult) -> CallResult:
        """Cache an outcome; a store that fails is remembered (the run stops sending) and noted."""
        try:
            self.cache.put(key, material, {"payload": result.raw, "http_status": result.http_status,
                                           "attempts": result.attempts, "latency_s": result.latency_s,
                                           "started_at": result.started_at, "notes": list(result.notes),
                                           "batched": result.batched})
        except StorageError as exc:
            self.storage_error = self.storage_error or exc
            return replace(result, notes=(*result.notes, f"not cached: {exc}"))
        return result

    def cached(self, key: str, temperature_sent: bool | str) -> CallResult | None:
        """The outcome ``call`` would serve for a request key without sending, or None (it must be called).

        For a request made ahead (runtime/run/plan.py) whose bytes are no longer at hand: once this
        endpoint has learned to send requests otherwise (without temperature, a lowered budget),
        None (``call`` rebuilds the request and looks it up under its new key).
        """
        if (self.temperature_dropped and temperature_sent) or self.budget_lowered is not None:
            return None
        if key in self.ready:
            return self.ready[key]
        hit = self._hit(key)
        return None if hit is None else self.settle(hit, temperature_sent)

    def _lookup(self, key: str, request: WireRequest) -> CallResult | None:
        hit = self._hit(key)
        return None if hit is None else self._finish(hit, request)

    def _hit(self, key: str) -> CallResult | None:
        """The cache's outcome for a key, as a cache hit (counted), before ``_finish``; None for a miss."""
        started, started_at = time.perf_counter(), time.time()
        stored = self.cache.get(key)
        if stored is None:
            return None
        payload, echoed = scrub(stored["payload"])  # an entry written before replies were scrubbed
        result = interpret(self.provider, payload, stored["http_status"], stored["attempts"],
                           time.perf_counter() - started)
        if result.reason == FailReason.BAD_RESPONSE:  # an older run cached ``choices: []`` as an answer: ask again
            return None
        self.hits += 1
        notes = stored.get("notes")
        notes = tuple(n for n in notes if isinstance(n, str)) if isinstance(notes, list) else ()
        notes += (ECHO_NOTE,) if echoed and ECHO_NOTE not in notes else ()
        return replace(result, started_at=started_at, cached=True, notes=notes,
                       original_latency_s=float(stored["latency_s"]), batched=stored.get("batched") is True)

    #: The cache store, for outcomes that arrive by another transport (a batch's results).
    store_outcome = _store

    def _finish(self, result: CallResult, request: WireRequest) -> CallResult:
        """What every outcome gets before it is recorded: temperature sent, the served model, redaction."""
        return self.settle(result, self.provider.temperature_sent(request))

    def settle(self, result: CallResult, temperature_sent: bool | str) -> CallResult:
        """``_finish`` for an outcome whose request is no longer at hand (a batch item's)."""
        if result.served_model:
            self.served_models[result.served_model] = self.served_models.get(result.served_model, 0) + 1
        result = replace(result, temperature_sent=temperature_sent)
        if result.ok:
            return result
        return replace(result, error=redact(result.error), raw=scrub(result.raw)[0])  # iterative: any depth


def local_transport(answer: Callable[[Any, int], tuple[int, dict]]) -> httpx.AsyncBaseTransport:
    """An in-process transport for providers that answer locally (the offline provider)."""

    def handle(request: httpx.Request) -> httpx.Response:
        status, payload = answer(json.loads(request.content), int(request.headers.get(REPLICATE_HEADER, "0")))
        return httpx.Response(status, json=payload)

    return httpx.MockTransport(handle)
