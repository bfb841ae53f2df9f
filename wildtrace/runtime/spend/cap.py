"""The run's money: what each call cost, what the command spent, and a spend cap that holds.

One ``Ledger`` per run. Every call's outcome passes through ``Ledger.settle``, which prices
it from the usage the endpoint reported (``wildtrace.core.cost``): a call served from the
cache costs 0 in this run and keeps what it cost when it was paid (``original_cost_usd``).

The cap (``budget.max_usd`` for the run, ``<endpoint>.max_usd`` for one endpoint) bounds the
*command*, not the process: everything every run of the same command has paid or may have been
billed for, as written in its spend journal (``Journal``: ``<cache.dir>/spend/<command>.jsonl``).
Before each attempt is sent its worst case is reserved — at most one token per UTF-8 byte of the
request body in (no byte-level tokenizer makes more), ``max_tokens`` out, at tier prices when
that input could cross the tier — and the reservation is on disk before the request leaves. A
reservation that does not fit is refused, and the call is recorded as ``budget_exhausted``
(never cached, so a rerun with a higher cap sends it). On reply the reservation is replaced by
the real cost. An attempt whose bill cannot be known (a timeout or a cut after the request went
out, a 5xx, a 2xx that is no answer) keeps its reservation as spent, and a retry of it reserves
its own worst case; a reservation a killed process never settled counts at its worst case. So
spend plus what is in flight never exceeds a cap, whatever the concurrency, retries or kills.
Batch mode reserves each item the same way, at the batch price, before its batch is created
(runtime/batch/spend.py), and settles each outcome when it arrives (``settle_ahead``).
Single-threaded: the ledger lives on the run's event loop. While calls go out the journal's writes
run off it, one at a time, in asyncio's default thread pool (``Ledger.written``); ``close`` writes
the last ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from wildtrace.core.cost import DIGITS, Billable, Price, billable, exact_cost, worst_cost
from wildtrace.core.records import CallResult, FailReason, Usage

log = logging.getLogger(__name__)

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
    held: Fraction = Fraction(0)  # reservations of attempts in flight
    lost: Fraction = Fraction(0)  # reservations kept for attempts whose bill is unknown (they may have been billed)
    unknown: int = 0  # attempts of this run whose bill is unknown (counted at their worst case)
    calls_paid: int = 0
    not_sent: int = 0  # calls refused for the cap
    left: Fraction = Fraction(0)  # the worst cases of the calls refused for the cap (what a resume must allow for)
    original: Fraction = Fraction(0)  # what the calls served from the cache cost when they were paid
    original_unknown: int = 0  # cached calls whose original cost cannot be made
    earlier: Fraction = Fraction(0)  # what other runs of the same command paid or may have been billed (journal)

    def committed(self) -> Fraction:
        """What counts against a cap now: the command's earlier runs, spent, lost and in flight."""
        return self.earlier + self.spent + self.lost + self.held

    def settled(self) -> Fraction:
        """What counts against a cap once every call in flight has settled at no cost."""
        return self.earlier + self.spent + self.lost


