"""The spend cap in batch mode: every item's worst case is reserved before it goes into a batch.

An item's ticket is the one a synchronous call of the same request takes (runtime/spend/cap.py:
one token per byte of body in, ``max_tokens`` out, at tier prices), priced at the batch
discount (``batched=True``). It is reserved before the batch that carries it is created, so
the items of a pending batch hold their worst cases exactly as calls in flight do, and
everything else the run sends meanwhile (another endpoint's batch, synchronous answers) is
reserved against the same budget: spend plus what is in flight never passes a cap.

- An item that cannot fit even once everything in flight settles is not sent: its outcome is
  the synchronous path's refusal (``budget_exhausted``, never cached, so a rerun with a higher
  cap sends it), put in ``Endpoint.ready`` under its key for the pipeline to record.
- An item that would fit once the items in flight settle goes into a later batch, after they
  have (a synchronous call waits for the calls in flight the same way).
- An admitted item's reservation becomes its real, discounted cost when its result arrives
  (``Runner._resolve`` → ``Ledger.settle_ahead``), or is released when it failed without one.
  An item sent again after a batch that may have billed it (one the provider no longer knows)
  reserves again (``Runner._reserved``).
- The items of one open batch (a killed run's, polled rather than sent again) are admitted or
  held back together: collecting a batch closes its record, so an item of it left out would
  later be sent, and paid for, a second time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from fractions import Fraction

from wildtrace.runtime.batch.ledger import BatchRecord
from wildtrace.runtime.batch.runner import Want
from wildtrace.runtime.spend.cap import Ledger as Budget
from wildtrace.runtime.spend.cap import Ticket
from wildtrace.runtime.net.endpoint import Endpoint

log = logging.getLogger(__name__)

#: Sends admitted items through the batch API (rounds of batches) until each has an outcome.
Send = Callable[[dict[str, Want]], Awaitable[None]]


async def send_capped(endpoint: Endpoint, wants: dict[str, Want], budget: Budget, open_batches: list[BatchRecord],
                      send: Send, stop: asyncio.Event) -> None:
    """Send ``wants`` (each with its ticket) in passes: what fits now, then what fits once that settled."""
    pending = dict(wants)
    while pending and not stop.is_set():
        admitted, later = _admit(endpoint, pending, _units(pending, open_batches), budget)
        refused = len(pending) - len(admitted) - len(later)
        if refused or later:
            log.info("%s: the spend cap lets %d items into a batch now; %d wait for those in flight to settle, "
                     "%d are not sent", endpoint.label, len(admitted), len(later), refused)
        if admitted:
            await budget.written()  # the items' reservations are on disk before their batch exists
            try:
                await send(admitted)
            finally:  # stopped or failed before an outcome: it may have been billed, so it stays spent
                for key, want in admitted.items():
                    if key not in endpoint.ready and want.ticket is not None:
                        budget.abandon(endpoint.label, want.ticket)
        elif later:  # held by another endpoint's items in flight: wait for one of them to settle
            await _changed_or(budget, stop)
        pending = later


def _units(pending: dict[str, Want], open_batches: list[BatchRecord]) -> list[list[str]]:
    """The keys in admission order: an open batch's pending items as one unit, then each other key alone."""
    units: list[list[str]] = []
    placed: set[str] = set()
    for record in open_batches:
        unit = [key for key in record.custom_ids if key in pending and key not in placed]
        if unit:
            units.append(unit)
            placed.update(unit)
    units.extend([key] for key in pending if key not in placed)
    return units


def _admit(endpoint: Endpoint, pending: dict[str, Want], units: Iterable[list[str]],
           budget: Budget) -> tuple[dict[str, Want], dict[str, Want]]:
    """Reserve what fits now; a refused item's outcome goes to ``endpoint.ready``. → (admitted, later)."""
    admitted: dict[str, Want] = {}
    later: dict[str, Want] = {}
    for unit in units:
        tickets = [pending[key].ticket for key in unit]
        verdict = _reserve(budget, endpoint.label, [t for t in tickets if t is not None])
        for key in unit:
            want, ticket = pending[key], pending[key].ticket
            if verdict is None:
                later[key] = want
            elif verdict:
                admitted[key] = want
            elif ticket is not None:
                # the outcome a synchronous call refused by the cap returns (Endpoint.call), as it is
                endpoint.ready[key] = budget.settle_ahead(endpoint.label, ticket.refusal(), ticket)
                want.path.unlink(missing_ok=True)
    return admitted, later


def _reserve(budget: Budget, label: str, tickets: list[Ticket]) -> bool | None:
    """Reserve every ticket of a unit, or none: True (all held), False (all refused), None (fits later)."""
    total = sum((t.worst for t in tickets if t.worst is not None and not t.reserved), Fraction(0))
    if not budget.fits(label, total):
        if budget.fits(label, total, settled=True):
            return None
        for ticket in tickets:
            ticket.refuse()
        return False
    for ticket in tickets:  # each fits: together they do
        ticket.reserve_now()
    return True


async def _changed_or(budget: Budget, stop: asyncio.Event) -> None:
    changed = asyncio.ensure_future(budget.changed())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        changed.cancel()
        stopped.cancel()
