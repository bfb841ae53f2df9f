"""The adaptive per-endpoint limit: header reading, AIMD and pacing on a fake clock, and a real
429 storm against a loopback endpoint that allows N tokens per window."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from loopback import Call, LoopbackServer, Reply, chat

from wildtrace.runtime.ratelimit import AdaptiveLimit, Window, estimate_tokens, parse_go_duration, read_budget
from wildtrace.runtime.retry import RetryPolicy, Verdict, classify, retry_hint

WALL = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def rfc3339(seconds_from_wall: float) -> str:
    return (datetime.fromtimestamp(WALL, tz=UTC) + timedelta(seconds=seconds_from_wall)).isoformat().replace(
        "+00:00", "Z")


class FakeClock:
    """A monotonic clock and a wall clock that move only when told."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL + (self.t - 1000.0)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def limiter(max_concurrency: int = 8, **kwargs) -> tuple[AdaptiveLimit, FakeClock]:
    clock = FakeClock()
    return AdaptiveLimit(max_concurrency, clock=clock, wall=clock.wall, **kwargs), clock


def take(limit: AdaptiveLimit, cost: int) -> None:
    """Acquire when the limiter says it may go now (the fake clock never lets time pass)."""
    assert limit.delay_for(cost) == 0.0
    asyncio.run(limit.acquire(cost))


def openai_headers(remaining_tokens: int, reset: str, limit_tokens: int = 10_000, **extra: str) -> dict[str, str]:
    return {"x-ratelimit-limit-tokens": str(limit_tokens), "x-ratelimit-remaining-tokens": str(remaining_tokens),
            "x-ratelimit-reset-tokens": reset, **extra}


# --------------------------------------------------------------------------------------
# Pure header reading
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "seconds"),
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0s", 0.0), ("1.5s", 1.5),
     ("250us", 0.00025), (" 7s ", 7.0), ("", None), (None, None), ("abc", None), ("5", None), ("-1s", None),
     ("1x", None), ("1s junk", None), ("99999h", None), ("1" * 100 + "s", None)],
)
def test_parse_go_duration(value, seconds):
    got = parse_go_duration(value)
    assert got == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, {}),
        ({"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "29000",
          "x-ratelimit-reset-tokens": "2s", "x-ratelimit-limit-requests": "500",
          "x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "120ms"},
         {"tokens": Window(30000, 29000, 2.0), "requests": Window(500, 499, 0.12)}),
        ({"X-RateLimit-Remaining-Tokens": "10", "X-RateLimit-Reset-Tokens": "6m0s"},
         {"tokens": Window(None, 10, 360.0)}),
        ({"anthropic-ratelimit-input-tokens-limit": "400000", "anthropic-ratelimit-input-tokens-remaining": "1000",
          "anthropic-ratelimit-input-tokens-reset": rfc3339(30), "anthropic-ratelimit-requests-limit": "50",
          "anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": rfc3339(1.5),
          "anthropic-ratelimit-output-tokens-remaining": "5"},
         {"input-tokens": Window(400000, 1000, 30.0), "requests": Window(50, 0, 1.5)}),
        ({"anthropic-ratelimit-tokens-remaining": "7", "anthropic-ratelimit-tokens-reset": rfc3339(-5)},
         {"tokens": Window(None, 7, 0.0)}),  # a reset in the past: now
        ({"llm_provider-x-ratelimit-remaining-tokens": "800", "llm_provider-x-ratelimit-reset-tokens": "3s",
          "llm_provider-x-ratelimit-limit-tokens": "1000"}, {"tokens": Window(1000, 800, 3.0)}),
        ({"x-ratelimit-remaining-tokens": "5", "llm_provider-x-ratelimit-remaining-tokens": "9"},
         {"tokens": Window(None, 5, None)}),  # this hop's own numbers first
        ({"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-limit-tokens": "-1"}, {}),  # Azure's "not applicable"
        ({"x-ratelimit-remaining-tokens": "lots"}, {}),
        ({"x-ratelimit-remaining-tokens": "9" * 500}, {}),
        ({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "tomorrow"},
         {"tokens": Window(None, 10, None)}),
        ({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": str(int(WALL) + 4)},
         {"tokens": Window(None, 10, 4.0)}),  # a gateway's epoch seconds
        ({"anthropic-ratelimit-tokens-remaining": "10", "anthropic-ratelimit-tokens-reset": "2026-13-45T99:00:00Z"},
         {"tokens": Window(None, 10, None)}),
    ],
)
def test_read_budget(headers, expected):
    got = read_budget(headers, wall_now=WALL)
    assert got.keys() == expected.keys()
    for name, window in expected.items():
        assert got[name].limit == window.limit and got[name].remaining == window.remaining
        assert got[name].reset_in == (None if window.reset_in is None else pytest.approx(window.reset_in))


