"""An adaptive per-endpoint limit: concurrency that backs off and recovers, and token pacing.

One ``AdaptiveLimit`` per endpoint. Every HTTP attempt (first try or retry) does
``await limit.acquire(cost_tokens)`` before it is sent and ``limit.release(status, headers)``
after it ends, whatever the outcome. Two things decide when an attempt may start:

- **Concurrency**, additive-increase / multiplicative-decrease: a 429 or 529 halves the limit
  (floor 1, at most once per ``cooldown_s`` so one burst counts once) and pauses the endpoint
  for the server's retry hint, or for a pause that doubles with each throttle in a row; every
  ``increase_after`` successes add 1, up to ``max_concurrency``. A budget header showing less
  than ``low_fraction`` of a window left halves it too; it recovers once the budget clears.
- **Pacing by budget**: the ``x-ratelimit-*`` (OpenAI, and LiteLLM's ``llm_provider-`` relay)
  and ``anthropic-ratelimit-*`` headers say how many tokens and requests are left until when.
  An attempt whose estimated prompt tokens exceed what is left waits for the reset, so big
  prompts do not all start at once into a tokens-per-minute wall. The budget is taken to come
  back whole at the reset (conservative for the providers' token buckets, exact for fixed
  windows). An attempt larger than the whole budget still goes, alone, once the window is
  fresh: nothing waits forever.

Attempts are served first come, first served, so a big prompt is never starved by small ones.
Header reading (``read_budget``, ``parse_go_duration``) is pure and never raises.
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

from wildtrace.runtime.retry import lower_headers, retry_hint

#: The spec's rough sizes: ~3.3 characters a token in English, ~1.5 in Chinese.
CHARS_PER_TOKEN_EN = 3.3
CHARS_PER_TOKEN_CJK = 1.5

#: Header families (OpenAI's name part, Anthropic's name part) → the window they describe.
#: Anthropic's ``tokens`` is the most restrictive of its limits, ``input-tokens`` its ITPM.
_OPENAI = {"tokens": "tokens", "requests": "requests"}
_ANTHROPIC = {"tokens": "tokens", "input-tokens": "input-tokens", "requests": "requests"}
TOKEN_WINDOWS = ("tokens", "input-tokens")

_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_RESET_S = 86_400.0


def estimate_tokens(prompt_chars: int, cjk: bool, *, max_tokens: int = 0) -> int:
    """Tokens a prompt of ``prompt_chars`` characters costs (plus ``max_tokens`` if the provider
    counts the completion budget against its limit at request time, as OpenAI does)."""
    per_token = CHARS_PER_TOKEN_CJK if cjk else CHARS_PER_TOKEN_EN
    return max(1, math.ceil(max(0, prompt_chars) / per_token)) + max(0, max_tokens)


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
    ``requests``). Anthropic's headers first, then OpenAI's, then LiteLLM's relayed ones."""
    now = time.time() if wall_now is None else wall_now
    h = lower_headers(headers)
    found: dict[str, Window] = {}
    for part, name in _ANTHROPIC.items():
        prefix = f"anthropic-ratelimit-{part}-"
        window = _window(h, prefix + "limit", prefix + "remaining", prefix + "reset", now)
        if window is not None:
            found.setdefault(name, window)
    for relay in ("", "llm_provider-"):
        for part, name in _OPENAI.items():
            window = _window(h, f"{relay}x-ratelimit-limit-{part}", f"{relay}x-ratelimit-remaining-{part}",
                             f"{relay}x-ratelimit-reset-{part}", now)
            if window is not None:
                found.setdefault(name, window)
    return found


@dataclass
class _Budget:
    """What the limiter believes of one window, on its own clock."""

    limit: float | None
    remaining: float | None
    reset_at: float | None  # on the limiter's clock; None when the window is as full as it gets

    def roll(self, now: float) -> None:
        """A window past its reset is whole again (or unknown, if its size never was stated)."""
        if self.reset_at is not None and now >= self.reset_at:
            self.remaining, self.reset_at = self.limit, None

    def low(self, fraction: float) -> bool:
        """Less than ``fraction`` of a stated window left, and a reset still to come."""
        return (self.limit is not None and self.remaining is not None and self.reset_at is not None
                and self.remaining < fraction * self.limit)


