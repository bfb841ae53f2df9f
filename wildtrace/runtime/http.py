"""The one shared HTTP call: cache, concurrency bound, streaming, timeouts, retries.

Every provider goes through ``Endpoint.call``; providers never touch a socket. This is the
only place that retries, times out, bounds and caches:

- the outcome cache is looked up first (hits never wait for a slot), and a call in flight
  in another process is waited for rather than paid twice;
- requests are streamed where the endpoint streams (``timeout_s`` is then the longest
  silence allowed between bytes, ``max_call_s`` bounds one attempt), bodies are bounded;
- every request asks for ``Accept-Encoding: identity``; a gzip/deflate body sent anyway is
  decoded incrementally, and the size bound counts the decoded bytes (a bomb stops at it);
- the retry rule: transient statuses and transport failures retry with backoff, honouring
  the server's hints; a 2xx that holds no answer of the wire format (``choices: []``, an
  empty body, an HTML page) is a bad response, retried the same way and never cached; a
  quota refusal fails this and every later call of the endpoint at once; a 400 that rejects
  temperature is sent again without it (not an attempt), a 400 that rejects the output budget
  is sent again with the model's documented limit when one is known (not an attempt either),
  and so is every request prepared before that was learned, before it is sent. The decision
  for each attempt is ``retry.next_step`` (pure); ``_fetch`` is the loop that acts on it;
- every reply is scrubbed of the run's keys where it enters (a 2xx that echoes the key, too),
  and every error text and raw failure body is redacted before it is recorded.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import random
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from wildtrace.core import jsonsafe
from wildtrace.core.records import CallResult, FailReason, Usage
from wildtrace.providers.base import IncompleteStream, Provider, StreamError, WireRequest
from wildtrace.runtime.budget import Ticket, may_be_billed
from wildtrace.runtime.cache import FILE_THREADS, Cache, StorageError, cache_key
from wildtrace.runtime.client import make_client
from wildtrace.runtime.ratelimit import AdaptiveLimit, Cost, Grant
from wildtrace.runtime.retry import Quota, Resend, Retry, RetryPolicy, Seen, failure_reason, next_step, retry_hint
from wildtrace.runtime.secrets import ECHO_NOTE, redact, scrub

log = logging.getLogger(__name__)

#: The replicate index, told to in-process answerers only (the offline provider's sampling seed).
REPLICATE_HEADER = "x-wildtrace-replicate"
#: An error body is kept to this many bytes; the provider's message is in its first lines.
ERROR_BODY_LIMIT = 1 << 20

#: What every request asks for: an uncompressed body (a server may still compress; see ``decoded_body``).
ACCEPT_ENCODING = "identity"
#: The Content-Encodings decoded here, with zlib's window bits (``deflate`` is told by its first bytes).
ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: One decoding step yields at most this many bytes, so the size bound stops a bomb within one step.
DECODE_STEP = 64 << 10
#: More layers than this ("gzip, gzip, …") is not a real server; refused rather than nested.
MAX_ENCODINGS = 4
#: What a bad response's failure text shows of what arrived (characters, control characters escaped).
PREVIEW_CHARS = 160
#: The bytes of a body kept for that preview.
HEAD_BYTES = 1024
#: A redirect's Location is shown up to this many characters.
LOCATION_CHARS = 300


class UndecodableBody(Exception):
    """A body in a Content-Encoding not decoded here, or whose bytes do not decode."""


def content_encodings(value: str) -> list[str]:
    """The Content-Encodings a body went through, in the order applied (``identity`` dropped)."""
    return [e for e in (part.strip().lower() for part in value.split(",")) if e and e != "identity"]


def _is_zlib(head: bytes) -> bool:
    """Whether a deflate body starts with a zlib header (RFC 9110) rather than raw deflate (some servers)."""
    return head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and ((head[0] << 8) | head[1]) % 31 == 0


class _Inflater:
    """One gzip or deflate layer, incremental: at most DECODE_STEP bytes out per step, so memory
    stays bounded whatever the body expands to; zlib errors become UndecodableBody."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding != "deflate"
        self._z: Any = None  # made on the first two bytes (deflate: they tell zlib from raw deflate)
        self._head = b""  # bytes kept until two are there to look at
        self._fed = False
        self._over = False  # the stream ended and what followed was not another gzip member: ignored

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next piece of the body, in steps."""
        try:
            yield from self._feed(data)
        except zlib.error as exc:
            raise UndecodableBody(f"the {self.encoding} body does not decode: {exc}") from None

    def _feed(self, data: bytes) -> Iterator[bytes]:
        data, self._head = self._head + data, b""
        self._fed = self._fed or bool(data)
        while data and not self._over:
            if self._z is None or self._z.eof:
                if len(data) < 2:
                    self._head = data
                    return
                if self._z is None:
                    wbits = ZLIB_WBITS["gzip"] if self._gzip else zlib.MAX_WBITS if _is_zlib(data) else -zlib.MAX_WBITS
                elif self._gzip and data[:2] == b"\x1f\x8b":  # gzip bodies may hold several members
                    wbits = ZLIB_WBITS["gzip"]
                else:
                    self._over = True
                    return
                self._z = zlib.decompressobj(wbits)
            out = self._z.decompress(data, DECODE_STEP)
            data = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            if out:
                yield out

    def finish(self) -> None:
        """At the end of the body: a stream cut before its end does not decode."""
        if self._fed and (self._z is None or not self._z.eof):
            raise UndecodableBody(f"the {self.encoding} body ends before its compressed stream does")


async def _inflated(chunks: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    layer = _Inflater(encoding)
    async for chunk in chunks:
        for piece in layer.feed(chunk):
            yield piece
    layer.finish()


def decoded_body(chunks: AsyncIterator[bytes], content_encoding: str) -> AsyncIterator[bytes]:
    """The body's bytes with its Content-Encoding undone, in steps of at most DECODE_STEP.

    Raises UndecodableBody at once for an encoding not decoded here (br, zstd, compress: no
    bounded decoder is installed, and the request asked for identity), and while reading
    for bytes that do not decode.
    """
    encodings = content_encodings(content_encoding)
    if len(encodings) > MAX_ENCODINGS:
        raise UndecodableBody(f"Content-Encoding of {len(encodings)} layers is not decoded here")
    for encoding in reversed(encodings):
        if encoding not in ZLIB_WBITS:
            raise UndecodableBody(f"Content-Encoding {encoding[:40]} is not decoded here (only gzip and deflate; "
                                  "the request asked for identity)")
    for encoding in reversed(encodings):
        chunks = _inflated(chunks, encoding)
    return chunks


def preview(data: bytes, limit: int = PREVIEW_CHARS) -> str:
    """The first characters of some bytes from outside, control characters escaped, "…" when cut."""
    text = data.decode("utf-8", "replace")
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def encode_body(body: dict) -> bytes:
    """The exact bytes sent (and hashed for the cache): compact JSON, UTF-8, not ASCII-escaped."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def interpret(provider: Provider, payload: Any, status: int, attempts: int, latency_s: float) -> CallResult:
    """A 2xx body → outcome. Refusals and empty/whitespace answers are failures, not retried.

    A body that is not an answer of the wire format is ``bad_response`` (``Endpoint`` retries it).
    """
    try:
        completion = provider.parse_response(payload)
    except (ValueError, TypeError, AttributeError) as exc:
        return CallResult(False, None, FailReason.BAD_RESPONSE, f"no answer in the {provider.name} format: {exc}", None,
                          Usage(), attempts, latency_s, status, payload)
    base = CallResult(True, completion.text, None, None, completion.finish_reason, completion.usage, attempts,
                      latency_s, status, payload, reasoning=completion.reasoning, served_model=completion.served_model)
    if completion.refusal:
        return replace(base, ok=False, reason=FailReason.REFUSAL, error=str(completion.refusal))
    if completion.text is None or not completion.text.strip():
        return replace(base, ok=False, reason=FailReason.EMPTY_OUTPUT, error="empty or whitespace-only output")
    return base