@pytest.mark.parametrize(("chars", "cjk", "max_tokens", "tokens"),
                         [(330, False, 0, 100), (331, False, 0, 101), (150, True, 0, 100), (0, False, 0, 1),
                          (-5, True, 0, 1), (3_300_000, False, 0, 1_000_000), (330, False, 8192, 8292)])
def test_estimate_tokens(chars, cjk, max_tokens, tokens):
    assert estimate_tokens(chars, cjk, max_tokens=max_tokens) == tokens


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_concurrency_is_checked(bad):
    with pytest.raises(ValueError, match="max_concurrency"):
        AdaptiveLimit(bad)


# --------------------------------------------------------------------------------------
# AIMD on a fake clock
# --------------------------------------------------------------------------------------

def test_429_halves_once_per_cooldown_floor_one_and_successes_add_back():
    limit, clock = limiter(8, increase_after=3, cooldown_s=1.0, pause_base_s=0.0)
    limit.release(429, {})
    assert limit.limit == 4
    limit.release(429, {})  # the same burst: counted once
    assert limit.limit == 4
    for expected in (2, 1, 1):
        clock.advance(1.0)
        limit.release(529, {})
        assert limit.limit == expected
    assert limit.throttled == 5
    for expected in (1, 1, 2, 2, 2, 3):
        limit.release(200, {})
        assert limit.limit == expected
    for _ in range(100):
        limit.release(200, {})
    assert limit.limit == 8  # never above the configured maximum


def test_concurrency_slots():
    limit, _ = limiter(2)
    take(limit, 1)
    take(limit, 1)
    assert limit.in_flight == 2 and limit.delay_for(1) is None  # wait for a slot
    limit.release(500, {})  # any outcome frees the slot
    assert limit.delay_for(1) == 0.0


def test_a_throttle_pauses_the_endpoint_for_the_hint_or_a_doubling_pause():
    limit, clock = limiter(4, pause_base_s=0.5, pause_max_s=3.0, cooldown_s=0.0)
    limit.release(429, {"retry-after": "2"})
    assert limit.delay_for(1) == pytest.approx(2.0)
    clock.advance(2.0)
    assert limit.delay_for(1) == 0.0
    waits = []
    for _ in range(5):
        limit.release(429, {})
        waits.append(limit.delay_for(1))
        clock.advance(waits[-1])
    assert waits == pytest.approx([1.0, 2.0, 3.0, 3.0, 3.0])  # 2nd..: 0.5·2^n after the hinted one, capped
    limit.release(200, {})
    limit.release(429, {})
    assert limit.delay_for(1) == pytest.approx(0.5)  # a success resets the doubling
    clock.advance(1.0)
    limit.release(429, {}, {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                                   "retryDelay": "1.5s"}]}})
    assert limit.delay_for(1) == pytest.approx(1.5)  # Gemini's body hint


def test_pacing_by_remaining_tokens_until_reset():
    limit, clock = limiter(8)
    limit.release(200, openai_headers(1000, "10s", limit_tokens=5000))
    take(limit, 800)
    assert limit.delay_for(300) == pytest.approx(10.0)  # 200 left: wait for the reset
    assert limit.delay_for(150) == 0.0
    clock.advance(10.0)
    assert limit.delay_for(4000) == 0.0  # whole again


