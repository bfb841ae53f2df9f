"""The adaptive per-endpoint limit: header reading, AIMD and pacing on a fake clock, and a real
429 storm against a loopback endpoint that allows N tokens per window."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from conftest import endpoint_spec
from servers.loopback import Call, LoopbackServer, Reply, chat
from servers.ratelimited import Limit

from wildtrace.runtime.net.ratelimit import (AdaptiveLimit, Cost, Grant, Window, estimate_tokens, parse_go_duration,
                                          read_budget)
from wildtrace.core.records import CallResult
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.retry import RetryPolicy

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


def limiter(max_concurrency: int = 8, probe: bool = False, **kwargs) -> tuple[AdaptiveLimit, FakeClock]:
    """A limiter on a fake clock; past its first answer unless ``probe`` (the rules after it are tested apart)."""
    clock = FakeClock()
    return AdaptiveLimit(max_concurrency, clock=clock, wall=clock.wall, probe=probe, **kwargs), clock


def take(limit: AdaptiveLimit, cost: int | Cost) -> Grant:
    """Acquire when the limiter says it may go now (the fake clock never lets time pass)."""
    cost = cost if isinstance(cost, Cost) else Cost(cost)
    assert limit.delay_for(cost) == 0.0
    return asyncio.run(limit.acquire(cost))


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
          "anthropic-ratelimit-output-tokens-remaining": "5", "anthropic-ratelimit-tokens-remaining": "5"},
         {"input-tokens": Window(400000, 1000, 30.0), "output-tokens": Window(None, 5, None),
          "requests": Window(50, 0, 1.5)}),  # the combined window only when the two are not sent
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


@pytest.mark.parametrize(("chars", "cjk", "tokens"),
                         [(330, False, 100), (331, False, 101), (150, True, 100), (0, False, 1),
                          (-5, True, 1), (3_300_000, False, 1_000_000)])
def test_estimate_tokens(chars, cjk, tokens):
    assert estimate_tokens(chars, cjk) == tokens


@pytest.mark.parametrize(("window", "units"), [("tokens", 1100), ("input-tokens", 1000), ("output-tokens", 100),
                                               ("requests", 1)])
def test_a_cost_against_each_window(window, units):
    """OpenAI's tokens count the prompt and max_tokens; Anthropic's input and output windows one each."""
    assert Cost(1000, 100).against(window) == units


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_concurrency_is_checked(bad):
    with pytest.raises(ValueError, match="max_concurrency"):
        AdaptiveLimit(bad)


# --------------------------------------------------------------------------------------
# Throttles, pacing and recovery on a fake clock
# --------------------------------------------------------------------------------------

def admit(limit: AdaptiveLimit, cost: int, n: int = 1) -> None:
    """``n`` attempts let through now and answered 2xx (no headers) at once."""
    for _ in range(n):
        limit.release(take(limit, cost), 200, {})


def test_a_burst_of_429s_is_one_throttle_and_the_concurrency_stays():
    limit, clock = limiter(8, pause_base_s=0.5)
    burst = [take(limit, 1) for _ in range(7)]
    for grant in burst:  # seven answered 429 together: one throttle, one pause, the same slots
        limit.release(grant, 429, {})
    assert (limit.throttled, limit.throttles, limit.limit) == (7, 1, 8)
    assert limit.delay_for(Cost(1)) == pytest.approx(0.5)
    clock.advance(0.5)
    later = take(limit, 1)
    limit.release(later, 429, {})  # sent after the throttle was seen: a new one, the pause doubles
    assert (limit.throttles, limit.limit, limit.delay_for(Cost(1))) == (2, 8, pytest.approx(1.0))


# --------------------------------------------------------------------------------------
# Without budget headers: the limit learned from 429s
# --------------------------------------------------------------------------------------

def learned(pause_base_s: float = 0.5) -> tuple[AdaptiveLimit, FakeClock]:
    """Eight attempts of 1000 tokens admitted at once, a 429 2 s later, the search's first pause
    (2 s: as long as the limit took to meet), one attempt at a time until one is admitted at 4 s:
    a window of 4 s that held 8000 tokens, paced at 1800 a second and 1.8 requests (the 0.9 margin)."""
    limit, clock = limiter(8, pause_base_s=pause_base_s)
    admit(limit, 1000, 8)
    clock.advance(2.0)
    limit.release(take(limit, 1000), 429, {})
    assert limit.delay_for(Cost(1000)) == pytest.approx(2.0)  # max(0.5, the 2 s it took)
    clock.advance(2.0)
    probe = take(limit, 1000)
    assert limit.delay_for(Cost(1000)) is None  # searching: one attempt at a time
    limit.observe(probe, 200, {})
    limit.release(probe, 200, {})
    return limit, clock


def test_without_headers_the_first_throttle_searches_and_learns_the_rate():
    limit, _ = learned()
    assert limit.delay_for(Cost(1000)) == 0.0
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(1000 / 1800)  # 1800 tokens a second
    assert limit.delay_for(Cost(100)) == pytest.approx(1 / 1.8)  # and 1.8 requests a second


def test_a_search_probe_refused_doubles_the_pause():
    limit, clock = limiter(8, pause_base_s=0.5)
    admit(limit, 1000, 4)
    clock.advance(1.0)
    limit.release(take(limit, 1000), 429, {})
    clock.advance(1.0)
    limit.release(take(limit, 1000), 429, {})  # the first probe: still refused
    assert limit.delay_for(Cost(1000)) == pytest.approx(2.0)


@pytest.mark.parametrize("status", [500, 503, 400, None])  # None: no answer at all (a dropped connection)
def test_a_search_probe_that_ends_otherwise_lets_the_next_attempt_probe(status):
    """A search sends one attempt at a time until one is admitted; one that ends in a server error or a
    transport failure says nothing of the limit: the next attempt probes in its place, instead of
    every attempt waiting for an answer that has come (a run stalled forever this way)."""
    limit, clock = limiter(8, pause_base_s=0.5)
    admit(limit, 1000, 4)
    clock.advance(1.0)
    limit.release(take(limit, 1000), 429, {})
    clock.advance(1.0)
    probe = take(limit, 1000)
    assert limit.delay_for(Cost(1000)) is None  # one attempt of the search out
    limit.release(probe, status, {})
    assert limit.delay_for(Cost(1000)) == 0.0
    limit.release(take(limit, 1000), 200, {})  # the next probe admitted: the rate is learned
    assert limit.delay_for(Cost(1000)) is not None


def test_a_first_429_late_in_a_run_pauses_for_its_last_wave_not_the_run():
    """Eight slots, an attempt admitted every 10 s for 1000 s, then a 429 without a hint: the
    search's first pause is as long as the last eight sends took (80 s, from the eighth-last at
    920 s to the refused one), not the 1000 s since the first send; a quick wave pauses 0.5 s."""
    limit, clock = limiter(8, pause_base_s=0.5, pause_max_s=3600.0)
    for _ in range(100):
        admit(limit, 1000)
        clock.advance(10.0)
    limit.release(take(limit, 1000), 429, {})
    assert limit.delay_for(Cost(1000)) == pytest.approx(80.0)
    quick, clock = limiter(8, pause_base_s=0.5, pause_max_s=3600.0)
    for _ in range(100):
        admit(quick, 1000)
        clock.advance(10.0)
    for _ in range(8):
        admit(quick, 1000)
        clock.advance(0.01)
    quick.release(take(quick, 1000), 429, {})
    assert quick.delay_for(Cost(1000)) == pytest.approx(0.5)


def test_a_learned_window_holds_no_more_than_its_share():
    """Over any 4 s the learned limit allows 7200 tokens and 7.2 requests: the sends spread at 1800
    tokens a second, and what the window already holds (the probe at 4 s, six more since) is waited
    out where the spacing alone would let the next one go."""
    limit, clock = learned()
    for _ in range(6):
        take(limit, 1000)
        clock.advance(1000 / 1800)
    assert limit.delay_for(Cost(1000)) == pytest.approx(8.0 - (4 + 6 * 1000 / 1800))  # until the probe leaves


def test_a_later_throttle_sets_the_rate_to_what_was_admitted_over_the_window():
    limit, clock = learned()
    clock.advance(4.0)
    for _ in range(4):  # 4000 tokens admitted in the trailing 4 s, then a 429
        admit(limit, 1000)
        clock.advance(1000 / 1800)
    limit.release(take(limit, 1000), 429, {})
    clock.advance(4.0)
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(1000 / (0.9 * 4000 / 4))  # 900 a second


def test_a_throttle_with_nothing_admitted_halves_the_rate():
    limit, clock = learned()
    clock.advance(10.0)  # the window empty
    limit.release(take(limit, 1000), 429, {})
    clock.advance(4.0)
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(1000 / 900)


@pytest.mark.parametrize(("throttled", "rate"), [
    (False, 1800 * 1.1 ** 2),  # before a later throttle: by a share of itself (the search may have overshot)
    (True, 900 + 2 * 0.02 * 1000 / 4),  # after: by a share of an attempt a window
])
def test_successes_raise_a_learned_rate(throttled, rate):
    limit, clock = learned()
    if throttled:
        clock.advance(10.0)
        limit.release(take(limit, 1000), 429, {})  # nothing admitted: 900 a second
    for _ in range(2):
        clock.advance(10.0)
        admit(limit, 1000)
    clock.advance(10.0)
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(1000 / rate)


def test_a_learned_limit_counts_input_output_and_requests_apart():
    """An answer's ``max_tokens`` (counted when it arrives, as OpenAI and Anthropic do) is paced on
    its own: 8 attempts of 1000 input and 100 output tokens in the first 4 s teach 1800 input and
    180 output tokens a second; one asking for 400 output tokens holds the next for 400 / 180 s,
    where its input alone would hold it for 1000 / 1800."""
    limit, clock = limiter(8)
    for _ in range(8):
        limit.release(take(limit, Cost(1000, 100)), 200, {})
    clock.advance(2.0)
    limit.release(take(limit, Cost(1000, 100)), 429, {})
    clock.advance(2.0)
    limit.release(take(limit, Cost(1000, 100)), 200, {})
    take(limit, Cost(1000, 400))
    assert limit.delay_for(Cost(1000, 100)) == pytest.approx(400 / 180)


@pytest.mark.parametrize(("answer", "at", "then"), [
    # the first answer's head with budget headers: the rest are paced by them (the window is spent)
    ((200, openai_headers(0, "10s", limit_tokens=10_000)), "head", [10.0, 10.0, 10.0]),
    # a head without budget headers lets the next one go; the one after waits for its head, while
    # the slow start lasts (0.25 s from the first send)
    ((200, {}), "head", [0.0, 0.15, 0.15]),
    # an error's head is read with its body: the wait ends at its end; a 429 ends the slow start
    ((429, {"retry-after": "2"}), "end", [2.0, 2.0, 2.0]),
    ((500, {}), "end", [0.0, 0.15, 0.15]),
    ((None, {}), "end", [0.0, 0.15, 0.15]),  # no answer at all (a transport error)
])
def test_the_first_attempt_goes_alone_until_its_answer_arrives(answer, at, then):
    limit, clock = limiter(8, probe=True, probe_s=0.25)
    first = take(limit, 1000)
    clock.advance(0.1)
    assert limit.delay_for(Cost(1000)) == pytest.approx(0.15)  # nothing said yet: wait for the first answer
    status, headers = answer
    if status is not None:
        limit.observe(first, status, headers)
    if at == "end":
        assert limit.delay_for(Cost(1000)) == pytest.approx(0.15)  # an error's head alone says nothing yet
        limit.release(first, status, headers)
    waits = []
    for _ in then:
        wait = limit.delay_for(Cost(1000))
        waits.append(wait)
        if wait == 0.0:
            take(limit, 1000)
    assert waits == [pytest.approx(w) for w in then]


def test_without_headers_each_send_waits_for_the_last_ones_admission_until_a_429():
    """Nothing says the limit: each attempt goes once the last one's head is in (admitted), so
    the first 429 comes one request past what a window holds (five here) and ends the slow start:
    the search follows, one attempt at a time, after its pause."""
    limit, clock = limiter(8, probe=True, probe_s=1.0)
    for sent in range(1, 6):
        grant = take(limit, 1000)
        clock.advance(0.01)
        assert limit.delay_for(Cost(1000)) == pytest.approx(1.0 - 0.01 * sent)  # its head not in yet
        limit.observe(grant, 200, {})  # admitted: its body still streams
    limit.release(take(limit, 1000), 429, {})
    assert (limit.throttled, limit.throttles, limit.in_flight) == (1, 1, 5)
    assert limit.delay_for(Cost(1000)) == pytest.approx(0.5)  # the search's first pause
    clock.advance(0.5)
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) is None  # one attempt of the search at a time


def test_the_first_answer_is_waited_for_a_bounded_time_only():
    """A head that does not come within ``probe_s`` (a plain answer's come with its whole body):
    the others go then, so a run without a rate limit pays a fraction of a second, not a latency."""
    limit, clock = limiter(8, probe=True, probe_s=0.25)
    first = take(limit, 1000)
    clock.advance(0.25)
    for _ in range(7):
        take(limit, 1000)
    assert limit.delay_for(Cost(1000)) is None  # the concurrency bound now, not the probe
    limit.observe(first, 200, openai_headers(0, "10s"))  # a late head still paces what follows
    limit.release(first, 200, {})
    assert limit.delay_for(Cost(1000)) == pytest.approx(10.0)


@pytest.mark.parametrize(("stream", "probed"), [(True, True), (False, False)])
def test_only_a_streamed_endpoint_is_probed(stream, probed):
    provider = make_provider(endpoint_spec(base_url="http://127.0.0.1:9/v1", max_concurrency=8, stream=stream))
    endpoint = Endpoint(provider, "sk-test", RetryPolicy())
    limit = endpoint.limit
    asyncio.run(limit.acquire(Cost(1)))
    assert (limit.delay_for(Cost(1)) != 0.0) == probed
    asyncio.run(endpoint.aclose())


def test_an_in_process_answerer_is_not_probed():
    limit, _ = limiter(8, probe=False)
    for _ in range(8):
        take(limit, 1000)
    assert limit.delay_for(Cost(1000)) is None  # the concurrency bound, not a probe


def test_concurrency_slots():
    limit, _ = limiter(2)
    first = take(limit, 1)
    take(limit, 1)
    assert limit.in_flight == 2 and limit.delay_for(Cost(1)) is None  # wait for a slot
    limit.release(first, 500, {})  # any outcome frees the slot
    assert limit.delay_for(Cost(1)) == 0.0


@pytest.mark.parametrize(("headers", "payload", "pause"), [
    ({"retry-after": "2"}, None, 2.0),
    ({"retry-after-ms": "250"}, None, 0.25),
    ({}, {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}, 1.5),
    ({"retry-after": "600"}, None, 3.0),  # capped
    ({}, None, 0.5),  # nothing said: the first pause
])
def test_a_throttle_pauses_for_the_servers_hint(headers, payload, pause):
    limit, _ = limiter(4, pause_base_s=0.5, pause_max_s=3.0)
    limit.release(take(limit, 1), 429, headers, payload)
    assert limit.delay_for(Cost(1)) == pytest.approx(pause)


def test_budget_headers_pace_instead_of_halving_concurrency():
    limit, clock = limiter(8)
    grants = [take(limit, 1000) for _ in range(8)]
    limit.release(grants[0], 200, openai_headers(4000, "10s", limit_tokens=5000))  # 7 more sent since: -3000
    assert limit.delay_for(Cost(1000)) == pytest.approx(10.0)
    for grant in grants[1:]:
        limit.release(grant, 429, openai_headers(0, "9s", limit_tokens=5000, **{"retry-after": "9"}))
    assert limit.limit == 8  # a known budget paces; the concurrency stays
    assert limit.throttles == 1
    clock.advance(10.0)
    assert limit.delay_for(Cost(1000)) == 0.0  # whole again


@pytest.mark.parametrize(("window", "remaining", "reset", "cost", "wait"), [
    ("tokens", 1000, "10s", Cost(800, 100), 0.0),
    ("tokens", 1000, "10s", Cost(950, 100), 10.0),  # OpenAI counts max_tokens too
    ("input-tokens", 1000, 20, Cost(1000, 5000), 0.0),  # Anthropic: input and output apart
    ("input-tokens", 1000, 20, Cost(1001, 0), 20.0),
    ("output-tokens", 500, 20, Cost(10, 501), 20.0),
    ("requests", 1, "2s", Cost(10), 0.0),
    ("requests", 0, "2s", Cost(10), 2.0),
])
def test_each_window_paces_its_own_units(window, remaining, reset, cost, wait):
    limit, _ = limiter(8)
    if window in ("tokens", "requests"):
        headers = {f"x-ratelimit-remaining-{window}": str(remaining), f"x-ratelimit-reset-{window}": reset}
    else:
        headers = {f"anthropic-ratelimit-{window}-remaining": str(remaining),
                   f"anthropic-ratelimit-{window}-reset": rfc3339(reset)}
    limit.release(take(limit, 1), 200, headers)
    assert limit.delay_for(cost) == pytest.approx(wait)


def test_sends_are_spread_at_the_rate_the_headers_teach():
    """Limit 10000 a window, the longest reset seen 10 s: 1000 tokens every second."""
    limit, clock = limiter(8)
    limit.release(take(limit, 1000), 200, openai_headers(9000, "10s", limit_tokens=10_000))
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(1.0)
    assert limit.delay_for(Cost(500)) == pytest.approx(1.0)
    clock.advance(1.0)
    take(limit, 2000)
    assert limit.delay_for(Cost(1)) == pytest.approx(2.0)


def test_a_late_figure_is_taken_forward_by_what_was_sent_since():
    limit, _ = limiter(8)
    first, second, third = take(limit, 1000), take(limit, 1000), take(limit, 1000)
    limit.release(second, 200, openai_headers(7000, "10s"))  # the server counted the first two: 1 sent since
    assert limit.delay_for(Cost(6000)) == 0.0 and limit.delay_for(Cost(6001)) == pytest.approx(10.0)
    limit.release(first, 200, openai_headers(9000, "10s"))  # older than the figure in use: ignored
    assert limit.delay_for(Cost(6001)) == pytest.approx(10.0)
    limit.release(third, 200, openai_headers(2000, "10s"))  # another job used the key too: its figure wins
    assert limit.delay_for(Cost(2000)) == 0.0 and limit.delay_for(Cost(2001)) == pytest.approx(10.0)


def test_another_job_on_the_key_is_seen_in_the_figures_and_given_its_share():
    """Limit 10000 tokens a 10 s window (1000 a second). Between two of this job's figures 5000
    tokens went beyond its own sends: another job's, taken as 500 a second (counted over at least a
    window), so this job spreads its sends at the other 500 and leaves room for what the other
    takes meanwhile."""
    limit, clock = limiter(8)
    limit.release(take(limit, 500), 200, openai_headers(9500, "10s", limit_tokens=10_000))
    clock.advance(1.0)
    limit.release(take(limit, 500), 200, openai_headers(4000, "10s", limit_tokens=10_000))
    clock.advance(0.5)
    take(limit, 500)
    assert limit.delay_for(Cost(500)) == pytest.approx(1.0)  # 500 tokens at 500 a second
    clock.advance(1.0)
    assert limit.delay_for(Cost(2750)) == 0.0  # 3500 left, less the other's 750 since the figure
    assert limit.delay_for(Cost(2751)) == pytest.approx(8.5)  # else: the reset


@pytest.mark.parametrize(("first", "second", "cost", "wait"), [
    # a bucket (1000 tokens a second): 2 s later the figure rose by the 2000 refilled, less the 1000 sent
    ((5000, "5s"), (6000, "4s"), 9000, 3.0),  # 3000 more refill in 3 s, not the 4 s to full
    # a fixed window: the figure fell by what was sent; it is whole again at its reset only
    ((9000, "10s"), (8000, "8s"), 9000, 8.0),
    # an answer reordered on the way in (the server had not counted the one before): no refill
    ((9000, "10s"), (9000, "8s"), 9500, 8.0),
])
def test_a_bucket_that_refills_is_credited_its_refill(first, second, cost, wait):
    limit, clock = limiter(8)
    limit.release(take(limit, 1000), 200, openai_headers(first[0], first[1], limit_tokens=10_000))
    clock.advance(2.0)
    limit.release(take(limit, 1000), 200, openai_headers(second[0], second[1], limit_tokens=10_000))
    assert limit.delay_for(Cost(cost)) == pytest.approx(wait)


def test_a_bucket_full_between_two_figures_is_not_taken_for_another_job():
    """A bucket of 10000 tokens refilling 1000 a second (the longest reset seen, 2 s, spreads sends
    at 5000 a second). 20 s between two figures refill at most what was missing (1000), not
    20000: the rest it could not hold is nobody's use, and the sends keep the whole rate (counted
    as another job's, they were spread at 4000 a second)."""
    limit, clock = limiter(8)
    limit.release(take(limit, 2000), 200, openai_headers(8000, "2s", limit_tokens=10_000))
    clock.advance(2.0)
    limit.release(take(limit, 1000), 200, openai_headers(9000, "1s", limit_tokens=10_000))  # refilled 2000
    clock.advance(20.0)
    limit.release(take(limit, 1000), 200, openai_headers(9000, "1s", limit_tokens=10_000))  # full, then 1000 sent
    clock.advance(0.2)
    take(limit, 1000)
    assert limit.delay_for(Cost(1000)) == pytest.approx(0.2)  # 1000 tokens at the whole 5000 a second


