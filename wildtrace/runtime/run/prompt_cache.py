"""The providers' prompt caches in a run: how long a prompt is asked to be held, and what the caches did.

``cache_ttl`` is the rule for a provider whose cache write costs more than input (Anthropic): a prompt
is marked for the shortest lifetime that holds it until its repeats come, and not at all when none
will come within the longest. ``RepeatSchedule`` applies it to a run: no repeat outside a sweep; in
a sweep the repeats come right after the first call is answered (pipeline: each task's other points),
so the gap is measured, task by task, and a gap seen longer than 5 minutes moves the next tasks to
the hour; through the batch API they come in the other jobs' batches, which take minutes to hours:
the hour (Anthropic's batch guide recommends it).

What the caches did is counted per endpoint over the calls this run sent (an outcome served from the
harness's own cache was not sent, so no provider cache served it). The saving of a call is what it would have cost with
every input token a miss, less what it cost (``core.cost.saved_cost``): a write that costs more than
input (Anthropic) counts against it. The hit rate is the share of input tokens read from the
cache (what the bill follows); ``hits`` counts the calls that read any. run_stats.json keeps it
under ``prompt_cache``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from wildtrace.core.cost import DIGITS, Price, billable, saved_cost
from wildtrace.core.records import CallResult

#: Anthropic's prompt-cache lifetimes, shortest first, in seconds (a write for 5 minutes costs 1.25x input,
#: for an hour 2x; each read refreshes the lifetime: docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
LIFETIMES: tuple[tuple[str, float], ...] = (("5m", 300.0), ("1h", 3600.0))
#: The repeats of a batched prompt come in the sweep's other jobs' batches: most batches end within the hour.
BATCH_GAP_S = 3600.0


def cache_ttl(repeats: int, gap_s: float) -> str | None:
    """The lifetime to ask for a prompt sent ``repeats`` times in all, its repeats ``gap_s`` after the
    first call began: the shortest that holds it until then; None (no mark, no write) when nothing
    repeats, or the repeats come later than the longest lifetime."""
    if repeats <= 1:
        return None
    return next((ttl for ttl, seconds in LIFETIMES if gap_s <= seconds), None)


def outlived(ttl: str | None, elapsed_s: float) -> bool:
    """Whether a prompt written for ``ttl`` is gone ``elapsed_s`` after its first call began (None: never held)."""
    return ttl is not None and elapsed_s > dict(LIFETIMES)[ttl]


@dataclass
class RepeatSchedule:
    """When a run's answer prompts are sent again, and so the lifetime each asks for (``cache_ttl``)."""

    repeats: int = 1  #: how many times the sweep sends each answer prompt (1: not a sweep)
    gap_s: float = 0.0  #: the longest gap seen (or expected) from a prompt's first call to its last repeat

    @classmethod
    def of(cls, repeats: int, batched: bool) -> RepeatSchedule:
        """A run's schedule: batched prompts repeat in other jobs' batches (the hour), others right after."""
        return cls(repeats, BATCH_GAP_S if batched and repeats > 1 else 0.0)

    def ttl(self) -> str | None:
        """The lifetime the next prompt asks for."""
        return cache_ttl(self.repeats, self.gap_s)

    def note(self, gap_s: float) -> None:
        """A prompt's repeats were all answered ``gap_s`` after its first call began (an upper bound on when
        the last reached the provider): the next prompts ask for a lifetime that covers it."""
        self.gap_s = max(self.gap_s, gap_s)


@dataclass
class Tally:
    """One endpoint's sent calls that reported their input, and their cache reads and writes."""

    calls: int = 0
    hits: int = 0  # calls that read part of their input from the provider's cache
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of those, written for an hour (Anthropic's 2x write)
    saved: Fraction | None = Fraction(0)  # None once any call's saving is unknown

    def row(self) -> dict:
        """The endpoint's ``prompt_cache`` row in run_stats.json."""
        return {"calls": self.calls, "hits": self.hits, "input_tokens": self.input_tokens,
                "cached_input_tokens": self.cached_input_tokens, "cache_write_tokens": self.cache_write_tokens,
                "cache_write_1h_tokens": self.cache_write_1h_tokens,
                "hit_rate": round(self.cached_input_tokens / self.input_tokens, 4) if self.input_tokens else None,
                "saved_usd": None if self.saved is None else round(float(self.saved), DIGITS)}


@dataclass
class PromptCacheTally:
    """Per endpoint label: the prompt-cache counts of the calls the run sent."""

    prices: Mapping[str, Price] = field(default_factory=dict)
    endpoints: dict[str, Tally] = field(default_factory=dict)

    def record(self, label: str, result: CallResult) -> None:
        """Count one call (served from the harness's cache, or without reported input: nothing to count)."""
        u = result.usage
        if result.cached or u.prompt_tokens is None:
            return
        tally = self.endpoints.setdefault(label, Tally())
        tally.calls += 1
        tally.hits += bool(u.cached_tokens)
        tally.input_tokens += u.prompt_tokens
        tally.cached_input_tokens += u.cached_tokens or 0
        tally.cache_write_tokens += u.cache_write_tokens or 0
        tally.cache_write_1h_tokens += u.cache_write_1h_tokens or 0
        usage = billable(u.prompt_tokens, u.completion_tokens or 0, u.cached_tokens, u.cache_write_tokens,
                         u.cache_write_1h_tokens)
        saved = saved_cost(self.prices.get(label), usage, result.batched)
        tally.saved = None if saved is None or tally.saved is None else tally.saved + saved

    def stats(self) -> dict:
        """run_stats.json's ``prompt_cache`` block: per endpoint, and the run's saving (None when unknown)."""
        rows = {label: t.row() for label, t in self.endpoints.items()}
        saved = [t.saved for t in self.endpoints.values()]
        total = None if any(s is None for s in saved) else round(float(sum(s for s in saved if s is not None)), DIGITS)
        return {"endpoints": rows, "saved_usd": total}

    def line(self) -> str | None:
        """The headline's line, when any sent call read from or wrote to a provider's cache."""
        if not any(t.cached_input_tokens or t.cache_write_tokens for t in self.endpoints.values()):
            return None
        parts = ", ".join(f"{label} {t.cached_input_tokens:,}/{t.input_tokens:,} input tokens cached "
                          f"({t.hits}/{t.calls} calls)" for label, t in self.endpoints.items())
        total = self.stats()["saved_usd"]
        return f"prompt cache: {parts}; saved {'unknown' if total is None else f'${total:,.4f}'}"
