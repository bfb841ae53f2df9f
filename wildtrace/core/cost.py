"""What a call costs: token usage × the endpoint's price, as the providers bill it.

Pure arithmetic over plain values, so the estimate, the spend cap and the cost every row
records are the same sums. The rules (docs/providers/cost.md):

- prices are USD per million tokens: ``input``, ``cached_input`` (prompt-cache reads),
  ``cache_write`` and ``cache_write_1h`` (prompt-cache writes where a write costs more than input:
  Anthropic's 5-minute and 1-hour ``cache_control``), ``output`` (reasoning tokens are output: every
  provider bills them so);
- a long-context tier, when the price has one, applies to the WHOLE request once its input
  (cached included) is strictly above ``above_input_tokens``: input and cached input × the
  input multiplier, output × the output multiplier — as OpenAI, Google and Anthropic bill;
- a batched call costs ``(1 - batch_discount)`` of the same sum;
- anything the sum needs and the price or usage lacks makes the cost unknown (None), never 0.

Sums are exact (``Fraction``) and rounded once, at the end, to 1e-9 USD.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

MTOK = 1_000_000
#: Rounding of every reported cost (a billionth of a dollar: far below any provider's cent).
DIGITS = 9


@dataclass(frozen=True)
class Price:
    """An endpoint's price, USD per million tokens (None where the provider's page gave none)."""

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    cached_input_per_mtok: float | None = None
    #: Input written to the prompt cache for its default lifetime (Anthropic: 1.25x input for 5 minutes).
    cache_write_per_mtok: float | None = None
    #: Input written to the prompt cache for one hour (Anthropic's ``ttl: 1h``: 2x input).
    cache_write_1h_per_mtok: float | None = None
    #: The long-context tier: above this many input tokens the whole request is billed at the multipliers.
    above_input_tokens: int | None = None
    input_multiplier: float | None = None
    output_multiplier: float | None = None
    #: The fraction taken off a batched call (0.5 = half price); None: no batch price known.
    batch_discount: float | None = None

    def free(self) -> bool:
        """Every price is zero: the call costs nothing whatever its usage (the offline endpoints)."""
        return self.input_per_mtok == 0 and self.output_per_mtok == 0 and not self.cached_input_per_mtok

    def missing(self) -> list[str]:
        """The keys a cost needs that this price lacks (input and output; a tier needs both multipliers)."""
        out = [k for k in ("input_per_mtok", "output_per_mtok") if getattr(self, k) is None]
        if self.above_input_tokens is not None:
            out += [k for k in ("input_multiplier", "output_multiplier") if getattr(self, k) is None]
        return out


@dataclass(frozen=True)
class Billable:
    """The token counts a bill is made of: all input (cache reads and writes included), its cached
    part, all output, and the part of the input written to the prompt cache (of which for one hour)."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    written_tokens: int = 0
    written_1h_tokens: int = 0


def billable(prompt: int | None, completion: int | None, cached: int | None,
             written: int | None = None, written_1h: int | None = None) -> Billable | None:
    """A recorded usage as billable counts; None when input or output was not reported.

    The recorded completion count is the billed output for every wire format: OpenAI's
    completion_tokens and Anthropic's output_tokens include the reasoning tokens, and the Gemini
    reader records candidates + thoughts (providers/gemini/wire.py ``gemini_usage``).
    """
    if prompt is None or completion is None:
        return None
    cached_part = min(max(cached or 0, 0), prompt)
    written_part = min(max(written or 0, 0), max(prompt - cached_part, 0))
    return Billable(max(prompt, 0), cached_part, max(completion, 0), written_part,
                    min(max(written_1h or 0, 0), written_part))


def in_tier(price: Price, input_tokens: int) -> bool:
    """Whether a request of ``input_tokens`` falls in the price's long-context tier (strictly above)."""
    return price.above_input_tokens is not None and input_tokens > price.above_input_tokens


def _f(value: float) -> Fraction:
    # Through the decimal text: 0.1 is the provider's "0.10", not the nearest binary double.
    return Fraction(repr(float(value)))


def cost_usd(price: Price | None, usage: Billable | None, batched: bool = False) -> float | None:
    """The call's cost in USD, or None when the price or the usage cannot make it."""
    exact = exact_cost(price, usage, batched)
    return None if exact is None else round(float(exact), DIGITS)


def exact_cost(price: Price | None, usage: Billable | None, batched: bool = False) -> Fraction | None:
    """``cost_usd`` before rounding (sums of many calls are made from these)."""
    if price is not None and price.free():
        return Fraction(0)  # an in-process baseline: nothing to bill, whatever usage it reports (none)
    if price is None or usage is None or price.missing():
        return None
    written_5m = usage.written_tokens - usage.written_1h_tokens
    uncached = usage.input_tokens - usage.cached_input_tokens - usage.written_tokens
    parts = ((usage.cached_input_tokens, price.cached_input_per_mtok), (written_5m, price.cache_write_per_mtok),
             (usage.written_1h_tokens, price.cache_write_1h_per_mtok))
    if any(tokens and per_mtok is None for tokens, per_mtok in parts):
        return None  # a cache read or write with no price for it: the bill cannot be known
    in_mult = out_mult = Fraction(1)
    if in_tier(price, usage.input_tokens):
        in_mult, out_mult = _f(price.input_multiplier or 0), _f(price.output_multiplier or 0)
    total = (uncached * _f(price.input_per_mtok or 0) * in_mult
             + usage.output_tokens * _f(price.output_per_mtok or 0) * out_mult)
    for tokens, per_mtok in parts:
        if tokens:
            total += tokens * _f(per_mtok or 0) * in_mult
    total /= MTOK
    if batched:
        if price.batch_discount is None:
            return None
        total *= 1 - _f(price.batch_discount)
    return total


def worst_cost(price: Price | None, usage: Billable, batched: bool = False) -> Fraction | None:
    """The most a call of these counts can cost: its input all missed, or all written to the prompt
    cache where a write costs more (the spend cap reserves this before a call is sent)."""
    sums = [exact_cost(price, usage, batched)]
    if price is not None:
        if price.cache_write_per_mtok is not None:
            sums.append(exact_cost(price, replace(usage, written_tokens=usage.input_tokens), batched))
        if price.cache_write_1h_per_mtok is not None:
            sums.append(exact_cost(price, replace(usage, written_tokens=usage.input_tokens,
                                                  written_1h_tokens=usage.input_tokens), batched))
    if any(s is None for s in sums):
        return None
    return max(s for s in sums if s is not None)


def saved_cost(price: Price | None, usage: Billable | None, batched: bool = False) -> Fraction | None:
    """What the prompt cache saved on a call: its cost with every input token a miss, less its cost
    (negative when a write cost more than the reads saved); None when either is unknown."""
    if usage is None:
        return None
    paid = exact_cost(price, usage, batched)
    missed = exact_cost(price, Billable(usage.input_tokens, 0, usage.output_tokens), batched)
    return None if paid is None or missed is None else missed - paid


def total_usd(costs: list[float | None]) -> float | None:
    """The sum of known costs, None when any is unknown (a partial sum would read as the bill)."""
    if any(c is None for c in costs):
        return None
    return round(sum(Fraction(repr(c)) for c in costs if c is not None).__float__(), DIGITS)