def test_a_streams_headers_pace_before_its_body_ends():
    limit, _ = limiter(8)
    grant = take(limit, 1000)
    limit.observe(grant, 200, openai_headers(0, "5s"))
    assert limit.in_flight == 1 and limit.delay_for(Cost(1)) == pytest.approx(5.0)
    limit.release(grant, 200, openai_headers(9000, "5s"))  # learned once, at the head
    assert limit.delay_for(Cost(1)) == pytest.approx(5.0)


def test_a_request_larger_than_the_whole_budget_goes_alone_after_the_reset():
    limit, clock = limiter(8)
    limit.release(take(limit, 1), 200, openai_headers(100, "5s", limit_tokens=1000))
    assert limit.delay_for(Cost(5000)) == pytest.approx(5.0)
    clock.advance(5.0)
    assert limit.delay_for(Cost(5000)) == 0.0  # alone, fresh window: it goes
    grant = take(limit, 10)
    clock.advance(5.0)
    assert limit.delay_for(Cost(5000)) is None  # not alone: waits for the attempt in flight
    limit.release(grant, 200, {})
    assert limit.delay_for(Cost(5000)) == 0.0


# --------------------------------------------------------------------------------------
# acquire on a real event loop
# --------------------------------------------------------------------------------------

def test_acquire_waits_for_the_reset_serves_in_order_and_never_deadlocks():
    async def scenario() -> list[tuple[str, float]]:
        limit = AdaptiveLimit(4)
        limit.release(await limit.acquire(Cost(1)), 200, openai_headers(100, "200ms", limit_tokens=100))
        started = time.monotonic()
        order: list[tuple[str, float]] = []

        async def attempt(name: str, cost: int, hold_s: float) -> None:
            grant = await limit.acquire(Cost(cost))
            order.append((name, time.monotonic() - started))
            await asyncio.sleep(hold_s)
            limit.release(grant, 200, {})

        await asyncio.wait_for(asyncio.gather(attempt("big", 500, 0.1), attempt("small", 50, 0.0)), timeout=5)
        return order

    order = asyncio.run(scenario())
    assert [name for name, _ in order] == ["big", "small"]  # first come, first served
    assert order[0][1] >= 0.18  # the big one waited for the reset, then went alone
    assert order[1][1] >= order[0][1] + 0.09  # the small one waited for it to end


