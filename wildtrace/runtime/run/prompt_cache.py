"""What the providers' prompt caches did for a run: tokens read and written, the hit rate, the money saved.

Counted per endpoint over the calls this run sent (an outcome served from the harness's own cache
was not sent, so no provider cache served it). The saving of a call is what it would have cost with
every input token a miss, less what it cost (``core.cost.saved_cost``): a write that costs more than
input (Anthropic) counts against it. run_stats.json keeps it under ``prompt_cache``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from wildtrace.core.cost import DIGITS, Price, billable, saved_cost
from wildtrace.core.records import CallResult


@dataclass
class Tally:
    """One endpoint's sent calls that reported their input, and their cache reads and writes."""

    calls: int = 0
    hits: int = 0  # calls that read part of their input from the provider's cache
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    saved: Fraction | None = Fraction(0)  # None once any call's saving is unknown

    def row(self) -> dict:
        """The endpoint's ``prompt_cache`` row in run_stats.json."""
        return {"calls": self.calls, "input_tokens": self.input_tokens,
                "cached_input_tokens": self.cached_input_tokens, "cache_write_tokens": self.cache_write_tokens,
                "hit_rate": round(self.hits / self.calls, 4) if self.calls else None,
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
