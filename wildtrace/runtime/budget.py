"""The run's money: what each call cost, what the run spent, and a spend cap that holds.

One ``Ledger`` per run. Every call's outcome passes through ``Ledger.settle``, which prices
it from the usage the endpoint reported (``wildtrace.core.cost``): a call served from the
cache costs 0 in this run and keeps what it cost when it was paid (``original_cost_usd``).

The cap (``budget.max_usd`` for the run, ``<endpoint>.max_usd`` for one endpoint): before a
call is sent its worst case is reserved — at most one token per UTF-8 byte of the request
body in (no byte-level tokenizer makes more), ``max_tokens`` out, at tier prices when that
input could cross the tier. A reservation that does not fit is refused, and the call is
recorded as ``budget_exhausted`` (never sent, never cached, so a rerun with a higher cap
sends it). On reply the reservation is replaced by the real cost, so spend plus what is in
flight never exceeds a cap, whatever the concurrency. A call whose cost cannot be known (the
connection dropped after the request went out) keeps its reservation as spent: the provider
may have billed it. Batch mode reserves each item the same way, at the batch price, before its
batch is created (runtime/batch/spend.py), and settles each outcome when it arrives
(``settle_ahead``). Single-threaded: the ledger lives on the run's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from wildtrace.core.cost import DIGITS, Billable, Price, billable, exact_cost
from wildtrace.core.records import CallResult, FailReason, Usage

#: Bytes of request body beyond the prompt's own (role markers, a chat template) allowed for.
TEMPLATE_TOKENS = 64


class BudgetError(ValueError):
    """A cap that cannot be enforced (an endpoint under it has no price); the message names the key."""


def _usd(value: Fraction) -> float:
    return round(float(value), DIGITS)


@dataclass
class Account:
    """One endpoint's money in this run."""

    price: Price | None
    cap: Fraction | None = None
    spent: Fraction = Fraction(0)  # known cost of calls paid in this run
    held: Fraction = Fraction(0)  # reservations of calls in flight
    lost: Fraction = Fraction(0)  # reservations kept for calls whose cost is unknown (they may have been billed)
    unknown: int = 0  # paid calls whose cost could not be made
    calls_paid: int = 0
    not_sent: int = 0  # calls refused for the cap
    original: Fraction = Fraction(0)  # what the calls served from the cache cost when they were paid
    original_unknown: int = 0  # cached calls whose original cost cannot be made

    def committed(self) -> Fraction:
        """What counts against a cap now: spent, lost and in flight."""
        return self.spent + self.lost + self.held

    def settled(self) -> Fraction:
        """What counts against a cap once every call in flight has settled at no cost."""
        return self.spent + self.lost


@dataclass
class Ticket:
    """One logical call's claim on the budget: reserved once before sending, settled on reply."""

    ledger: Ledger
    label: str
    worst: Fraction | None  # None: no cap applies (nothing to reserve)
    batched: bool = False  # sent through a provider's batch API: priced with its batch discount
    reserved: bool = False
    refused: bool = False

    async def reserve(self) -> bool:
        """Hold the call's worst case; False (and nothing held) when it can never fit a cap.

        A call that would fit once the calls in flight settle waits for them (they release
        what they did not spend) rather than being refused while the money is only reserved.
        """
        while (verdict := self.reserve_now()) is None:
            await self.ledger.changed()
        return verdict

    def reserve_now(self) -> bool | None:
        """``reserve`` without waiting: True (held), False (refused, counted as not sent), or None when
        it would fit only once the calls in flight settle (nothing held; ask again after they do).

        Batch mode needs this: a batch's items are all reserved before the batch is created, so an
        item must not wait for the items of its own batch to settle."""
        if self.reserved or self.worst is None:
            return True
        if not self.ledger.fits(self.label, self.worst):
            return None if self.ledger.fits(self.label, self.worst, settled=True) else self.refuse()
        self.ledger.hold(self.label, self.worst)
        self.reserved = True
        return True

    def refuse(self) -> bool:
        """Keep the call back for the cap (counted as not sent; its outcome is ``refusal()``): False."""
        self.refused = True
        self.ledger.account(self.label).not_sent += 1
        return False

    def refusal(self) -> CallResult:
        """The outcome of a call the cap did not let through: not sent, not a model failure."""
        text = self.ledger.refusal_text(self.label, self.worst or Fraction(0))
        return CallResult(False, None, FailReason.BUDGET_EXHAUSTED, text, None, Usage(), 0, 0.0, None, None)