def test_a_cancelled_waiter_leaves_the_queue():
    async def scenario() -> float:
        limit = AdaptiveLimit(1)
        grant = await limit.acquire(Cost(1))
        blocked = asyncio.ensure_future(limit.acquire(Cost(1)))
        await asyncio.sleep(0.01)
        blocked.cancel()
        await asyncio.gather(blocked, return_exceptions=True)
        limit.release(grant, 200, {})
        started = time.monotonic()
        await asyncio.wait_for(limit.acquire(Cost(1)), timeout=1)
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


POLICY = RetryPolicy(max_retries=5, backoff_base_s=0.1, backoff_max_s=1.0)


def run_storm(dialect: str, tasks: int = 40) -> tuple[list[CallResult], Endpoint, WindowBudget]:
    """``tasks`` prompts of 100-400 tokens through an endpoint of concurrency 8 against a limit of
    1000 tokens a 0.25 s window: the first burst overruns it."""
    rng = random.Random(dialect)
    prompts = [f"{i} " + "w" * rng.randint(330, 1320) for i in range(tasks)]
    budget = WindowBudget(tokens=1000, window_s=0.25, dialect=dialect)

    async def run(url: str) -> tuple[list[CallResult], Endpoint]:
        provider = make_provider(endpoint_spec(base_url=f"{url}/v1", max_concurrency=8, stream=False))
        endpoint = Endpoint(provider, "sk-test", POLICY)
        endpoint.limit = AdaptiveLimit(8, pause_base_s=0.1, pause_max_s=2.0)
        sampling = Sampling(temperature=0.0, max_tokens=0)
        try:
            results = await asyncio.gather(*(endpoint.call(provider.build_request(prompt, sampling), 0,
                                                           Cost(estimate_tokens(len(prompt), False)))
                                             for prompt in prompts))
        finally:
            await endpoint.aclose()
        return list(results), endpoint

    with LoopbackServer(budget, latency_s=0.02) as server:
        results, endpoint = asyncio.run(asyncio.wait_for(run(server.url), timeout=60))
    return results, endpoint, budget


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_a_429_storm_is_paced_and_concurrency_recovers(dialect):
    results, endpoint, budget = run_storm(dialect)
    assert [r.ok for r in results] == [True] * 40 and budget.accepted == 40  # none failed for rate limits
    # The first call went alone until its headers came: no burst sent blind (8 at once overran the
    # window with 3 429s before), and the figures paced every later one (at most one request sent
    # as the limiter's window rolled may land in the server's old one).
    assert budget.rejected <= 1 and endpoint.limit.throttled == budget.rejected
    assert endpoint.limit.limit == 8  # the concurrency is where it started


