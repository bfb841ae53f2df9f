"""The one shared HTTP call: transports, concurrency bound, timeouts and the retry rule.

Every provider goes through ``Endpoint.call``; providers never touch a socket.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from wildtrace.core import records as R
from wildtrace.core.records import CallResult, Usage
from wildtrace.providers.base import Provider, WireRequest
from wildtrace.runtime.retry import TRANSIENT_STATUS, RetryPolicy, parse_retry_after

#: Phrases providers use when the prompt does not fit the window (a 400, not a crash).
CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "exceeds the maximum number of tokens",
    "input token count",
)


def encode_body(body: dict) -> bytes:
    """The exact bytes sent (and hashed for the cache): compact JSON, UTF-8, not ASCII-escaped."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def interpret(provider: Provider, payload: Any, status: int, attempts: int, latency_s: float) -> CallResult:
    """A 2xx body → outcome. Refusals and empty/whitespace answers are failures, not retried."""
    try:
        completion = provider.parse_response(payload)
    except (ValueError, TypeError, AttributeError) as exc:
        return CallResult(False, None, R.BAD_RESPONSE, f"unreadable {provider.name} response: {exc}", None, Usage(),
                          attempts, latency_s, status, payload)
    if completion.refusal:
        return CallResult(False, completion.text, R.REFUSAL, str(completion.refusal), completion.finish_reason,
                          completion.usage, attempts, latency_s, status, payload)
    if completion.text is None or not completion.text.strip():
        return CallResult(False, completion.text, R.EMPTY_OUTPUT, "empty or whitespace-only output",
                          completion.finish_reason, completion.usage, attempts, latency_s, status, payload)
    return CallResult(True, completion.text, None, None, completion.finish_reason, completion.usage, attempts,
                      latency_s, status, payload)


def is_storable(result: CallResult) -> bool:
    """Outcomes the provider really produced (paid for): answers, refusals, empty answers.

    HTTP errors and exhausted retries are not stored, so a rerun tries them again.
    """
    return result.ok or result.reason in (R.REFUSAL, R.EMPTY_OUTPUT)


def _decode(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"non_json_body": response.text[:2000]}


def proxy_for(base_url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to ``base_url`` (NO_PROXY honoured), as a client would pick."""
    parts = urllib.parse.urlsplit(base_url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verified TLS context per process: loading the CA bundle costs ~20 ms each time."""
    return httpx.create_ssl_context()


@dataclass
class Attempt:
    """What one HTTP attempt gave: a response, or a transport failure."""

    response: httpx.Response | None
    failure: str | None  # "timeout: …" or "transport_error: …"


class Endpoint:
    """One endpoint (the model, or a judge) with its own connections and concurrency bound."""

    def __init__(
        self,
        provider: Provider,
        api_key: str | None,
        retry: RetryPolicy,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[str], None] | None = None,
        seed: int | None = None,
    ) -> None:
        spec = provider.spec
        self.provider = provider
        self.retry = retry
        self.on_retry = on_retry or (lambda label: None)
        self._rng = random.Random(seed)
        self._auth = provider.auth_headers(api_key) if api_key else {}
        self._timeout = httpx.Timeout(spec.timeout_s, connect=min(spec.timeout_s, 30.0))
        # The concurrency bound is a queue of transports, one connection each. httpcore's shared
        # pool rescans every connection for every request (≈3 ms a request at 16 in flight,
        # measured in benchmarks/throughput.py); a private one-connection pool per slot is O(1).
        proxy = proxy_for(spec.base_url)
        self._transports = [transport or self._transport(proxy) for _ in range(spec.max_concurrency)]
        self._slots: asyncio.Queue[httpx.AsyncBaseTransport] = asyncio.Queue()
        for slot in self._transports:
            self._slots.put_nowait(slot)
        self._extensions = {"timeout": self._timeout.as_dict()}
        self.requests_sent = 0
        self.retries = 0

    @staticmethod
    def _transport(proxy: str | None) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport(verify=_ssl_context(), retries=0, proxy=proxy,
                                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))

    async def aclose(self) -> None:
        """Close every slot's connection."""
        await asyncio.gather(*(transport.aclose() for transport in self._transports))

    async def _attempt(self, transport: httpx.AsyncBaseTransport, request: WireRequest, content: bytes) -> Attempt:
        # Straight to the slot's transport: none of a client's layers (redirects, cookies,
        # auth flows, proxy mounts) apply to a JSON POST, and skipping them is measurably faster.
        headers = {"content-type": "application/json", **request.headers, **self._auth}
        wire = httpx.Request("POST", request.url, content=content, headers=headers, extensions=self._extensions)
        self.requests_sent += 1
        try:
            response = await transport.handle_async_request(wire)
            try:
                await response.aread()
            finally:
                await response.aclose()
            return Attempt(response, None)
        except httpx.TimeoutException as exc:
            return Attempt(None, f"timeout: {type(exc).__name__} after {self.provider.spec.timeout_s}s")
        except httpx.TransportError as exc:
            return Attempt(None, f"transport_error: {type(exc).__name__}: {exc}")

    async def call(self, request: WireRequest, content: bytes | None = None) -> CallResult:
        """Send one logical request: up to 1 + max_retries attempts under the endpoint's bound.

        ``content`` is ``encode_body(request.body)`` when the caller already has it.
        """
        content = encode_body(request.body) if content is None else content
        slot = await self._slots.get()
        try:
            started, started_at = time.perf_counter(), time.time()
            for attempt_no in range(1, self.retry.max_retries + 2):
                attempt = await self._attempt(slot, request, content)
                response = attempt.response
                if response is not None and response.is_success:
                    return replace(interpret(self.provider, _decode(response), response.status_code, attempt_no,
                                             time.perf_counter() - started), started_at=started_at)
                transient = response is None or response.status_code in TRANSIENT_STATUS
                error = attempt.failure if response is None else self._http_error(response)
                if not transient:
                    return replace(self._failed(self._reason(response), error, attempt_no, started, response),
                                   started_at=started_at)
                if attempt_no > self.retry.max_retries:
                    return replace(self._failed(R.RETRIES_EXHAUSTED, error, attempt_no, started, response),
                                   started_at=started_at)
                self.retries += 1
                self.on_retry(self.provider.spec.label)
                retry_after = parse_retry_after(response.headers.get("retry-after")) if response is not None else None
                await asyncio.sleep(self.retry.delay(attempt_no, retry_after, self._rng))
        finally:
            self._slots.put_nowait(slot)
        raise AssertionError("unreachable")

    def _http_error(self, response: httpx.Response) -> str:
        return f"HTTP {response.status_code}: {self.provider.error_message(_decode(response))}"

    @staticmethod
    def _reason(response: httpx.Response) -> str:
        text = response.text.lower()
        if response.status_code in (400, 413, 422) and any(m in text for m in CONTEXT_LENGTH_MARKERS):
            return R.CONTEXT_LENGTH
        return R.HTTP_ERROR

    @staticmethod
    def _failed(reason: str, error: str | None, attempts: int, started: float, response: httpx.Response | None) -> CallResult:
        raw = _decode(response) if response is not None else None
        return CallResult(False, None, reason, error, None, Usage(), attempts, time.perf_counter() - started,
                          response.status_code if response is not None else None, raw)


def local_transport(answer: Callable[[Any], tuple[int, dict]]) -> httpx.AsyncBaseTransport:
    """An in-process transport for providers that answer locally (the offline provider)."""

    def handle(request: httpx.Request) -> httpx.Response:
        status, payload = answer(json.loads(request.content))
        return httpx.Response(status, json=payload)

    return httpx.MockTransport(handle)