@dataclass
class Ledger:
    """Prices, caps and spend for every endpoint of a run."""

    accounts: dict[str, Account] = field(default_factory=dict)
    run_cap: Fraction | None = None
    _change: asyncio.Event | None = field(default=None, repr=False)
    #: label → the config key its settings live under (model, judge_panel.judges.<key>), for messages.
    keys: dict[str, str] = field(default_factory=dict)
    #: Outcomes settled when they arrived, before the pipeline's call picks them up (batch mode puts
    #: them in ``Endpoint.ready``), by identity; each is kept alive here so its id stays its own.
    _ahead: dict[int, CallResult] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, prices: Mapping[str, tuple[Price | None, float | None]], run_cap: float | None) -> Ledger:
        """``prices``: label → (price, the endpoint's own cap)."""
        accounts = {label: Account(price, None if cap is None else Fraction(repr(cap)))
                    for label, (price, cap) in prices.items()}
        return cls(accounts, None if run_cap is None else Fraction(repr(run_cap)))

    def account(self, label: str) -> Account:
        """The endpoint's account; one the ledger was not built with has no price (its costs are unknown)."""
        return self.accounts.setdefault(label, Account(None))

    # ------------------------------------------------------------------ the cap

    def capped(self, label: str) -> bool:
        """Whether any cap applies to calls of ``label``."""
        return self.run_cap is not None or self.account(label).cap is not None

    def check(self, labels: Iterable[str], key_of: Mapping[str, str]) -> None:
        """Refuse a cap over an endpoint with no price, before any request (``key_of``: label → config key)."""
        self.keys.update(key_of)
        for label in labels:
            account = self.account(label)
            if not self.capped(label):
                continue
            missing = ["price"] if account.price is None else account.price.missing()
            if missing:
                cap = "budget.max_usd" if self.run_cap is not None else f"{key_of[label]}.max_usd"
                raise BudgetError(f"{cap} is set but {key_of[label]} has no {key_of[label]}.price.{missing[0]}: "
                                  "a cap cannot hold over a price nobody knows (set it, or drop the cap)")

    def ticket(self, label: str, body_bytes: int, max_tokens: int, batched: bool = False) -> Ticket:
        """A ticket for one call: its worst case when a cap applies, else nothing to reserve.

        ``batched``: the call goes through a batch API (a batch transport sets it): its worst case
        and its cost take the price's batch discount."""
        account = self.account(label)
        if not self.capped(label) or account.price is None:
            return Ticket(self, label, None, batched)
        worst = exact_cost(account.price, _worst_usage(body_bytes, max_tokens), batched)
        return Ticket(self, label, worst, batched)

    def fits(self, label: str, amount: Fraction, settled: bool = False) -> bool:
        """Whether ``amount`` more fits under the endpoint's cap and the run's (``settled``: once nothing
        is in flight)."""
        account = self.account(label)
        mine = account.settled() if settled else account.committed()
        if account.cap is not None and mine + amount > account.cap:
            return False
        total = sum((a.settled() if settled else a.committed() for a in self.accounts.values()), Fraction(0))
        return self.run_cap is None or total + amount <= self.run_cap

    async def changed(self) -> None:
        """Wait until a call in flight settles (and so may have released part of its reservation)."""
        if self._change is None:
            self._change = asyncio.Event()
        await self._change.wait()

    def _notify(self) -> None:
        if self._change is not None:
            self._change.set()
            self._change = None

    def abandon(self, label: str, ticket: Ticket | None) -> None:
        """A call that ended without an outcome (cancelled, or it raised): its reservation stays spent."""
        if ticket is not None and ticket.reserved:
            account = self.account(label)
            account.held -= ticket.worst or 0
            account.lost += ticket.worst or 0
            ticket.reserved = False
            self._notify()

    def hold(self, label: str, amount: Fraction) -> None:
        """Reserve ``amount`` for a call about to be sent."""
        self.account(label).held += amount

    def committed(self) -> Fraction:
        """Spent plus held, all endpoints."""
        return sum((a.committed() for a in self.accounts.values()), Fraction(0))

    def refusal_text(self, label: str, amount: Fraction) -> str:
        """Why a call of worst case ``amount`` was not sent: which cap, and what was committed against it."""
        account = self.account(label)
        if account.cap is not None and account.committed() + amount > account.cap:
            cap, committed = f"{self.keys.get(label, label)}.max_usd=${_usd(account.cap)}", account.committed()
        else:
            cap, committed = f"budget.max_usd=${_usd(self.run_cap or Fraction(0))}", self.committed()
        return (f"not sent: its worst case ${_usd(amount)} would pass {cap} (${_usd(committed)} spent or in "
                "flight); rerun with a higher cap to send it")

    # ------------------------------------------------------------------ settling

    def settle_ahead(self, label: str, result: CallResult, ticket: Ticket | None) -> CallResult:
        """``settle`` for an outcome that arrives before the pipeline asks for it (batch mode).

        Its reservation must turn into its real cost the moment it arrives, or the next batch's
        items would be reserved against worst cases long since paid; the pipeline's ``settle`` of
        the same outcome, when its call finds it ready, then returns it as it is (counted once)."""
        settled = self.settle(label, result, ticket)
        self._ahead[id(settled)] = settled
        return settled

    def settle(self, label: str, result: CallResult, ticket: Ticket | None = None) -> CallResult:
        """Price an outcome, release its reservation for its real cost, and return it with its cost."""
        if self._ahead.get(id(result)) is result:
            return result  # settled when it arrived (settle_ahead)
        account = self.account(label)
        held = ticket is not None and ticket.reserved
        if held and ticket is not None:
            account.held -= ticket.worst or 0
            ticket.reserved = False
            self._notify()
        if result.reason == FailReason.BUDGET_EXHAUSTED:
            return replace(result, cost_usd=0.0)
        exact = self._cost(account, result, (ticket is not None and ticket.batched) or result.batched)
        if result.cached:
            if exact is None:
                account.original_unknown += 1
            else:
                account.original += exact
            return replace(result, cost_usd=0.0, original_cost_usd=None if exact is None else _usd(exact))
        account.calls_paid += 1
        if exact is None:
            account.unknown += 1
            if held and ticket is not None:
                account.lost += ticket.worst or 0  # it may have been billed: keep it against the cap
            return replace(result, cost_usd=None)
        account.spent += exact
        return replace(result, cost_usd=_usd(exact))

    @staticmethod
    def _cost(account: Account, result: CallResult, batched: bool = False) -> Fraction | None:
        u = result.usage
        if u.prompt_tokens is None and u.completion_tokens is None and not result.ok:
            # No usage: an error status or a call never sent is not billed; a cut connection may be.
            sent_and_lost = result.attempts > 0 and (result.http_status is None or result.http_status < 400)
            return None if sent_and_lost else Fraction(0)
        return exact_cost(account.price, billable(u.prompt_tokens, u.completion_tokens, u.cached_tokens), batched)

    # ------------------------------------------------------------------ reporting

    def spent_usd(self, label: str | None = None) -> float | None:
        """Known spend of one endpoint (None: it has no price), or of the run (None if any endpoint has none)."""
        if label is not None:
            account = self.account(label)
            if account.price is None or account.price.missing():
                return None if account.calls_paid else 0.0
            return _usd(account.spent)
        parts = [self.spent_usd(lbl) for lbl in self.accounts]
        if any(p is None for p in parts):
            return None
        return _usd(sum((a.spent for a in self.accounts.values()), Fraction(0)))

    def not_sent(self) -> int:
        """Calls the cap kept from being sent."""
        return sum(a.not_sent for a in self.accounts.values())

    def stats(self) -> dict:
        """run_stats.json's ``cost`` block: per endpoint and the total, caps and what they stopped."""
        endpoints = {label: {"cost_usd": self.spent_usd(label), "calls_paid": a.calls_paid,
                             "calls_cost_unknown": a.unknown, "not_sent_budget": a.not_sent,
                             "max_usd": None if a.cap is None else _usd(a.cap)}
                     for label, a in self.accounts.items()}
        results = [a.spent + a.original for a in self.accounts.values()]
        known = all(not a.unknown and not a.original_unknown and self.spent_usd(label) is not None
                    for label, a in self.accounts.items())
        return {"total_usd": self.spent_usd(), "endpoints": endpoints,
                # what the run's outcomes cost to produce: paid now, or earlier for those served from the cache
                "results_usd": _usd(sum(results, Fraction(0))) if known else None,
                "max_usd": None if self.run_cap is None else _usd(self.run_cap), "not_sent_budget": self.not_sent()}

    def progress(self) -> str:
        """Spend against the cap, for the progress line ("" when nothing is capped or priced)."""
        total = self.spent_usd()
        if self.run_cap is not None:
            return f"spent ${_usd(sum((a.spent for a in self.accounts.values()), Fraction(0))):.2f}" \
                   f"/${_usd(self.run_cap):.2f}"
        caps = [f"{label} ${_usd(a.spent):.2f}/${_usd(a.cap):.2f}" for label, a in self.accounts.items()
                if a.cap is not None]
        if caps:
            return "spent " + " ".join(caps)
        unpriced = any(a.price is None or a.price.missing() for a in self.accounts.values())
        return "" if total is None or unpriced else f"spent ${total:.2f}"


def _worst_usage(body_bytes: int, max_tokens: int) -> Billable:
    return Billable(max(body_bytes, 0) + TEMPLATE_TOKENS, 0, max(max_tokens, 0))