@pytest.mark.slow
def test_without_headers_every_task_is_answered_and_every_429_is_counted():
    results, endpoint, budget = run_storm("none")
    assert [r.ok for r in results] == [True] * 40 and budget.accepted == 40
    # each send waits for the last one's answer until the first 429: no burst meets the spent window
    assert endpoint.limit.throttled == budget.rejected >= endpoint.limit.throttles


@pytest.mark.slow
def test_without_headers_the_first_429_comes_one_request_past_the_window():
    """A streamed endpoint that sends no rate headers admits 5 prompts a 1 s window; 8 calls at a
    concurrency of 8. Each send waits for the last one's head, so one request meets the spent
    window where a burst of 7 sent blind met it three times; the search's first attempt, half a
    second on, may meet it once more. Every call is answered."""
    per_prompt = estimate_tokens(3300 + 2, False)
    budget = Limit(5 * per_prompt, 1.0, False, "none", 0.2)
    prompts = [f"{i} " + "w" * 3300 for i in range(8)]

    async def run(url: str) -> list[CallResult]:
        provider = make_provider(endpoint_spec(base_url=f"{url}/v1", max_concurrency=8, stream=True))
        endpoint = Endpoint(provider, "sk-test", POLICY)
        try:
            return list(await asyncio.gather(*(
                endpoint.call(provider.build_request(p, Sampling(0.0, 10)), 0, Cost(estimate_tokens(len(p), False)))
                for p in prompts)))
        finally:
            await endpoint.aclose()

    with LoopbackServer(budget) as server:
        results = asyncio.run(asyncio.wait_for(run(server.url), timeout=60))
    assert [r.ok for r in results] == [True] * 8 and budget.admitted == 8
    assert budget.rejected <= 2