class AdaptiveLimit:
    """One endpoint's adaptive concurrency limit and token pacing (see the module docstring)."""

    def __init__(
        self,
        max_concurrency: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        increase_after: int = 4,
        cooldown_s: float = 1.0,
        pause_base_s: float = 0.5,
        pause_max_s: float = 60.0,
        low_fraction: float = 0.05,
    ) -> None:
        """``clock`` schedules (monotonic); ``wall`` reads absolute reset times (epoch seconds)."""
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        self.max_concurrency = max_concurrency
        self._clock, self._wall = clock, wall
        self._increase_after, self._cooldown_s = max(1, increase_after), cooldown_s
        self._pause_base_s, self._pause_max_s, self._low_fraction = pause_base_s, pause_max_s, low_fraction
        self._limit = max_concurrency
        self._in_flight = 0
        self._successes = 0
        self._throttled_in_a_row = 0
        self._last_decrease = -math.inf
        self._paused_until = -math.inf
        self._budgets: dict[str, _Budget] = {}
        self._queue: collections.deque[object] = collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        self.throttled = 0  #: 429/529 answers seen (for run stats)

    @property
    def limit(self) -> int:
        """The current concurrency limit (for the progress line)."""
        return self._limit

    @property
    def in_flight(self) -> int:
        """Attempts acquired and not yet released."""
        return self._in_flight

    # -- deciding ---------------------------------------------------------------------

    def delay_for(self, cost_tokens: int) -> float | None:
        """Seconds until an attempt of ``cost_tokens`` may start: 0.0 now, None when it must
        wait for an attempt in flight to end (a concurrency slot, or a fresh budget)."""
        now = self._clock()
        for budget in self._budgets.values():
            budget.roll(now)
        if now < self._paused_until:
            return self._paused_until - now
        if self._in_flight >= self._limit:
            return None
        waits = [0.0]
        for name, budget in self._budgets.items():
            need = cost_tokens if name in TOKEN_WINDOWS else 1
            if budget.remaining is None or need <= budget.remaining:
                continue
            if budget.reset_at is not None:
                waits.append(budget.reset_at - now)
            elif self._in_flight > 0:
                return None  # larger than the whole window: it goes alone
        return max(waits)

    def _reserve(self, cost_tokens: int) -> None:
        self._in_flight += 1
        for name, budget in self._budgets.items():
            if budget.remaining is not None:
                budget.remaining -= cost_tokens if name in TOKEN_WINDOWS else 1

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def acquire(self, cost_tokens: int) -> None:
        """Wait until under the current limit and the known budget allows ``cost_tokens`` now."""
        ticket = object()
        self._queue.append(ticket)
        try:
            while True:
                wait = self.delay_for(cost_tokens) if self._queue[0] is ticket else None
                if wait == 0.0:
                    self._queue.popleft()
                    self._reserve(cost_tokens)
                    return
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

    def release(self, status: int | None, headers: Mapping[str, str], payload: object = None) -> None:
        """After each attempt, any outcome: learn from the status, budget headers and retry hint."""
        now = self._clock()
        self._in_flight = max(0, self._in_flight - 1)
        self._absorb(read_budget(headers, self._wall()), now)
        if status in (429, 529):
            self._throttle(now, retry_hint(headers, payload, self._wall()))
        elif status is not None and 200 <= status < 300:
            self._succeed(now)
        self._wake()

    def _absorb(self, windows: Mapping[str, Window], now: float) -> None:
        for name, window in windows.items():
            reset_at = None if window.reset_in is None or window.reset_in <= 0 else now + window.reset_in
            old = self._budgets.get(name)
            remaining: float | None
            if old is not None and old.reset_at is not None and now < old.reset_at and old.remaining is not None:
                # Same window: answers come back out of order, so keep the lower count (ours
                # already holds the attempts sent since the server counted).
                remaining = min(old.remaining, window.remaining if window.remaining is not None else old.remaining)
                reset_at = max(old.reset_at, reset_at or old.reset_at)
            else:
                remaining = window.remaining
            self._budgets[name] = _Budget(window.limit if window.limit is not None else (old.limit if old else None),
                                          remaining, reset_at)
        if any(b.low(self._low_fraction) for b in self._budgets.values()):
            self._decrease(now)

    def _decrease(self, now: float) -> None:
        if now - self._last_decrease >= self._cooldown_s:
            self._limit = max(1, self._limit // 2)
            self._last_decrease = now
        self._successes = 0

    def _throttle(self, now: float, hint: float | None) -> None:
        self.throttled += 1
        self._decrease(now)
        self._throttled_in_a_row += 1
        if hint is None:
            hint = self._pause_base_s * 2 ** min(self._throttled_in_a_row - 1, 30)
        self._paused_until = max(self._paused_until, now + min(hint, self._pause_max_s))

    def _succeed(self, now: float) -> None:
        self._throttled_in_a_row = 0
        if any(b.low(self._low_fraction) for b in self._budgets.values()):
            return
        self._successes += 1
        if self._successes >= self._increase_after and self._limit < self.max_concurrency:
            self._limit += 1
            self._successes = 0
