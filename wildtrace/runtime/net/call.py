"""The call loop: attempts of one request until the pure ``retry.next_step`` ends them.

Between the endpoint (runtime/net/endpoint.py: cache, lock, spend, store) and one attempt
(runtime/net/attempt.py). Each attempt waits for the rate window and a slot (``max_concurrency``
in flight), is sent, and its outcome is decided on: retried after the backoff (the server's
hint honoured), a quota refusal that fails this and every later call of the endpoint at once,
or a Resend when a 400 taught a rule (temperature dropped, the output limit lowered) that
every later request of the endpoint follows, as a request prepared before it was learned does
before it is sent. A 2xx is scrubbed of the run's keys where it enters, then parsed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from wildtrace.core.records import CallResult, FailReason, Usage
from wildtrace.providers.base import Provider, WireRequest
from wildtrace.runtime.net.attempt import Attempt, Sender, encode_body, preview
from wildtrace.runtime.spend.cap import Ticket, may_be_billed
from wildtrace.runtime.net.ratelimit import AdaptiveLimit, Cost
from wildtrace.runtime.net.retry import Quota, Resend, Retry, RetryPolicy, Seen, next_step, retry_hint
from wildtrace.runtime.net.secrets import ECHO_NOTE, redact, scrub

log = logging.getLogger(__name__)

#: The replicate index, told to in-process answerers only (the offline provider's sampling seed).
REPLICATE_HEADER = "x-wildtrace-replicate"
#: A redirect's Location is shown up to this many characters.
LOCATION_CHARS = 300


def interpret(provider: Provider, payload: Any, status: int, attempts: int, latency_s: float) -> CallResult:
    """A 2xx body → outcome. Refusals and empty/whitespace answers are failures, not retried.

    A body that is not an answer of the wire format is ``bad_response`` (``Endpoint`` retries it).
    """
    try:
        completion = provider.parse_response(payload)
    except (ValueError, TypeError, AttributeError) as exc:
        return CallResult(ok=False, text=None, reason=FailReason.BAD_RESPONSE,
                          error=f"no answer in the {provider.name} format: {exc}", finish_reason=None, usage=Usage(),
                          attempts=attempts, latency_s=latency_s, http_status=status, raw=payload)
    base = CallResult(ok=True, text=completion.text, reason=None, error=None, finish_reason=completion.finish_reason,
                      usage=completion.usage, attempts=attempts, latency_s=latency_s, http_status=status, raw=payload,
                      reasoning=completion.reasoning, served_model=completion.served_model)
    if completion.refusal:
        return replace(base, ok=False, reason=FailReason.REFUSAL, error=str(completion.refusal))
    if completion.text is None or not completion.text.strip():
        return replace(base, ok=False, reason=FailReason.EMPTY_OUTPUT, error="empty or whitespace-only output")
    return base


class CallLoop:
    """An endpoint's attempts under its retry rule, rate window and concurrency bound, and what 400s taught it."""

    def __init__(self, provider: Provider, sender: Sender, retry: RetryPolicy, local: bool = False,
                 on_retry: Callable[[str], None] | None = None, seed: int | None = None) -> None:
        spec = provider.spec
        self.provider = provider
        self.sender = sender
        self.retry = retry
        self.local = local  # answered in-process: told the replicate index
        self.on_retry = on_retry or (lambda label: None)
        self._rng = random.Random(seed)
        self._slots = asyncio.Semaphore(spec.max_concurrency)
        # The endpoint-wide pause after a 429/529 never outlasts what the retry rule itself would wait.
        self.limit = AdaptiveLimit(spec.max_concurrency,
                                   pause_max_s=min(60.0, retry.backoff_max_s, retry.retry_after_max_s),
                                   probe=not local and sender.streaming)
        self.retries = 0
        self.temperature_dropped = False
        self.budget_lowered: int | None = None  # the documented limit sent since the endpoint rejected more
        self.quota_error: str | None = None

    @property
    def label(self) -> str:
        """The endpoint's role in records: "model" or a judge key."""
        return self.provider.spec.label

    async def fetch(self, request: WireRequest, content: bytes, cost: Cost,
                     replicate: int, ticket: Ticket | None = None, cache_ttl: str | None = None) -> CallResult | Resend:
        """Attempts until ``retry.next_step`` ends them: an outcome, or a Resend (not an attempt of the task).

        ``ticket``: each attempt sent after one that may have been billed reserves its own worst case
        (runtime/spend/cap.py); one the cap refuses ends the call ``budget_exhausted``."""
        started, started_at = time.perf_counter(), time.time()

        def failed(reason: FailReason, error: str | None, attempts: int, attempt: Attempt | None = None) -> CallResult:
            return CallResult(ok=False, text=None, reason=reason, error=error, finish_reason=None, usage=Usage(),
                              attempts=attempts, latency_s=time.perf_counter() - started,
                              http_status=attempt.status if attempt else None,
                              raw=attempt.payload if attempt else None, started_at=started_at)

        if self.quota_error is not None:
            return failed(FailReason.QUOTA_EXHAUSTED,
                          f"not sent: an earlier call was refused for quota ({self.quota_error})", 0)
        wire = self.provider.with_cache_hint(request, cache_ttl)  # sent, never keyed: the key is the plain request's
        wire = self.provider.stream_request(wire) if self.sender.streaming else wire
        if wire.body is not request.body:  # a hint or streaming changed the body; a plain one was encoded for the key
            content = encode_body(wire.body)
        if self.local:  # the in-process answerer seeds its sampling from the replicate index
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
            error = (f"response body larger than {self.sender.max_response_bytes} bytes (max_response_mb, "
                     "counted after decoding); not kept")
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
                    attempt = await self.sender.send(wire, content, functools.partial(self.limit.observe, grant))
        finally:
            self.limit.release(grant, attempt.status, attempt.headers, attempt.payload)
        return attempt

    # ------------------------------------------------------------------ the learned rules

    def _has_temperature(self, request: WireRequest) -> bool:
        return self.provider.without_temperature(request).body != request.body

    def as_learned(self, request: WireRequest) -> WireRequest:
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
        return self.as_learned(wire).body != wire.body

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

    def budget_noted(self, result: CallResult, request: WireRequest, asked: int | None) -> CallResult:
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
    def _redirect(attempt: Attempt) -> str:
        """A 3xx is never followed (a POST with a key is not re-sent elsewhere): say where it pointed."""
        location = attempt.headers.get("location")
        where = f"a redirect to {preview(location.encode(), LOCATION_CHARS)}" if location \
            else "a redirect without a Location header"
        return f"HTTP {attempt.status}: {where} (not followed: point base_url at the endpoint itself)"
