"""An endpoint's pacing at its rate limit: a token budget per window, stated or learned from 429s.

One ``AdaptiveLimit`` per endpoint. Every HTTP attempt (first try or retry) does
``grant = await limit.acquire(cost)`` before it is sent, ``limit.observe(grant, status, headers)``
when its status and headers arrive (a streamed answer's come first), and
``limit.release(grant, status, headers)`` when it ends, whatever the outcome.

- **Budget headers pace the sends.** OpenAI's ``x-ratelimit-*`` (and LiteLLM's ``llm_provider-``
  relay) and Anthropic's ``anthropic-ratelimit-*`` say how many tokens and requests are left and
  when the window is whole again. Each window is a token bucket on the limiter's side: an attempt
  costs its estimated prompt tokens (``Cost``; OpenAI's ``tokens`` also count ``max_tokens``, as
  OpenAI counts it when a request arrives; Anthropic's input and output windows are separate), it
  waits until what is left covers it, and sends are spread at the window's rate (its size over the
  longest reset it reported: the window is learned, not assumed). What is left is the provider's
  latest figure less what this limiter sent since, so several jobs on one key pace on the
  provider's count. The concurrency stays ``max_concurrency``: pacing, not fewer slots, keeps
  the sends under the limit.
- **Until something says the limit, the sends are clocked by their admissions** (a slow start).
  A streamed answer's status and headers come at its first byte, before its body: until budget
  headers or a 429 arrive, an attempt goes once the last one's head is in, so the first 429 comes
  after exactly what a window holds, one request over, instead of a burst of ``max_concurrency``
  sent blind; budget headers in the first head pace the rest at once. It lasts ``PROBE_S`` from
  the first send at most (a plain answer's headers come with its whole body; a slow head ends it),
  so it costs a run without a rate limit a second at most, once. Plain (non-streamed) and
  in-process endpoints are not clocked.
- **A burst of 429s is one throttle.** Attempts sent before a throttle was seen answer 429 together;
  only a 429 for an attempt sent after it is a new throttle. A throttle pauses the endpoint for the
  server's hint, else for the budget's reset.
- **Without budget headers the limit is learned from 429s** (``_Learned``). The first throttle
  pauses (first for as long as the last ``max_concurrency`` sends took, ``pause_base_s`` at least,
  tripling while one attempt at a time is refused); the first success after it says how long a
  window was, and what was admitted before the throttle what it holds: the rate is that, a margin
  below. Each later throttle sets the rate to what was admitted over the trailing window (half
  of it if nothing was), and each success raises it by a small share of an attempt, so a 429
  stays rare. Input tokens, output tokens (``max_tokens``, counted at arrival) and requests are
  each paced apart, as OpenAI and Anthropic count them differently. No time constant but the
  first pause's floor: the scale comes from the endpoint. Jobs sharing a cache folder learn it
  from every job's sends not refused (the shared budget), so a job that got a small share of the
  first window paces at the endpoint's rate, not at that share, once the others are done.

Attempts are served first come, first served, so a big prompt is never starved by small ones;
one larger than a whole window goes alone once it is fresh. Header reading (``read_budget``,
``parse_go_duration``) is pure and never raises.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from wildtrace.core.caps import tokens_of
from wildtrace.runtime.net.retry import lower_headers, retry_hint
from wildtrace.runtime.store.shared_budget import SharedBudget


#: The windows read from the headers. OpenAI's ``tokens`` counts a request's prompt and its
#: ``max_tokens``; Anthropic limits ``input-tokens`` and ``output-tokens`` separately (its output
#: window counts ``max_tokens`` when a request starts), and its ``tokens`` is the most restrictive
#: of the two, read only when they are not sent.
_OPENAI = ("tokens", "requests")
_ANTHROPIC = ("input-tokens", "output-tokens", "requests", "tokens")

_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_RESET_S = 86_400.0
#: Attempts remembered for taking a late figure's count forward (far more than are ever in flight).
SENT_KEPT = 4096
#: The longest the slow start lasts (``AdaptiveLimit(probe=True)``), counted from when the first
#: attempt was let through, so it covers opening the connection too: a streamed head comes within
#: a connection's set-up and a first byte; a provider slower than this to start answering gets the
#: rest sent blind, and its 429s (with their headers) pace them.
#: A run without a rate limit pays it once at most (0.3 % of 31 waves of 10 s calls).
PROBE_S = 1.0
#: However much other jobs take, a job's sends are spread at no less than this share of a window's rate.
MIN_SHARE = 1 / 16


def estimate_tokens(prompt_chars: int, cjk: bool) -> int:
    """Tokens a prompt of ``prompt_chars`` characters counts against a rate limit: the spec's ratios
    (``core.caps.tokens_of``, as the cost estimate's high end counts them), one at least."""
    return max(1, tokens_of(prompt_chars, cjk))


@dataclass(frozen=True)
class Cost:
    """What one attempt counts against an endpoint's rate limits."""

    input_tokens: int = 0  #: the prompt's estimated tokens
    output_tokens: int = 0  #: the request's ``max_tokens`` (counted when it arrives)

    def against(self, window: str) -> int:
        """The units this attempt takes from a window (``read_budget``'s names)."""
        if window == "requests":
            return 1
        if window == "input-tokens":
            return self.input_tokens
        if window == "output-tokens":
            return self.output_tokens
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Window:
    """One budget a response reported: how much, how much is left, and when it is whole again."""

    limit: float | None  #: the window's size (tokens or requests), if stated
    remaining: float | None  #: what is left now, if stated
    reset_in: float | None  #: seconds until the window is whole again, if stated


def parse_go_duration(value: str | None) -> float | None:
    """OpenAI's reset durations ("6m0s", "1s", "20ms", "1h2m3.5s") as seconds; None if malformed."""
    if not value or len(value) > 64:
        return None
    text = value.strip()
    if not text or _GO_PART.sub("", text) != "":
        return None
    total = sum(float(n) * _GO_UNIT[u] for n, u in _GO_PART.findall(text))
    return total if math.isfinite(total) and total <= _MAX_RESET_S else None


def _count(value: str | None) -> float | None:
    if value is None or len(value) > 24:
        return None
    text = value.strip()
    if not re.fullmatch(r"\d+(?:\.\d+)?", text):
        return None  # negatives (Azure's -1 "not applicable") and garbage mean "unknown"
    return float(text)


def _rfc3339_in(value: str | None, wall_now: float) -> float | None:
    """Seconds from ``wall_now`` until an RFC 3339 time (Anthropic's resets); None if unreadable."""
    if not value or len(value) > 64:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    seconds = when.timestamp() - wall_now
    return min(max(0.0, seconds), _MAX_RESET_S) if math.isfinite(seconds) else None


def _reset_in(value: str | None, wall_now: float) -> float | None:
    """A reset as a Go duration, plain seconds, epoch seconds (a gateway's) or an RFC 3339 time."""
    seconds = parse_go_duration(value)
    if seconds is not None:
        return seconds
    number = _count(value)
    if number is not None:
        if number > 1e9:  # an epoch time, not a duration
            return min(max(0.0, number - wall_now), _MAX_RESET_S)
        return number if number <= _MAX_RESET_S else None
    return _rfc3339_in(value, wall_now)


def _window(h: Mapping[str, str], limit: str, remaining: str, reset: str, wall_now: float) -> Window | None:
    window = Window(_count(h.get(limit)), _count(h.get(remaining)), _reset_in(h.get(reset), wall_now))
    return window if window.remaining is not None else None


def read_budget(headers: Mapping[str, str], wall_now: float | None = None) -> dict[str, Window]:
    """The budget windows a response's headers report, by name (``tokens``, ``input-tokens``,
    ``output-tokens``, ``requests``). Anthropic's first, then OpenAI's, then LiteLLM's relayed ones."""
    now = time.time() if wall_now is None else wall_now
    h = lower_headers(headers)
    found: dict[str, Window] = {}
    for name in _ANTHROPIC:
        prefix = f"anthropic-ratelimit-{name}-"
        window = _window(h, prefix + "limit", prefix + "remaining", prefix + "reset", now)
        if window is not None and not (name == "tokens" and ("input-tokens" in found or "output-tokens" in found)):
            found[name] = window
    for relay in ("", "llm_provider-"):
        for name in _OPENAI:
            window = _window(h, f"{relay}x-ratelimit-limit-{name}", f"{relay}x-ratelimit-remaining-{name}",
                             f"{relay}x-ratelimit-reset-{name}", now)
            if window is not None:
                found.setdefault(name, window)
    return found


@dataclass
class _Budget:
    """What the limiter believes of one window, on its own clock."""

    limit: float | None = None  #: the window's size, once stated
    remaining: float | None = None  #: left now: the provider's latest figure less what was sent since
    reset_at: float | None = None  #: when it is whole again; None when as full as it gets
    window_s: float | None = None  #: the longest reset it reported: the window's length, as learned
    grant: int = -1  #: the attempt whose answer gave ``remaining``
    figure: float | None = None  #: that answer's own figure, and when it came
    figure_at: float = -math.inf
    others: float = 0.0  #: what the figures fell by beyond this job's sends (other jobs on the key) …
    others_s: float = 0.0  #: … over this many seconds (both halved as they pass two windows)
    refill: float = 0.0  #: tokens a second it refills at, once a figure rose between resets (a bucket)
    next_at: float = -math.inf  #: sends are spread at this job's share of the rate: the next not before this

    def roll(self, now: float, last_sent: int) -> None:
        """A window past its reset is whole again (or unknown, if its size never was stated): as if
        the provider had said so just then, after the attempt ``last_sent``."""
        if self.reset_at is not None and now >= self.reset_at:
            self.figure, self.figure_at, self.grant = self.limit, self.reset_at, last_sent
            self.remaining, self.reset_at = self.limit, None

    def others_rate(self) -> float:
        """What other jobs on the key take a second, as the figures show."""
        return max(0.0, self.others) / max(self.others_s, self.window_s or 0.0) if self.others_s else 0.0

    def room(self, now: float) -> float | None:
        """What is left for this job now: ``remaining`` less what other jobs took since the last figure."""
        if self.remaining is None:
            return None
        since = max(0.0, now - self.figure_at)
        room = self.remaining - self.others_rate() * since
        return min(self.limit, room + self.refill * since) if self.refill and self.limit else room

    def spread(self, need: int, now: float) -> None:
        """Take ``need`` from what is left, and hold the next send for its share of the window."""
        if self.remaining is not None:
            self.remaining -= need
        if self.limit and self.window_s:
            rate = self.limit / self.window_s
            share = max(rate - self.others_rate(), rate * MIN_SHARE)
            self.next_at = max(self.next_at, now) + need / share

    def learn(self, figure: float, own: float, now: float, reset_in: float | None) -> None:
        """A newer figure in the same window: what fell beyond this job's own sends was other jobs';
        what rose was refilled (a bucket: it refills at what is missing over the time to full)."""
        rate = (self.limit - figure) / reset_in if self.limit and reset_in and figure < self.limit else 0.0
        if self.figure is not None and (self.reset_at is None or now < self.reset_at):
            rose, since = figure - (self.figure - own), now - self.figure_at
            # An answer reordered on the way in looks like a rise too: a refill is about as large as the rate says.
            if rate and (self.refill or rate * since / 2 <= rose <= 2 * rate * since):
                self.refill = rate
            # Signed: answers reordered on the way in count once too many here and once too few later.
            # A bucket refills no further than full: a smaller rise than the rate's is not other jobs' use.
            refilled = min(self.refill * since, max(0.0, (self.limit or 0.0) - self.figure))
            self.others -= rose - refilled
            self.others_s += now - self.figure_at
            if self.window_s and self.others_s > 2 * self.window_s:
                self.others, self.others_s = self.others / 2, self.others_s / 2
        self.figure, self.figure_at = figure, now


@dataclass
class Grant:
    """One attempt let through: what it costs and when, in order (``AdaptiveLimit.acquire``)."""

    seq: int  #: the order it was let through in
    cost: Cost
    observed: bool = False  #: its status and headers were learned from (``AdaptiveLimit.observe``)
    at: float = 0.0  #: when it was let through (the limiter's clock)
    admitted: bool = False  #: answered 2xx (the provider counted it)
    sent_at: float = 0.0  #: when the shared budget wrote it down (wall time), if there is one


#: The units a limit learned from 429s alone is kept in: a provider may count any of them.
LEARNED_UNITS = ("input-tokens", "output-tokens", "requests")
#: A rate learned from 429s alone is set to this share of what the endpoint admitted before refusing …
LEARNED_MARGIN = 0.9
#: … and grows by this share of an attempt a window with each success, so a 429 stays rare …
LEARNED_GROWTH = 0.02
#: … once a throttle has followed the search; before, by this share of itself (the search's last
#: pause may have been up to ``SEARCH_GROWTH`` times too long, and the window with it).
LEARNED_RAMP = 0.1
#: The search's pause grows this many times with each attempt refused.
SEARCH_GROWTH = 2


class _Learned:
    """A limit no header states, learned from 429s: a rate, and at most a window's worth at once.

    The first throttle pauses and sends one attempt at a time until one succeeds: what the endpoint
    admitted before that throttle, over the time from the first send to that success, is the rate
    (a margin below it), and that time the window. At each later throttle the rate is what the
    endpoint admitted over the trailing window, a margin below it (half the rate if it admitted
    nothing); between throttles it grows by a share of each success. Sends are spread at the rate,
    and no window's worth of sends holds more than the rate allows in a window: conservative for
    fixed windows and for buckets that refill continuously alike (a bucket's first success comes
    after one attempt's refill, so its window is short and the later throttles find its rate).
    """

    def __init__(self, wave: int) -> None:
        self.wave = wave  #: attempts in flight at once: the last so many sends show how fast the limit was met
        self.rate: dict[str, float] = {}  #: units a second, by unit, once learned
        self.window_s = 0.0  #: the longest a window's worth of sends may be crowded into, once learned
        self.started: float | None = None  #: the first send
        self.searching = False  #: throttled, nothing learned yet: the first success after teaches …
        self.probe: Grant | None = None  #: … of one attempt at a time, this one
        self.refused_seq = 0  #: the first attempt refused: those before it filled a window …
        self.search_s = 0.0  #: … as fast as the last wave of sends before it went: the search's first pause
        self.settled = False  #: a throttle was seen since the rate was learned: it grows slowly
        self.next_at = -math.inf
        self.kept: collections.deque[Grant] = collections.deque(maxlen=SENT_KEPT)  #: sends not refused

    def sent(self, grant: Grant) -> None:
        if self.started is None:
            self.started = grant.at
        self.kept.append(grant)
        if self.searching:
            self.probe = grant
        if self.rate:
            self.next_at = max(self.next_at, grant.at) + self.spacing(grant.cost)

    def spacing(self, cost: Cost) -> float:
        return max(cost.against(u) / r for u, r in self.rate.items() if r > 0)

    def refused(self, grant: Grant, new_throttle: bool) -> None:
        """A 429: the attempt was not counted; a new throttle measures the rate since the last."""
        with contextlib.suppress(ValueError):
            self.kept.remove(grant)
        if grant is self.probe:
            self.probe = None
        if not new_throttle:
            return
        if not self.rate:
            if not self.searching:  # the first throttle: what came before it is what one window holds
                self.searching, self.refused_seq = True, grant.seq
                wave = self.kept[-self.wave].at if len(self.kept) >= self.wave else self.started
                self.search_s = grant.at - (grant.at if wave is None else wave)
            return
        self.settled = True
        since = grant.at - self.window_s
        self.fit([g for g in self.kept if g.at >= since and g.seq < grant.seq], self.window_s, grant.cost,
                 cap=True)

    def fit(self, counted: list[Grant], seconds: float, refused: Cost, cap: bool) -> None:
        """The rate: a margin below what the endpoint counted over ``seconds`` (``cap``: never higher than
        it was); the window is long enough to hold the attempt refused."""
        for unit in LEARNED_UNITS:
            total = sum(g.cost.against(unit) for g in counted)
            if unit in self.rate and cap:  # nothing counted since the last throttle: half the rate
                self.rate[unit] = min(self.rate[unit], LEARNED_MARGIN * total / max(seconds, 1e-9)) \
                    if total > 0 else self.rate[unit] / 2
            elif total > 0:
                self.rate[unit] = LEARNED_MARGIN * total / max(seconds, 1e-9)
            if unit in self.rate:
                self.window_s = max(self.window_s, refused.against(unit) / self.rate[unit])

    def succeeded(self, grant: Grant, throttle_mark: int) -> None:
        """A success: the first after the first throttle teaches the rate; the others grow it."""
        grant.admitted = True
        if grant is self.probe:
            self.probe = None
        if self.searching and grant.seq >= throttle_mark and self.started is not None:
            self.searching = False
            self.window_s = max(grant.at - self.started, 1e-9)
            self.fit([g for g in self.kept if g.admitted and g.seq < self.refused_seq], self.window_s,
                     grant.cost, cap=False)
        elif self.rate and not self.searching:
            for unit in self.rate:
                # Until a throttle says otherwise the rate may be low (the search's last pause was long):
                # it grows by a share of itself; after, by a share of an attempt a window.
                if self.settled:
                    self.rate[unit] += LEARNED_GROWTH * grant.cost.against(unit) / self.window_s
                else:
                    self.rate[unit] *= 1 + LEARNED_RAMP

    def ended(self, grant: Grant) -> None:
        """An attempt ended neither admitted nor refused (a server error, a dropped connection): it
        taught nothing, and a search's next attempt probes in its place."""
        if grant is self.probe:
            self.probe = None

    def adopt(self, held: Mapping[str, float], held_s: float) -> None:
        """What every job on the key sent over a window, as the shared budget learned it: this job's
        rate is the endpoint's (the shared budget keeps the jobs under it together), not its own share."""
        if held_s <= 0 or not held:
            return
        for unit, total in held.items():
            self.rate[unit] = total / held_s
        self.window_s = held_s

    def wait(self, cost: Cost, now: float) -> float | None:
        """Seconds until ``cost`` may go by the learned rate (None: one attempt of a search is out)."""
        if self.probe is not None:
            return None
        if not self.rate:
            return 0.0
        while self.kept and self.kept[0].at <= now - self.window_s:
            self.kept.popleft()
        waits = [self.next_at - now]
        for unit, rate in self.rate.items():
            need, capacity = cost.against(unit), rate * self.window_s
            if need <= 0:
                continue
            held = sum(g.cost.against(unit) for g in self.kept)
            for g in self.kept:  # the oldest leave the window first
                if held + need <= capacity:
                    break
                held -= g.cost.against(unit)
                waits.append(g.at + self.window_s - now)
        return max(waits)


class AdaptiveLimit:
    """One endpoint's pacing at its rate limit and its concurrency (see the module docstring)."""

    def __init__(
        self,
        max_concurrency: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        pause_base_s: float = 0.5,
        pause_max_s: float = 60.0,
        probe: bool = True,
        probe_s: float = PROBE_S,
    ) -> None:
        """``clock`` schedules (monotonic); ``wall`` reads absolute reset times (epoch seconds).
        ``pause_base_s`` is the first pause after a throttle that says nothing of when to come back;
        ``probe``: until budget headers or a 429 say the limit, an attempt goes once the last one's head
        arrived, for ``probe_s`` from the first attempt at most (then the slow start is over)."""
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        self.max_concurrency = max_concurrency
        self._clock, self._wall = clock, wall
        self._pause_base_s, self._pause_max_s = pause_base_s, pause_max_s
        self._in_flight = 0
        self._seq = 0
        self._throttle_mark = 0  # grants from here on were let through after the last throttle was seen
        self._throttles_in_a_row = 0
        self._paused_until = -math.inf
        self._slow = probe  # nothing said the limit yet: an attempt goes once the last one's admission is known …
        self._probe_s = probe_s
        self._slow_until = math.inf  # … until this (``probe_s`` after the first attempt went)
        self._last: Grant | None = None  # the last attempt let through in the slow start
        self._budgets: dict[str, _Budget] = {}
        self._learned = _Learned(max_concurrency)  # what 429s teach where no header states a budget
        #: Attempts let through since the oldest figure in use (the first figure may answer any of them).
        self._sent: collections.deque[Grant] = collections.deque(maxlen=SENT_KEPT)
        self._queue: collections.deque[object] = collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        self.throttled = 0  #: 429/529 answers seen (what the pacing tests read; run stats count retries)
        self.throttles = 0  #: of which new throttles (a burst counts once)
        #: The budget shared with other jobs on the key through the cache folder (runtime/store/shared_budget.py).
        self.shared: SharedBudget | None = None

    @property
    def limit(self) -> int:
        """The concurrency bound (for the progress line)."""
        return self.max_concurrency

    @property
    def in_flight(self) -> int:
        """Attempts let through and not yet released."""
        return self._in_flight

    # -- deciding ---------------------------------------------------------------------

    def delay_for(self, cost: Cost) -> float | None:
        """Seconds until an attempt of ``cost`` may start: 0.0 now, None when it must wait for
        an attempt in flight to end (a concurrency slot, or a window it is larger than)."""
        now = self._clock()
        for budget in self._budgets.values():
            budget.roll(now, self._seq - 1)
        if now < self._paused_until:
            return self._paused_until - now
        if self._in_flight >= self.max_concurrency:
            return None
        if self._slow and self._last is not None and not self._last.observed:
            if now < self._slow_until:
                return self._slow_until - now
            self._slow = False  # it lasted its time: the others go blind
        waits = [0.0]
        for name, budget in self._budgets.items():
            need = cost.against(name)
            if need <= 0:
                continue
            waits.append(budget.next_at - now)
            room = budget.room(now)
            if room is None or need <= room:
                continue
            if budget.refill:
                waits.append((need - room) / budget.refill)
            elif budget.reset_at is not None:
                waits.append(budget.reset_at - now)
            elif self._in_flight > 0:
                return None  # larger than what the window holds: it goes alone
        if not self._budgets:
            learned = self._learned.wait(cost, now)
            if learned is None:
                return None
            waits.append(learned)
        return max(waits)

    def _grant(self, cost: Cost, sent_at: float = 0.0) -> Grant:
        now = self._clock()
        self._in_flight += 1
        grant = Grant(self._seq, cost, at=now, sent_at=sent_at)
        self._seq += 1
        if not self._budgets:
            self._learned.sent(grant)
        if self._slow:
            self._last = grant
            self._slow_until = min(self._slow_until, now + self._probe_s)
        for name, budget in self._budgets.items():
            budget.spread(cost.against(name), now)
        self._sent.append(grant)
        return grant

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def acquire(self, cost: Cost) -> Grant:
        """Wait until under the concurrency limit and the known budgets allow ``cost`` now."""
        ticket = object()
        self._queue.append(ticket)
        try:
            while True:
                wait = self.delay_for(cost) if self._queue[0] is ticket else None
                sent_at = 0.0
                if wait == 0.0 and self.shared is not None:  # and other jobs on the key leave room for it
                    wait, sent_at = self.shared.reserve(cost.against)
                if wait == 0.0:
                    self._queue.popleft()
                    return self._grant(cost, sent_at)
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, timeout=wait)
        except BaseException:
            if ticket in self._queue:
                self._queue.remove(ticket)
            raise
        finally:
            self._wake()  # the next in line re-checks

    # -- learning ---------------------------------------------------------------------

    def observe(self, grant: Grant, status: int, headers: Mapping[str, str]) -> None:
        """An answer's status and headers as they arrive (a stream's, before its body): a 2xx's
        budget headers pace the next sends at once (and end the first answer's wait). Anything else
        is learned at ``release``, its body read."""
        if 200 <= status < 300 and not grant.observed:
            grant.observed = True
            self._absorb(grant, read_budget(headers, self._wall()), self._clock())
            self._succeed(grant)
            self._wake()

    def release(self, grant: Grant, status: int | None, headers: Mapping[str, str], payload: object = None) -> None:
        """After each attempt, any outcome: learn from the status, budget headers and retry hint."""
        now = self._clock()
        self._in_flight = max(0, self._in_flight - 1)
        if not grant.observed:
            self._absorb(grant, read_budget(headers, self._wall()), now)
        if status in (429, 529):
            self._throttle(grant, now, retry_hint(headers, payload, self._wall()))
        elif status is not None and 200 <= status < 300 and not grant.observed:
            self._succeed(grant)
        elif not grant.observed:
            self._learned.ended(grant)
        grant.observed = True
        self._wake()

    def _absorb(self, grant: Grant, windows: Mapping[str, Window], now: float) -> None:
        """The provider's figures, as of the attempt they answer: what was sent after it is taken off."""
        if self.shared is not None:
            self.shared.learn(grant.sent_at, windows)
        if windows:  # the provider's figures pace the sends from here on
            self._slow = False
        for name, window in windows.items():
            budget = self._budgets.setdefault(name, _Budget())
            budget.limit = window.limit if window.limit is not None else budget.limit
            if window.reset_in is not None and window.reset_in > 0:
                budget.window_s = max(budget.window_s or 0.0, window.reset_in)
            if grant.seq < budget.grant or window.remaining is None:
                continue  # answers come back out of order: a later attempt's figure is newer
            budget.learn(window.remaining, sum(g.cost.against(name) for g in self._sent
                                               if budget.grant < g.seq <= grant.seq), now, window.reset_in)
            if self.shared is not None:  # what other jobs send is in the shared budget, sent by sent
                budget.others = 0.0
            budget.grant = grant.seq
            budget.remaining = window.remaining - sum(g.cost.against(name) for g in self._sent if g.seq > grant.seq)
            budget.reset_at = now + window.reset_in if window.reset_in else None
        oldest = min((b.grant for b in self._budgets.values()), default=-1)
        while self._sent and self._sent[0].seq <= oldest:
            self._sent.popleft()

    def _throttle(self, grant: Grant, now: float, hint: float | None) -> None:
        self.throttled += 1
        self._slow = False  # what was admitted before says what a window holds
        new = grant.seq >= self._throttle_mark  # else let through before the last throttle was seen: the same burst
        if not self._budgets:
            self._learned.refused(grant, new)
            if self.shared is not None:  # the provider did not count it
                self.shared.uncount(grant.sent_at)
        if not new:
            return
        self.throttles += 1
        self._throttle_mark = self._seq
        self._throttles_in_a_row += 1
        if hint is None and not self._budgets and self._learned.searching:
            base = max(self._pause_base_s, self._learned.search_s)
            hint = base * SEARCH_GROWTH ** min(self._throttles_in_a_row - 1, 30)
        if hint is not None:
            self._paused_until = max(self._paused_until, now + min(hint, self._pause_max_s))
        if self.shared is not None:  # every job on the key pauses, and learns what a window holds
            held = self.shared.throttled(grant.sent_at, max(0.0, self._paused_until - now),
                                         0.0 if self._budgets else self._learned.window_s)
            if not self._budgets and not self._learned.searching:
                self._learned.adopt(*held)

    def _succeed(self, grant: Grant) -> None:
        if not self._budgets:
            searching = self._learned.searching
            self._learned.succeeded(grant, self._throttle_mark)
            if searching and not self._learned.searching and self.shared is not None:
                # the window just learned (from the first send to this one): every job's sends not
                # refused over it are what it holds
                span = grant.at - (self._learned.started or grant.at)
                self._learned.adopt(*self.shared.windowed(grant.sent_at, span))
        self._throttles_in_a_row = 0
