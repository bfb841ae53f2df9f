"""What a call costs: token usage × the endpoint's price, as the providers bill it.

Pure arithmetic over plain values, so the estimate, the spend cap and the cost every row
records are the same sums. The rules (docs/providers/cost.md):

- prices are USD per million tokens: ``input``, ``cached_input`` (prompt-cache reads),
  ``output`` (reasoning tokens are output: every provider bills them so);
- a long-context tier, when the price has one, applies to the WHOLE request once its input
  (cached included) is strictly above ``above_input_tokens``: input and cached input × the
  input multiplier, output × the output multiplier — as OpenAI, Google and Anthropic bill;
- a batched call costs ``(1 - batch_discount)`` of the same sum;
- anything the sum needs and the price or usage lacks makes the cost unknown (None), never 0.

Sums are exact (``Fraction``) and rounded once, at the end, to 1e-9 USD.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    """The token counts a bill is made of: all input (cached included), its cached part, all output."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int


def billable(prompt: int | None, completion: int | None, cached: int | None) -> Billable | None:
    """A recorded usage as billable counts; None when input or output was not reported.

    The recorded completion count is the billed output for every wire format: OpenAI's
    completion_tokens and Anthropic's output_tokens include the reasoning tokens, and the Gemini
    reader records candidates + thoughts (providers/gemini.py ``gemini_usage``).
    """
    if prompt is None or completion is None:
        return None
    cached_part = min(max(cached or 0, 0), prompt)
    return Billable(max(prompt, 0), cached_part, max(completion, 0))


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
    uncached = usage.input_tokens - usage.cached_input_tokens
    if usage.cached_input_tokens and price.cached_input_per_mtok is None:
        return None  # a cache read with no cached price: the bill cannot be known
    in_mult = out_mult = Fraction(1)
    if in_tier(price, usage.input_tokens):
        in_mult, out_mult = _f(price.input_multiplier or 0), _f(price.output_multiplier or 0)
    total = (uncached * _f(price.input_per_mtok or 0) * in_mult
             + usage.output_tokens * _f(price.output_per_mtok or 0) * out_mult)
    if usage.cached_input_tokens:
        total += usage.cached_input_tokens * _f(price.cached_input_per_mtok or 0) * in_mult
    total /= MTOK
    if batched:
        if price.batch_discount is None:
            return None
        total *= 1 - _f(price.batch_discount)
    return total


def total_usd(costs: list[float | None]) -> float | None:
    """The sum of known costs, None when any is unknown (a partial sum would read as the bill)."""
    if any(c is None for c in costs):
        return None
    return round(sum(Fraction(repr(c)) for c in costs if c is not None).__float__(), DIGITS)