@dataclass
class Ticket:
    """One logical call's claim on the budget: reserved once before sending, settled on reply."""

    ledger: Ledger
    label: str
    worst: Fraction | None  # None: no cap applies (nothing to reserve)
    batched: bool = False  # sent through a provider's batch API: priced with its batch discount
    reserved: bool = False
    refused: bool = False
    entry: str | None = None  # the journal id of the attempt's reservation
    lost: int = 0  # attempts of this call whose bill is unknown (kept at their worst case)
    billed: bool | None = None  # whether the last attempt may have been billed (None: not told, e.g. a batch item)

    async def reserve(self) -> bool:
        """Hold the next attempt's worst case, on disk before it is sent; False (nothing held) when it can
        never fit a cap.

        A call that would fit once the calls in flight settle waits for them (they release
        what they did not spend) rather than being refused while the money is only reserved.
        """
        while (verdict := self.reserve_now()) is None:
            await self.ledger.changed()
        if self.worst is not None:  # nothing to write before an uncapped call (its cost is written at the end)
            await self.ledger.written()
        return verdict

    def sent(self, billed: bool) -> None:
        """What the attempt just made may have cost: ``billed`` when it may have been billed (it left and was
        not refused), False when it cannot have been (it never left, a 3xx or 4xx)."""
        self.billed = billed

    def attempted(self) -> None:
        """An attempt ended without the call's outcome (it is retried): one that may have been billed
        keeps its reservation as spent, and the next attempt reserves its own; one that cannot have been
        leaves its reservation for the next attempt."""
        if self.billed is not False and self.reserved:
            self.ledger.lose(self)

    def reserve_now(self) -> bool | None:
        """``reserve`` without waiting: True (held), False (refused, counted as not sent), or None when
        it would fit only once the calls in flight settle (nothing held; ask again after they do).

        Batch mode needs this: a batch's items are all reserved before the batch is created, so an
        item must not wait for the items of its own batch to settle."""
        if self.reserved or self.worst is None:
            return True
        if not self.ledger.fits(self.label, self.worst):
            return None if self.ledger.fits(self.label, self.worst, settled=True) else self.refuse()
        self.entry = self.ledger.hold(self.label, self.worst)
        self.reserved = True
        return True

    def refuse(self) -> bool:
        """Keep the call back for the cap (counted as not sent; its outcome is ``refusal()``): False."""
        self.refused = True
        account = self.ledger.account(self.label)
        account.not_sent += 1
        account.left += self.worst or 0
        return False

    def refusal(self, attempts: int = 0) -> CallResult:
        """The outcome of a call the cap did not let through (after ``attempts`` sent): not a model failure."""
        text = self.ledger.refusal_text(self.label, self.worst or Fraction(0))
        if attempts:
            text = f"{text} (a retry, after {attempts} attempt(s) that may have been billed)"
        return CallResult(False, None, FailReason.BUDGET_EXHAUSTED, text, None, Usage(), attempts, 0.0, None, None)


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
    #: The command's spend on disk (None: this process alone, e.g. with the cache disabled).
    journal: Journal | None = None
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @classmethod
    def build(cls, prices: Mapping[str, tuple[Price | None, float | None]], run_cap: float | None,
              journal: Journal | None = None) -> Ledger:
        """``prices``: label → (price, the endpoint's own cap); ``journal``: the command's earlier spend."""
        accounts = {label: Account(price, None if cap is None else Fraction(repr(cap)))
                    for label, (price, cap) in prices.items()}
        ledger = cls(accounts, None if run_cap is None else Fraction(repr(run_cap)), journal=journal)
        ledger._earlier()
        return ledger

    def _earlier(self) -> None:
        """Each account's share of what the journal says other runs of the command committed."""
        if self.journal is not None:
            for label, amount in self.journal.others().items():
                self.account(label).earlier = amount

    async def written(self) -> None:
        """Wait until every reservation made so far is on disk (before the attempts they cover are sent).

        One write at a time: a line queued while another write is under way waits for it, then goes
        in the next (lines queued together share one fsync)."""
        if self.journal is None:
            return
        async with self._writing:
            if self.journal.pending:
                lines, self.journal.pending = self.journal.pending, []  # taken here, on the loop
                await asyncio.to_thread(self.journal.write, lines)
                self._earlier()

    def close(self) -> None:
        """Write what is left of the journal (the settlements of the last calls)."""
        if self.journal is not None:
            try:
                self.journal.flush()
            except OSError as exc:  # its reservations are on disk: what is lost counts at its worst case
                log.warning("the spend journal %s could not be written: %s", self.journal.path, exc.strerror or exc)

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
        worst = worst_cost(account.price, _worst_usage(body_bytes, max_tokens), batched)  # a miss, or a write
        return Ticket(self, label, worst, batched)

    def expect(self, label: str, body_bytes: int, max_tokens: int) -> None:
        """Count a call left to send that no ticket was made for (for the resume hint's cap)."""
        worst = self.ticket(label, body_bytes, max_tokens).worst
        self.account(label).left += worst or 0

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
            self.lose(ticket)

    def lose(self, ticket: Ticket) -> None:
        """The ticket's attempt may have been billed, for an amount nobody knows: its worst case stays spent."""
        account, worst = self.account(ticket.label), ticket.worst or Fraction(0)
        account.held -= worst
        account.lost += worst
        account.unknown += 1
        ticket.lost += 1
        ticket.reserved = False
        self._paid(ticket, worst)
        self._notify()

    def hold(self, label: str, amount: Fraction) -> str | None:
        """Reserve ``amount`` for an attempt about to be sent; its journal id (written by ``written``)."""
        self.account(label).held += amount
        return None if self.journal is None else self.journal.add(label, reserve=amount)

    def _paid(self, ticket: Ticket | None, amount: Fraction) -> None:
        """Settle a reservation in the journal: what the attempt cost (its worst case when unknown)."""
        if self.journal is not None and ticket is not None and ticket.entry is not None:
            self.journal.add(ticket.label, paid=amount, entry=ticket.entry)
            ticket.entry = None

    def committed(self) -> Fraction:
        """Spent plus held, all endpoints."""
        return sum((a.committed() for a in self.accounts.values()), Fraction(0))

    def refusal_text(self, label: str, amount: Fraction) -> str:
        """Why a call of worst case ``amount`` was not sent: which cap, and what was committed against it."""
        account = self.account(label)
        if account.cap is not None and account.committed() + amount > account.cap:
            cap, committed = f"{self.keys.get(label, label)}.max_usd=${_usd(account.cap)}", account.committed()
            earlier = account.earlier
        else:
            cap, committed = f"budget.max_usd=${_usd(self.run_cap or Fraction(0))}", self.committed()
            earlier = sum((a.earlier for a in self.accounts.values()), Fraction(0))
        before = f", ${_usd(earlier)} of it by earlier runs of this command" if earlier else ""
        return (f"not sent: its worst case ${_usd(amount)} would pass {cap} (${_usd(committed)} spent, may have "
                f"been billed or in flight{before}); rerun with a higher cap to send it")

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
        earlier_lost = ticket is not None and ticket.lost > 0  # attempts before this outcome may have been billed
        if result.reason == FailReason.BUDGET_EXHAUSTED:
            self._release(ticket)
            return replace(result, cost_usd=None if earlier_lost else 0.0)
        exact = self._cost(account, result, (ticket is not None and ticket.batched) or result.batched)
        if exact is None and ticket is not None and ticket.billed is False:
            exact = Fraction(0)  # its last attempt never left (no connection), or was refused: not billed
        if result.cached:
            self._release(ticket)
            if exact is None:
                account.original_unknown += 1
            else:
                account.original += exact
            return replace(result, cost_usd=0.0, original_cost_usd=None if exact is None else _usd(exact))
        account.calls_paid += 1
        if exact is None:
            if ticket is not None and ticket.reserved:
                self.lose(ticket)  # it may have been billed: keep it against the cap
            else:
                account.unknown += 1
            return replace(result, cost_usd=None)
        if ticket is not None and ticket.reserved:
            self._release(ticket, exact)
        elif self.journal is not None and exact:
            self.journal.add(label, paid=exact)  # no cap held it: still the command's spend
        account.spent += exact
        return replace(result, cost_usd=_usd(exact))

    def _release(self, ticket: Ticket | None, paid: Fraction = Fraction(0)) -> None:
        """Replace the ticket's reservation (if it holds one) by what its attempt cost."""
        if ticket is not None and ticket.reserved:
            self.account(ticket.label).held -= ticket.worst or 0
            ticket.reserved = False
            self._paid(ticket, paid)
            self._notify()

    @staticmethod
    def _cost(account: Account, result: CallResult, batched: bool = False) -> Fraction | None:
        u = result.usage
        if u.prompt_tokens is None and u.completion_tokens is None and not result.ok:
            # No usage: a call never sent or refused (4xx) is not billed; a cut connection or a 5xx may be.
            return None if result.attempts > 0 and may_be_billed(result.http_status) else Fraction(0)
        return exact_cost(account.price, billable(u.prompt_tokens, u.completion_tokens, u.cached_tokens,
                                                           u.cache_write_tokens, u.cache_write_1h_tokens), batched)

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

    def at_most_usd(self, label: str | None = None) -> float | None:
        """What the run may have paid: the known spend plus the worst case of every attempt of unknown bill."""
        known = self.spent_usd(label)
        accounts = [self.account(label)] if label is not None else list(self.accounts.values())
        return None if known is None else _usd(sum((a.spent + a.lost for a in accounts), Fraction(0)))

    def not_sent(self) -> int:
        """Calls the cap kept from being sent."""
        return sum(a.not_sent for a in self.accounts.values())

    def stats(self) -> dict:
        """run_stats.json's ``cost`` block: per endpoint and the total, caps and what they stopped.

        ``total_usd``: known, paid in this run; ``at_most_usd``: with every attempt of unknown bill at its
        worst case; ``command_usd``: what the cap counts, every run of the command included;
        ``left_usd``: the worst cases of the calls the cap kept back."""
        def total(part: str) -> float:
            return _usd(sum((getattr(a, part) for a in self.accounts.values()), Fraction(0)))

        endpoints = {label: {"cost_usd": self.spent_usd(label), "at_most_usd": self.at_most_usd(label),
                             "calls_paid": a.calls_paid, "attempts_cost_unknown": a.unknown,
                             "earlier_usd": _usd(a.earlier), "command_usd": _usd(a.settled()),
                             "not_sent_budget": a.not_sent, "left_usd": _usd(a.left),
                             "max_usd": None if a.cap is None else _usd(a.cap)}
                     for label, a in self.accounts.items()}
        results = [a.spent + a.original for a in self.accounts.values()]
        known = all(not a.unknown and not a.original_unknown and self.spent_usd(label) is not None
                    for label, a in self.accounts.items())
        return {"total_usd": self.spent_usd(), "at_most_usd": self.at_most_usd(), "endpoints": endpoints,
                # what the run's outcomes cost to produce: paid now, or earlier for those served from the cache
                "results_usd": _usd(sum(results, Fraction(0))) if known else None,
                "earlier_usd": total("earlier"),
                "command_usd": _usd(sum((a.settled() for a in self.accounts.values()), Fraction(0))),
                "left_usd": total("left"),
                "max_usd": None if self.run_cap is None else _usd(self.run_cap), "not_sent_budget": self.not_sent()}

    def progress(self) -> str:
        """Spend against the cap (every run of the command), for the progress line ("" when nothing is capped
        or priced)."""
        total = self.spent_usd()
        if self.run_cap is not None:
            return f"spent ${_usd(sum((a.settled() for a in self.accounts.values()), Fraction(0))):.2f}" \
                   f"/${_usd(self.run_cap):.2f}"
        caps = [f"{label} ${_usd(a.settled()):.2f}/${_usd(a.cap):.2f}" for label, a in self.accounts.items()
                if a.cap is not None]
        if caps:
            return "spent " + " ".join(caps)
        unpriced = any(a.price is None or a.price.missing() for a in self.accounts.values())
        return "" if total is None or unpriced else f"spent ${total:.2f}"