def test_request_budget_paces_too():
    limit, clock = limiter(8)
    limit.release(200, {"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "2s"})
    take(limit, 10)
    assert limit.delay_for(10) == pytest.approx(2.0)
    clock.advance(2.0)
    assert limit.delay_for(10) == 0.0


def test_a_request_larger_than_the_whole_budget_goes_alone_after_the_reset():
    limit, clock = limiter(8)
    limit.release(200, openai_headers(100, "5s", limit_tokens=1000))
    assert limit.delay_for(5000) == pytest.approx(5.0)
    clock.advance(5.0)
    assert limit.delay_for(5000) == 0.0  # alone, fresh window: it goes
    take(limit, 10)
    assert limit.delay_for(5000) is None  # not alone: waits for the attempt in flight
    limit.release(200, {})
    assert limit.delay_for(5000) == 0.0


def test_anthropic_rfc3339_resets():
    limit, _clock = limiter(8)
    limit.release(200, {"anthropic-ratelimit-input-tokens-limit": "10000",
                        "anthropic-ratelimit-input-tokens-remaining": "3000",
                        "anthropic-ratelimit-input-tokens-reset": rfc3339(20)})
    assert limit.delay_for(3000) == 0.0
    assert limit.delay_for(3001) == pytest.approx(20.0)


def test_answers_out_of_order_keep_the_lower_count():
    limit, _ = limiter(8)
    limit.release(200, openai_headers(4000, "10s"))
    take(limit, 1000)  # ours: 3000
    limit.release(200, openai_headers(3500, "9s"))  # an older count in the same window
    assert limit.delay_for(3000) == 0.0 and limit.delay_for(3001) == pytest.approx(10.0)


def test_low_budget_backs_off_and_recovers_when_it_clears():
    limit, clock = limiter(8, increase_after=1, cooldown_s=0.0, low_fraction=0.1)
    limit.release(200, openai_headers(500, "1s", limit_tokens=10_000))  # 5 % left
    assert limit.limit == 4
    limit.release(200, openai_headers(400, "1s", limit_tokens=10_000))
    assert limit.limit == 2  # still low: no increase, another halving
    clock.advance(1.0)
    limit.release(200, openai_headers(9000, "1s", limit_tokens=10_000))
    limit.release(200, {})
    assert limit.limit == 4


# --------------------------------------------------------------------------------------
# acquire on a real event loop
# --------------------------------------------------------------------------------------

def test_acquire_waits_for_the_reset_serves_in_order_and_never_deadlocks():
    async def scenario() -> list[tuple[str, float]]:
        limit = AdaptiveLimit(4)
        limit.release(200, openai_headers(100, "200ms", limit_tokens=100))
        started = time.monotonic()
        order: list[tuple[str, float]] = []

        async def attempt(name: str, cost: int, hold_s: float) -> None:
            await limit.acquire(cost)
            order.append((name, time.monotonic() - started))
            await asyncio.sleep(hold_s)
            limit.release(200, {})

        await asyncio.wait_for(asyncio.gather(attempt("big", 500, 0.1), attempt("small", 50, 0.0)), timeout=5)
        return order

    order = asyncio.run(scenario())
    assert [name for name, _ in order] == ["big", "small"]  # first come, first served
    assert order[0][1] >= 0.18  # the big one waited for the reset, then went alone
    assert order[1][1] >= order[0][1] + 0.09  # the small one waited for it to end


def test_a_cancelled_waiter_leaves_the_queue():
    async def scenario() -> float:
        limit = AdaptiveLimit(1)
        await limit.acquire(1)
        blocked = asyncio.ensure_future(limit.acquire(1))
        await asyncio.sleep(0.01)
        blocked.cancel()
        await asyncio.gather(blocked, return_exceptions=True)
        limit.release(200, {})
        started = time.monotonic()
        await asyncio.wait_for(limit.acquire(1), timeout=1)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 0.5


# --------------------------------------------------------------------------------------
# A 429 storm on loopback
# --------------------------------------------------------------------------------------

class WindowBudget:
    """An endpoint allowing ``tokens`` prompt tokens per fixed window; 429 past it."""

    def __init__(self, tokens: int, window_s: float, dialect: str) -> None:
        self.tokens, self.window_s, self.dialect = tokens, window_s, dialect
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.window = -1
        self.used = 0
        self.accepted = 0
        self.rejected = 0

    def headers(self, now: float) -> dict[str, str]:
        remaining = self.tokens - self.used
        reset_s = (self.window + 1) * self.window_s - (now - self.started)
        if self.dialect == "openai":
            return {"x-ratelimit-limit-tokens": str(self.tokens), "x-ratelimit-remaining-tokens": str(remaining),
                    "x-ratelimit-reset-tokens": f"{max(1, math.ceil(reset_s * 1000))}ms"}
        if self.dialect == "anthropic":
            reset_at = datetime.now(UTC) + timedelta(seconds=reset_s)
            return {"anthropic-ratelimit-input-tokens-limit": str(self.tokens),
                    "anthropic-ratelimit-input-tokens-remaining": str(remaining),
                    "anthropic-ratelimit-input-tokens-reset": reset_at.isoformat().replace("+00:00", "Z")}
        return {}

    def __call__(self, call: Call) -> Reply:
        cost = estimate_tokens(len(call.prompt), False)
        with self.lock:
            now = time.monotonic()
            window = int((now - self.started) // self.window_s)
            if window != self.window:
                self.window, self.used = window, 0
            if self.used + cost > self.tokens:
                self.rejected += 1
                headers = self.headers(now)
                if self.dialect != "none":  # with budget headers the 429 also says when
                    headers["retry-after-ms"] = str(max(1, math.ceil(float(self.window_s * 1000 * (self.window + 1)
                                                                           - (now - self.started) * 1000))))
                return Reply(429, {"error": {"message": "Rate limit reached on tokens per min (TPM)",
                                             "type": "tokens", "code": "rate_limit_exceeded"}}, headers)
            self.used += cost
            self.accepted += 1
            reply = chat("ok")
            reply.headers.update(self.headers(now))
            return reply


class PlainBound:
    """The control: a fixed concurrency bound, as endpoints had before (same interface)."""

    def __init__(self, max_concurrency: int) -> None:
        self.limit = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency)

    async def acquire(self, cost_tokens: int) -> None:
        await self._slots.acquire()

    def release(self, status: int | None, headers: dict, payload: object = None) -> None:
        self._slots.release()


def adaptive(max_concurrency: int) -> AdaptiveLimit:
    return AdaptiveLimit(max_concurrency, pause_base_s=0.1, pause_max_s=2.0, cooldown_s=0.2)


async def storm(url: str, prompts: list[str], policy: RetryPolicy, max_concurrency: int,
                make_limit=adaptive) -> tuple[list[str], int]:
    """Every prompt as a task: acquire, send with plain httpx, release, classify, retry with hints."""
    limit = make_limit(max_concurrency)
    rng = random.Random(7)
    lowest = max_concurrency

    async def task(client: httpx.AsyncClient, prompt: str) -> str:
        nonlocal lowest
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
        for attempt in range(1, policy.max_retries + 2):
            await limit.acquire(estimate_tokens(len(prompt), False))
            status, headers, payload = None, {}, None
            try:
                response = await client.post(f"{url}/v1/chat/completions", json=body)
                status, headers, payload = response.status_code, dict(response.headers), response.json()
            except httpx.TransportError:
                pass
            finally:
                limit.release(status, headers, payload)
                lowest = min(lowest, limit.limit)
            kind = classify(status, headers, payload)
            if kind == Verdict.OK:
                return "answered"
            if kind != Verdict.RETRY or attempt > policy.max_retries:
                return f"failed: {kind} {status}"
            await asyncio.sleep(policy.delay(attempt, retry_hint(headers, payload), rng))
        raise AssertionError("unreachable")

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=max_concurrency), timeout=10) as client:
        outcomes = await asyncio.gather(*(task(client, p) for p in prompts))
    return list(outcomes), lowest