def is_storable(result: CallResult) -> bool:
    """Outcomes the provider really produced (paid for): answers, refusals, empty answers.

    HTTP errors and exhausted retries are not stored, so a rerun tries them again.
    """
    return result.ok or result.reason in (FailReason.REFUSAL, FailReason.EMPTY_OUTPUT)


def strict(value: Any) -> tuple[Any, tuple[str, ...]]:
    """``value`` with non-finite numbers as null (so the cache and run files can hold it), and a note."""
    clean, paths = jsonsafe.sanitize(value)
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
            value = jsonsafe.loads(data)  # huge numbers, odd bytes: never raises but ValueError
        except ValueError:
            return {"non_json_body": data[:2000].decode("utf-8", "replace")}, ()
    return strict(value)


@dataclass
class Attempt:
    """What one HTTP attempt gave: a status with its headers and decoded body, or a transport failure."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    payload: Any = None
    failure: str | None = None  # "timeout: …", "transport_error: …"
    too_large: bool = False
    notes: tuple[str, ...] = ()  # e.g. non-finite numbers the body held, replaced by null
    bad: str | None = None  # a 2xx whose bytes could not be read (an encoding): why
    size: int = 0  # the body's (decoded) bytes; -1: not read
    head: bytes = b""  # its first HEAD_BYTES, for the failure text of a bad response
    stale: bool = False  # not sent: prepared before the endpoint learned to drop temperature or lower the budget
    unsent: bool = False  # failed before the request left (no connection): nothing can have been billed

    @property
    def success(self) -> bool:
        """A 2xx with a body to read."""
        return (self.status is not None and 200 <= self.status < 300 and self.failure is None and not self.too_large
                and self.bad is None and not self.stale)


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
        self.retry = retry
        self.cache = cache or Cache(Path(), enabled=False)
        self.on_retry = on_retry or (lambda label: None)
        self.max_response_bytes = max_response_bytes
        self._local = type(provider).local  # answered in-process (answer_locally)
        self.streaming = spec.stream and provider.streams and not self._local
        self._rng = random.Random(seed)
        self._auth = provider.auth_headers(api_key) if api_key else {}
        # One client, httpx's own pool of at most max_concurrency connections; the slots bound what is in flight.
        self._client = make_client(spec.timeout_s, spec.max_concurrency, transport)
        self._slots = asyncio.Semaphore(spec.max_concurrency)
        # The endpoint-wide pause after a 429/529 never outlasts what the retry rule itself would wait.
        self.limit = AdaptiveLimit(spec.max_concurrency,
                                   pause_max_s=min(60.0, retry.backoff_max_s, retry.retry_after_max_s))
        self.requests_sent = 0
        self.retries = 0
        self.hits = 0
        self.temperature_dropped = False
        self.budget_lowered: int | None = None  # the documented limit sent since the endpoint rejected more
        self.quota_error: str | None = None
        self.served_models: dict[str, int] = {}
        self.storage_error: StorageError | None = None  # the first store that failed; the run stops sending
        #: Outcomes this run already has by cache key (batch mode: runtime/batch), returned instead of sending.
        self.ready: dict[str, CallResult] = {}

    @property
    def auth(self) -> dict[str, str]:
        """The headers that carry the key (for the batch API's own requests; never logged)."""
        return dict(self._auth)

    @property
    def label(self) -> str:
        """The endpoint's role in records: "model" or a judge key."""
        return self.provider.spec.label

    async def aclose(self) -> None:
        """Close the endpoint's connections."""
        await self._client.aclose()

    # ------------------------------------------------------------------ the call

    def prepare(self, request: WireRequest, replicate: int = 0) -> Prepared:
        """The request's bytes and cache key, made ahead of ``call`` (any thread: no state is touched)."""
        return prepare_request(self.provider, request, replicate)

    async def call(self, request: WireRequest, replicate: int = 0, cost: Cost | None = None,
                   prepared: Prepared | None = None, ticket: Ticket | None = None,
                   storing: Callable[[], None] | None = None) -> CallResult:
        """The outcome of one logical request: from the cache, or fetched (with retries) and stored.

        ``cost``: what the request counts against the rate limits (its estimated tokens), for pacing;
        ``prepared``: ``prepare(request, replicate)`` already made (off the event loop);
        ``ticket``: the call's claim on a spend cap, reserved on a cache miss just before sending
        (runtime/budget.py); refused, the call is not sent and comes back ``budget_exhausted``;
        ``storing``: told when the outcome is in hand and only its store (an fsync) is left, so a
        caller may send its next request meanwhile; this call still returns once it is stored.
        """
        asked = self.provider.budget(request) if self.provider.spec.max_output_tokens is not None else None
        while True:
            request = self._as_learned(request)
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
                # Each attempt reserves in _fetch; a refusal is never stored: a rerun with a higher cap sends it.
                result = await self._fetch(request, content, cost or Cost(), replicate, ticket)
                if isinstance(result, Resend):
                    continue  # rebuilt with what the endpoint learned; looked up again under its new key
                result = self._finish(self._budget_noted(result, request, asked), request)
                # Stored from a thread: an fsync must not hold up every other call's I/O.
                if is_storable(result) and self.cache.enabled:
                    if storing is not None:
                        storing()
                    store = functools.partial(contextvars.copy_context().run, self._store, key, material, result)
                    result = await asyncio.get_running_loop().run_in_executor(FILE_THREADS, store)
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

        For a request made ahead (runtime/plan.py) whose bytes are no longer at hand: once this
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

    async def _fetch(self, request: WireRequest, content: bytes, cost: Cost,
                     replicate: int, ticket: Ticket | None = None) -> CallResult | Resend:
        """Attempts until ``retry.next_step`` ends them: an outcome, or a Resend (not an attempt of the task).

        ``ticket``: each attempt sent after one that may have been billed reserves its own worst case
        (runtime/budget.py); one the cap refuses ends the call ``budget_exhausted``."""
        started, started_at = time.perf_counter(), time.time()

        def failed(reason: FailReason, error: str | None, attempts: int, attempt: Attempt | None = None) -> CallResult:
            return CallResult(False, None, reason, error, None, Usage(), attempts, time.perf_counter() - started,
                              attempt.status if attempt else None, attempt.payload if attempt else None,
                              started_at=started_at)

        if self.quota_error is not None:
            return failed(FailReason.QUOTA_EXHAUSTED,
                          f"not sent: an earlier call was refused for quota ({self.quota_error})", 0)
        wire = self.provider.with_cache_hint(request)  # sent, never keyed: the key is the plain request's
        wire = self.provider.stream_request(wire) if self.streaming else wire
        if wire.body is not request.body:  # a hint or streaming changed the body; a plain one was encoded for the key
            content = encode_body(wire.body)
        if self._local:  # the in-process answerer seeds its sampling from the replicate index
            wire = replace(wire, headers={**wire.headers, REPLICATE_HEADER: str(replicate)})
        for attempt_no in range(1, self.retry.max_retries + 2):
            if ticket is not None and not await ticket.reserve():
                return replace(ticket.refusal(attempt_no - 1), started_at=started_at)
            attempt = await self._send(wire, content, cost)
            if ticket is not None:
                ticket.sent(not attempt.stale and not attempt.unsent and may_be_billed(attempt.status))
            result = self._received(attempt, attempt_no, time.perf_counter() - started) if attempt.success else None
            if result is not None and result.reason != FailReason.BAD_RESPONSE:
                return replace(result, started_at=started_at)
            seen = self._seen(attempt, attempt_no, request, result)
            step = next_step(seen, self.retry)
            if isinstance(step, Retry):
                if ticket is not None:
                    ticket.attempted()
                self.retries += 1
                self.on_retry(self.label)
                await asyncio.sleep(self.retry.delay(attempt_no, step.retry_after, self._rng))
            elif isinstance(step, Resend):
                self._learn(step, attempt, seen.budget)
                return step
            elif isinstance(step, Quota):
                self.quota_error = step.error
                log.warning("%s: quota or spend limit reached (%s); the endpoint's remaining calls fail at once",
                            self.label, redact(step.error))
                return failed(FailReason.QUOTA_EXHAUSTED, step.error, attempt_no, attempt)
            else:
                return failed(step.reason, step.error, attempt_no, attempt)
        raise AssertionError("next_step ends a loop of max_retries + 1 attempts inside it")

    def _seen(self, attempt: Attempt, attempt_no: int, request: WireRequest, result: CallResult | None) -> Seen:
        """An attempt that brought no answer, as the plain facts ``next_step`` decides on."""
        if result is not None:  # a 2xx that is not an answer of the wire format
            error = result.error or ""
        elif attempt.bad is not None:
            error = self._arrived(attempt, attempt.bad)
        elif attempt.too_large:
            error = (f"response body larger than {self.max_response_bytes} bytes (max_response_mb, counted after "
                     "decoding); not kept")
        else:
            error = attempt.failure or self._http_error(attempt)
        rejected = attempt.status in (400, 422)
        spec = self.provider.spec
        return Seen(attempt_no, attempt.status, attempt.headers, attempt.payload, error,
                    bad=result is not None or attempt.bad is not None, too_large=attempt.too_large,
                    stale=attempt.stale, temperature=rejected and self._has_temperature(request),
                    budget=self.provider.budget(request) if rejected and spec.max_output_tokens is not None else None,
                    output_limit=spec.max_output_tokens,
                    retry_after=retry_hint(attempt.headers, attempt.payload) if attempt.status is not None else None)

    # ------------------------------------------------------------------ one attempt

    async def _send(self, wire: WireRequest, content: bytes, cost: Cost) -> Attempt:
        grant = await self.limit.acquire(cost)
        attempt = Attempt(failure="transport_error: not sent", unsent=True)
        try:
            async with self._slots:
                # A rule may have been learned while this waited for its turn (or backed off): such a
                # request is rebuilt (without temperature, with the lowered budget), never sent as prepared.
                if self._outdated(wire):
                    attempt = Attempt(stale=True)
                else:
                    attempt = self._undisguise(await self._attempt(wire, content, grant))
        finally:
            self.limit.release(grant, attempt.status, attempt.headers, attempt.payload)
        return attempt

    async def _attempt(self, request: WireRequest, content: bytes, grant: Grant) -> Attempt:
        headers = {"content-type": "application/json", "accept-encoding": ACCEPT_ENCODING, **request.headers,
                   **self._auth}
        spec = self.provider.spec
        self.requests_sent += 1
        try:
            async with asyncio.timeout(spec.max_call_s):
                wire = self._client.build_request("POST", request.url, content=content, headers=headers)
                response = await self._client.send(wire, stream=True)
                try:
                    return await self._read(response, grant)
                finally:
                    await response.aclose()
        except TimeoutError:
            return Attempt(failure=f"timeout: the call took longer than max_call_s={spec.max_call_s}s")
        except httpx.TimeoutException as exc:
            return Attempt(failure=f"timeout: {type(exc).__name__}: no byte for timeout_s={spec.timeout_s}s",
                           unsent=isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)))
        except httpx.TransportError as exc:
            return Attempt(failure=f"transport_error: {type(exc).__name__}: {exc}",
                           unsent=isinstance(exc, httpx.ConnectError))
        except httpx.InvalidURL as exc:
            return Attempt(failure=f"transport_error: invalid URL: {exc}")

    async def _read(self, response: httpx.Response, grant: Grant) -> Attempt:
        status, headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
        self.limit.observe(grant, status, headers)  # a stream's budget headers pace the next sends now
        success = 200 <= status < 300
        try:
            chunks = decoded_body(self._chunks(response), headers.get("content-encoding", ""))
        except UndecodableBody as exc:
            if success:
                return Attempt(status, headers, bad=str(exc), size=-1)  # not read: its bytes mean nothing here
            chunks = self._chunks(response)  # an error body: its status says what matters; bytes kept as sent
        if success and self.streaming and "text/event-stream" in headers.get("content-type", ""):
            return await self._read_stream(chunks, status, headers)
        bound = self.max_response_bytes if success else ERROR_BODY_LIMIT
        body = bytearray()
        try:
            async for chunk in chunks:
                body += chunk
                if len(body) > bound:
                    if success:
                        return Attempt(status, headers, too_large=True)
                    break  # an error body: its first megabyte says what went wrong
        except UndecodableBody as exc:
            if success:
                return Attempt(status, headers, bad=str(exc), size=len(body), head=bytes(body[:HEAD_BYTES]))
        data = bytes(body[:bound])
        payload, notes = decode_json(data)
        if success and self.streaming and isinstance(payload, dict) and "non_json_body" in payload \
                and data.lstrip()[:6] in (b"data:", b"event:"):
            return await self._read_stream(_replay(data), status, headers)  # events, mislabelled
        return Attempt(status, headers, payload, notes=notes, size=len(data), head=data[:HEAD_BYTES])

    @staticmethod
    async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
        # The body's bytes as sent (the Content-Encoding is undone here, within the size bound); the
        # response's stream itself, as an in-process transport's response is read before it is returned.
        async for chunk in response.stream:  # type: ignore[union-attr]
            yield chunk

    async def _read_stream(self, chunks: AsyncIterator[bytes], status: int, headers: dict[str, str]) -> Attempt:
        reader = self.provider.stream_reader()
        size, head = 0, bytearray()
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_response_bytes:
                    return Attempt(status, headers, too_large=True)
                if len(head) < HEAD_BYTES:
                    head += chunk[:HEAD_BYTES - len(head)]
                reader.feed(chunk)
            payload, notes = strict(reader.finish())
            return Attempt(status, headers, payload, notes=notes, size=size, head=bytes(head))
        except UndecodableBody as exc:
            return Attempt(status, headers, bad=str(exc), size=size, head=bytes(head))
        except StreamError as exc:  # an error event mid-stream counts as the status it stands for
            payload, _ = strict(exc.payload if exc.payload is not None else {"error": {"message": exc.message}})
            return Attempt(exc.status, headers, payload)
        except IncompleteStream as exc:
            return Attempt(failure=f"transport_error: stream cut short: {exc}")
        except ValueError as exc:  # malformed events: a bad response (the parser says so; retried)
            return Attempt(status, headers, {"malformed_stream": str(exc)[:2000]}, size=size, head=bytes(head))

    # ------------------------------------------------------------------ helpers

    def _undisguise(self, attempt: Attempt) -> Attempt:
        """A 2xx whose body is an error in disguise (GLM's network_error, MiniMax's base_resp code)
        counts as the status it stands for, so the retry rule and the quota latch see it."""
        if attempt.success:
            status = self.provider.failure_status(attempt.payload)
            if status is not None:
                attempt.status = status
        return attempt

    def _has_temperature(self, request: WireRequest) -> bool:
        return self.provider.without_temperature(request).body != request.body

    def _as_learned(self, request: WireRequest) -> WireRequest:
        """The request as this endpoint now sends it: without temperature, within the lowered budget."""
        if self.temperature_dropped:
            request = self.provider.without_temperature(request)
        if self.budget_lowered is not None:
            budget = self.provider.budget(request)
            if budget is not None and budget > self.budget_lowered:
                request = self.provider.with_budget(request, self.budget_lowered)
        return request

    def _outdated(self, wire: WireRequest) -> bool:
        """Prepared before the endpoint learned a rule that changes it (it must not be sent as it is)."""
        if not self.temperature_dropped and self.budget_lowered is None:
            return False  # nothing learned: the common case, decided without touching the body
        return self._as_learned(wire).body != wire.body

    def _learn(self, step: Resend, attempt: Attempt, asked: int | None) -> None:
        """Remember what the rejection taught, for every later request; warn once for each rule."""
        if step.drop_temperature and not self.temperature_dropped:  # calls in flight meanwhile: warn once
            self._drop_temperature(attempt)
        if step.lower_budget_to is not None and self.budget_lowered is None:
            self._lower_budget(step.lower_budget_to, asked, attempt)

    def _lower_budget(self, limit: int, asked: int | None, attempt: Attempt) -> None:
        self.budget_lowered = limit
        spec, name = self.provider.spec, self.provider.budget_path()[-1]
        source = spec.max_output_tokens_source or "source not recorded"
        log.warning("%s (%s): the endpoint rejects %s=%s (%s); sending %s=%d, the model's documented limit (%s), "
                    "for the rest of this run, and noting it on each such call", self.label, spec.route, name, asked,
                    redact(self._http_error(attempt)), name, limit, source)

    def _budget_noted(self, result: CallResult, request: WireRequest, asked: int | None) -> CallResult:
        """A call sent with a lowered budget says so in its notes (stored with it, so a cache hit says so too)."""
        sent = self.provider.budget(request) if asked is not None else None
        if sent is None or sent == asked:
            return result
        source = self.provider.spec.max_output_tokens_source or "source not recorded"
        note = (f"{self.provider.budget_path()[-1]} lowered to {sent} (documented limit, {source}): "
                f"provider rejected {asked}")
        return replace(result, notes=(*result.notes, note))

    def _drop_temperature(self, attempt: Attempt) -> None:
        self.temperature_dropped = True
        log.warning("%s (%s): the endpoint rejects temperature (%s); sending every request of this run "
                    "without it, and recording temperature_sent=false", self.label, self.provider.spec.route,
                    redact(self._http_error(attempt)))

    def _received(self, attempt: Attempt, attempt_no: int, latency_s: float) -> CallResult:
        """A 2xx as it enters the harness: scrubbed of the run's keys (a gateway may echo one into
        the answer or any field) before it is parsed, so nothing after sees it — the run files, the
        cache, MLflow, the judge prompt that quotes the answer. A bad response says what arrived."""
        payload, echoed = scrub(attempt.payload)
        result = interpret(self.provider, payload, attempt.status or 200, attempt_no, latency_s)
        result = replace(result, notes=attempt.notes + ((ECHO_NOTE,) if echoed else ()))
        if result.reason == FailReason.BAD_RESPONSE:
            return replace(result, error=self._arrived(attempt, result.error or ""))
        return result

    @staticmethod
    def _arrived(attempt: Attempt, why: str) -> str:
        """``HTTP 200 text/html, 512 bytes: <!doctype html>… (why)``: what came instead of an answer."""
        kind = preview(attempt.headers.get("content-type", "").encode(), 80) or "no content-type"
        if attempt.size < 0:  # not read at all (an encoding not decoded here)
            return f"HTTP {attempt.status} {kind} ({why[:300]})"
        shown = f": {preview(attempt.head)}" if attempt.size else ""
        return f"HTTP {attempt.status} {kind}, {attempt.size} bytes{shown} ({why[:300]})"

    def _http_error(self, attempt: Attempt) -> str:
        if attempt.status is not None and 300 <= attempt.status < 400:
            return self._redirect(attempt)
        return f"HTTP {attempt.status}: {self.provider.error_message(attempt.payload)}"

    @staticmethod
    def failure_reason(attempt: Attempt) -> FailReason:
        """A final failure's reason: context_length when the provider says the prompt does not fit."""
        return failure_reason(attempt.status, attempt.payload)

    @staticmethod
    def _redirect(attempt: Attempt) -> str:
        """A 3xx is never followed (a POST with a key is not re-sent elsewhere): say where it pointed."""
        location = attempt.headers.get("location")
        where = f"a redirect to {preview(location.encode(), LOCATION_CHARS)}" if location \
            else "a redirect without a Location header"
        return f"HTTP {attempt.status}: {where} (not followed: point base_url at the endpoint itself)"


async def _replay(data: bytes) -> AsyncIterator[bytes]:
    yield data


def local_transport(answer: Callable[[Any, int], tuple[int, dict]]) -> httpx.AsyncBaseTransport:
    """An in-process transport for providers that answer locally (the offline provider)."""

    def handle(request: httpx.Request) -> httpx.Response:
        status, payload = answer(json.loads(request.content), int(request.headers.get(REPLICATE_HEADER, "0")))
        return httpx.Response(status, json=payload)

    return httpx.MockTransport(handle)