def may_be_billed(status: int | None) -> bool:
    """Whether an attempt sent that brought no usage may still have been billed: a connection cut or timed out
    after the request went out, a 2xx that holds no answer, a 5xx (the work may have run); a 3xx or a 4xx
    (refused before any work) is not billed."""
    return status is None or 200 <= status < 300 or status >= 500


class Journal:
    """The spend of one command on disk, shared by every run of it: ``<cache.dir>/spend/<command>.jsonl``.

    Append-only JSON lines, one per reservation (``reserve``: an attempt's worst case, written and
    fsynced before the attempt is sent) and one per settlement (``paid``: what it cost, its worst case
    when its bill is unknown). What a command has committed is, per endpoint, every entry's settled
    amount, or its reservation when it was never settled (its process died): counted at the worst
    case. Lines are appended under an ``flock`` of the file (two processes of one command may share
    it); a torn last line (a kill mid-append) is ended by the next writer and skipped by readers.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"  # this process's entries: counted in memory
        self.pending: list[str] = []
        self._count = 0
        self._offset = 0
        self._entries: dict[str, tuple[str, Fraction, bool]] = {}  # other runs' id → (label, amount, settled)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read()

    def add(self, label: str, reserve: Fraction | None = None, paid: Fraction | None = None,
            entry: str | None = None) -> str:
        """Queue one line (written by ``flush``); returns the entry's id."""
        if entry is None:
            self._count += 1
            entry = f"{self.token}-{self._count}"
        line = {"id": entry, "label": label}
        if reserve is not None:
            line["reserve"] = str(reserve)
        if paid is not None:
            line["paid"] = str(paid)
        self.pending.append(json.dumps(line))
        return entry

    def flush(self) -> None:
        """Append the queued lines (``write``)."""
        lines, self.pending = self.pending, []
        self.write(lines)

    def write(self, lines: list[str]) -> None:
        """Append ``lines``, fsynced, under the file's lock; then read what other runs appended."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _lock(fd)
            end = os.lseek(fd, 0, os.SEEK_END)
            if end and os.pread(fd, 1, end - 1) != b"\n":
                lines.insert(0, "")  # end a line torn by a killed writer
            if lines:
                os.write(fd, ("\n".join(lines) + "\n").encode())
                os.fsync(fd)
            self._read(fd)
        finally:
            os.close(fd)  # releases the lock

    def others(self) -> dict[str, Fraction]:
        """label → what other runs of the command committed: settled amounts, unsettled reservations."""
        out: dict[str, Fraction] = {}
        for label, amount, _ in self._entries.values():
            out[label] = out.get(label, Fraction(0)) + amount
        return out

    def _read(self, fd: int | None = None) -> None:
        """Take in the whole lines appended since the last read (a torn last line waits)."""
        try:
            if fd is None:
                with open(self.path, "rb") as fh:
                    fh.seek(self._offset)
                    data = fh.read()
            else:
                data = os.pread(fd, os.fstat(fd).st_size - self._offset, self._offset)
        except FileNotFoundError:
            return
        whole = data[:data.rfind(b"\n") + 1]
        self._offset += len(whole)
        for raw in whole.splitlines():
            self._take(raw)

    def _take(self, raw: bytes) -> None:
        try:
            line = json.loads(raw)
            entry, label = str(line["id"]), str(line["label"])
            amount = Fraction(line["paid"] if "paid" in line else line["reserve"])
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            return  # torn or foreign: skipped
        if entry.startswith(self.token + "-"):
            return
        known = self._entries.get(entry)
        if known is not None and known[2]:
            return  # settled already
        self._entries[entry] = (label, amount, "paid" in line)


def _lock(fd: int) -> None:
    """Hold the journal's lock; on a filesystem that refuses locks, append unlocked (one write a flush)."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX)


def _worst_usage(body_bytes: int, max_tokens: int) -> Billable:
    return Billable(max(body_bytes, 0) + TEMPLATE_TOKENS, 0, max(max_tokens, 0))