POLICY = RetryPolicy(max_retries=5, backoff_base_s=0.1, backoff_max_s=1.0)


def run_storm(dialect: str, make_limit=adaptive) -> tuple[list[str], int, WindowBudget, float]:
    rng = random.Random(dialect)
    prompts = ["w" * rng.randint(330, 1320) for _ in range(24)]  # 100-400 tokens each, ~6000 in all
    budget = WindowBudget(tokens=1000, window_s=0.25, dialect=dialect)  # 1000 tokens per 0.25 s
    started = time.monotonic()
    with LoopbackServer(budget, latency_s=0.02) as server:
        outcomes, lowest = asyncio.run(storm(server.url, prompts, POLICY, 8, make_limit))
    return outcomes, lowest, budget, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["openai", "anthropic", "none"])
def test_429_storm_ends_with_every_task_answered(dialect):
    outcomes, lowest, budget, elapsed = run_storm(dialect)
    assert outcomes == ["answered"] * 24  # none failed for rate limits
    assert budget.accepted == 24
    assert budget.rejected > 0  # it really was a storm: the first burst overruns the window
    if dialect != "none":
        # Once the budget is known, pacing keeps attempts inside the window: only the first
        # burst (sent before any header came back) and a few edge cases meet a 429.
        assert budget.rejected <= 8 + 4
    assert lowest < 8  # the limit backed off
    assert elapsed < 10


@pytest.mark.slow
def test_without_the_adaptive_limit_the_same_storm_costs_far_more_429s():
    _, _, paced, _ = run_storm("openai")
    _, _, plain, _ = run_storm("openai", PlainBound)
    assert plain.rejected >= 3 * paced.rejected  # measured: ~60 against ~9
