"""Rounds of batches for one endpoint, until every item has an outcome (or the run stops).

A round sends every unresolved item that no open batch covers (open batches found in the
ledger are polled first: a resumed run never creates a second batch for the same
requests), waits for all of its batches, and collects them:

- a 2xx body goes through the provider's parser (``interpret``): answers, refusals and
  empty outputs are outcomes as in a synchronous call, stored in the same cache;
- an item error is judged by the synchronous retry rule (``classify``): transient ones are
  sent again in the next round's batch, final ones are recorded failures, a quota refusal
  fails the endpoint's remaining items at once;
- an item the batch never ran (expired, cancelled, absent from the results) is sent again.

Each round is one attempt of its items, so an item is sent at most ``max_retries + 1``
times in all, as the spec's retry rule allows; after that it fails ``retries_exhausted``
with the last error. A batch still unfinished after ``batch.max_wait_h`` (counted from its
creation) leaves its items failed ``batch_timeout`` in this run and stays open in the
ledger, so the next run polls it again rather than paying for it twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wildtrace.core.records import CallResult, FailReason, Usage
from wildtrace.providers.batch import BatchAPI, BatchError, Item, Line, Status
from wildtrace.runtime.batch.base import LINE_OVERHEAD
from wildtrace.runtime.batch.ledger import BatchRecord, BatchState, Ledger
from wildtrace.runtime.spend.cap import Ledger as Budget
from wildtrace.runtime.spend.cap import Ticket
from wildtrace.runtime.net.attempt import Attempt
from wildtrace.runtime.net.call import interpret
from wildtrace.runtime.net.endpoint import Endpoint, is_storable
from wildtrace.core.records import Verdict
from wildtrace.runtime.net.retry import classify
from wildtrace.runtime.net.secrets import redact

log = logging.getLogger(__name__)

#: A batch is taken as gone (its items sent again) only after this many 404s in a row, a poll apart.
MISSING_READS = 2


@dataclass
class Want:
    """An item to resolve: its key material, its spooled bytes, what the record says of temperature,
    and its claim on the spend cap (reserved before it goes into a batch: batch/spend.py)."""

    material: dict
    path: Path
    size: int
    temperature_sent: bool | str
    ticket: Ticket | None = None


class Runner:
    """Batches for one endpoint; outcomes go to ``endpoint.ready`` (by cache key) and the cache."""

    def __init__(self, endpoint: Endpoint, api: BatchAPI, ledger: Ledger, poll_s: float, max_wait_h: float,
                 stop: asyncio.Event, show: Callable[[str, str], None]) -> None:
        self.endpoint, self.api, self.ledger = endpoint, api, ledger
        self.poll_s, self.max_wait_s = poll_s, max_wait_h * 3600.0
        self.stop, self.show = stop, show
        self.wants: dict[str, Want] = {}
        self.attempts: dict[str, int] = {}
        self.last_error: dict[str, tuple[int | None, Any, str]] = {}
        self.max_line = endpoint.max_response_bytes + LINE_OVERHEAD

    @property
    def label(self) -> str:
        return self.endpoint.label

    async def run(self, wants: dict[str, Want]) -> None:
        """Resolve every wanted key (unless the run stops): resume, then rounds of batches."""
        self.wants = dict(wants)
        self.attempts = {key: 0 for key in wants}
        waits = self._resumable()
        while self.wants and not self.stop.is_set():
            covered = {key for record in waits for key in record.custom_ids}
            fresh = [key for key in self.wants if key not in covered]
            self._exhaust(fresh)
            fresh = [key for key in fresh if key in self.wants]
            fresh = await self._reserved(fresh)
            if self.endpoint.quota_error is not None:
                self._fail_all(fresh, FailReason.QUOTA_EXHAUSTED, f"not sent: an earlier call was refused for quota "
                               f"({self.endpoint.quota_error})")
                fresh = []
            for chunk in self._chunks(fresh):
                if self.stop.is_set():  # no new batch once a stop is asked for
                    break
                record = await self._create(chunk)
                if record is not None:
                    waits.append(record)
            if not waits:
                break
            await asyncio.gather(*(self._wait_and_collect(record) for record in waits))
            waits = []

    # ------------------------------------------------------------------ sending

    def _resumable(self) -> list[BatchRecord]:
        """Open batches (from an earlier, killed run) that hold some of our items: polled, not re-sent."""
        found = []
        for record in self.ledger.open_records(self.api.provider, self.label):
            mine = [key for key in record.custom_ids if key in self.wants]
            if not mine:
                continue
            for key in mine:
                self.attempts[key] = max(self.attempts[key], record.round)
            log.info("%s: resuming %s batch %s (%d of its items are needed)", self.label, self.api.provider,
                     record.batch_id, len(mine))
            self.ledger.save(record)  # this run's batches.json lists it too
            found.append(record)
        return found

    async def _reserved(self, keys: list[str]) -> list[str]:
        """The keys whose reservation holds: an item sent again after a batch that may have billed it reserves
        its worst case once more (on disk before the batch is created), and one the cap cannot hold now is
        not sent (``budget_exhausted``)."""
        kept: list[str] = []
        ledgers: dict[int, Budget] = {}  # by identity: one flush each
        for key in keys:
            ticket = self.wants[key].ticket
            verdict = True if ticket is None else ticket.reserve_now()
            if verdict:
                kept.append(key)
                if ticket is not None and ticket.entry is not None:
                    ledgers[id(ticket.ledger)] = ticket.ledger
                continue
            assert ticket is not None
            if verdict is None:  # would fit only once the items in flight settle: this round does not wait
                ticket.refuse()
            self._resolve(key, ticket.refusal(self.attempts[key]))
        for ledger in ledgers.values():
            await ledger.written()
        return kept

    def _exhaust(self, keys: list[str]) -> None:
        """Items already sent max_retries + 1 times fail with their last error."""
        limit = self.endpoint.retry.max_retries + 1
        for key in keys:
            if self.attempts[key] >= limit:
                status, payload, error = self.last_error.get(key, (None, None, "no result"))
                self._resolve(key, self._failure(key, FailReason.RETRIES_EXHAUSTED, error, status, payload))

    def _chunks(self, keys: list[str]) -> list[list[str]]:
        """Keys split so no batch exceeds the provider's request or byte limit."""
        chunks: list[list[str]] = []
        size = 0
        for key in keys:
            want = self.wants[key]
            grow = self.api.item_bytes(Item(key, want.path, want.size))
            if not chunks or len(chunks[-1]) >= self.api.max_items or size + grow > self.api.max_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(key)
            size += grow
        return chunks

    async def _create(self, keys: list[str]) -> BatchRecord | None:
        """Create one batch and write it down at once; a refusal fails its items as the sync rule would."""
        items = [Item(key, self.wants[key].path, self.wants[key].size) for key in keys]
        for key in keys:
            self.attempts[key] += 1
            if self.attempts[key] > 1:  # a re-send is a retry of that call
                self.endpoint.loop.retries += 1
                self.endpoint.loop.on_retry(self.label)
        created_at = time.time()
        try:
            batch_id, file_id = await self.api.create(items)
        except BatchError as exc:
            log.warning("%s: creating a %s batch of %d requests failed: %s", self.label, self.api.provider,
                        len(keys), _said(exc))
            reason = FailReason.QUOTA_EXHAUSTED if exc.verdict == Verdict.QUOTA else FailReason.HTTP_ERROR
            if exc.verdict == Verdict.QUOTA:
                self.endpoint.quota_error = _said(exc)
            for key in keys:
                self._resolve(key, self._failure(key, reason, _said(exc), exc.status, None))
            return None
        self.endpoint.sender.requests_sent += len(keys)
        record = BatchRecord(self.api.provider, self.label, batch_id, list(keys), max(self.attempts[k] for k in keys),
                             created_at, BatchState.CREATED, {}, file_id)
        self.ledger.save(record)
        log.info("%s: created %s batch %s with %d requests", self.label, self.api.provider, batch_id, len(keys))
        self.show(batch_id, f"{self.label} {batch_id}: created, {len(keys)} requests")
        return record

    # ------------------------------------------------------------------ waiting and collecting

    async def _wait_and_collect(self, record: BatchRecord) -> None:
        status = await self._wait(record)
        if status is None:
            return
        if status.state == BatchState.MISSING:  # nothing to read: its items are sent again
            for key in record.custom_ids:
                if key in self.wants:
                    self.last_error[key] = (404, None, status.problem or "batch not found")
                    ticket = self.wants[key].ticket
                    if ticket is not None:  # the batch may have run and billed: its reservation stays spent
                        ticket.attempted()
            return
        wanted = {key for key in record.custom_ids if key in self.wants}
        seen: set[str] = set()
        errors: dict[str, Line] = {}  # an item's first line that is not a reply: taken only if no reply follows
        try:
            async for line in self.api.results(record.batch_id, status, wanted, self.max_line):
                key = line.custom_id
                if key not in self.wants or key not in wanted:
                    continue
                seen.add(key)
                if self._replied(line):
                    errors.pop(key, None)
                    await self._take(record, line)
                else:
                    errors.setdefault(key, line)
            for line in errors.values():
                await self._take(record, line)
        except BatchError as exc:
            log.warning("%s: reading the results of batch %s failed: %s", self.label, record.batch_id, _said(exc))
            for key in wanted - seen:
                self.last_error[key] = (exc.status, None, _said(exc))
            return  # not collected: its unread items are sent again, and the record stays open
        for key in wanted - seen:  # never ran: expired, cancelled, or the batch failed as a whole
            self.last_error[key] = (None, None, status.problem or f"batch {record.batch_id} ended "
                                    f"{status.state} without a result for it")
        record.state = BatchState.COLLECTED
        self.ledger.save(record)

    async def _wait(self, record: BatchRecord) -> Status | None:
        """Poll until the batch is terminal; None when the run stops or the longest wait passes."""
        missing = 0  # 404s in a row: one alone may be a proxy's or a replica's, and the batch may still bill
        while True:
            try:
                status = await self.api.status(record.batch_id)
                missing = 0
            except BatchError as exc:
                missing = missing + 1 if exc.status == 404 else 0
                if missing >= MISSING_READS:  # gone (deleted, another key): its items are sent again
                    log.warning("%s: batch %s is not known to the provider: %s", self.label, record.batch_id,
                                _said(exc))
                    record.state = BatchState.COLLECTED
                    self.ledger.save(record)
                    return Status(BatchState.MISSING, True, problem=_said(exc))
                log.warning("%s: polling batch %s failed (%s); %s", self.label, record.batch_id, _said(exc),
                            "reading it again before anything is sent again" if missing else "polling again")
                status = None
            if status is not None:
                counts = ", ".join(f"{k} {v}" for k, v in status.counts.items())
                line = f"{self.label} {record.batch_id}: {status.state}" + (f" ({counts})" if counts else "")
                if status.state != record.state or status.counts != record.counts:
                    record.state, record.counts = status.state, status.counts
                    self.ledger.save(record)
                    log.info("batch %s", line)
                self.show(record.batch_id, line)
                if status.terminal:
                    return status
            if time.time() - record.created_at > self.max_wait_s:
                for key in record.custom_ids:
                    if key in self.wants:
                        why = (f"batch {record.batch_id} not finished after batch.max_wait_h="
                               f"{self.max_wait_s / 3600:g}; it stays recorded and a rerun polls it again")
                        self._resolve(key, self._failure(key, FailReason.BATCH_TIMEOUT, why, None, None))
                return None
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=self.poll_s)
                return None  # stopped: the batch stays open in the ledger for a resumed run
            except TimeoutError:
                pass

    def _replied(self, line: Line) -> bool:
        """A result line that is the model's reply (a 2xx that is no error in disguise): with several lines
        for one custom_id it wins over any error, so an item that was answered (and paid) is never sent again."""
        return (not line.unfinished and line.status is not None and 200 <= line.status < 300
                and self.endpoint.provider.failure_status(line.payload) is None)

    async def _take(self, record: BatchRecord, line: Line) -> None:
        """One item's result line → its outcome, or a reason to send it again."""
        key = line.custom_id
        if line.unfinished:
            self.last_error[key] = (None, line.payload, line.error or "unfinished")
            return
        status = line.status
        if status is not None and 200 <= status < 300:
            disguised = self.endpoint.provider.failure_status(line.payload)
            if disguised is None:
                result = interpret(self.endpoint.provider, line.payload, status, self.attempts[key],
                                   time.time() - record.created_at)
                result = self._mark(record, replace(result, started_at=record.created_at))
                if is_storable(result) and self.endpoint.cache.enabled:
                    want = self.wants[key]
                    result = await asyncio.to_thread(self.endpoint.store_outcome, key, want.material, result)
                self._resolve(key, result)
                return
            status = disguised
        error = f"HTTP {status}: {line.error or self.endpoint.provider.error_message(line.payload)}"
        verdict = classify(status, {}, line.payload)
        if verdict == Verdict.QUOTA:
            self.endpoint.quota_error = error
            self._resolve(key, self._failure(key, FailReason.QUOTA_EXHAUSTED, error, status, line.payload, record))
        elif verdict == Verdict.FAIL:
            reason = Endpoint.failure_reason(Attempt(status=status, payload=line.payload))
            self._resolve(key, self._failure(key, reason, error, status, line.payload, record))
        else:
            self.last_error[key] = (status, line.payload, error)

    # ------------------------------------------------------------------ outcomes

    def _mark(self, record: BatchRecord | None, result: CallResult) -> CallResult:
        note = f"batched: {self.api.provider} batch {record.batch_id}" if record else "batched"
        return replace(result, batched=True, notes=(*result.notes, note))

    def _failure(self, key: str, reason: FailReason, error: str, status: int | None, payload: Any,
                 record: BatchRecord | None = None) -> CallResult:
        started = record.created_at if record else None
        return self._mark(record, CallResult(False, None, reason, redact(error), None, Usage(), self.attempts[key],
                                             time.time() - started if started else 0.0, status, redact(payload),
                                             started_at=started))

    def _fail_all(self, keys: list[str], reason: FailReason, error: str) -> None:
        for key in keys:
            self._resolve(key, self._failure(key, reason, error, None, None))

    def _resolve(self, key: str, result: CallResult) -> None:
        want = self.wants.pop(key, None)
        if want is None:
            return
        result = self.endpoint.settle(result, want.temperature_sent)
        if want.ticket is not None:  # its reservation becomes its real cost now, not when the pipeline asks
            result = want.ticket.ledger.settle_ahead(self.label, result, want.ticket)
        self.endpoint.ready[key] = result
        want.path.unlink(missing_ok=True)


def _said(exc: BatchError) -> str:
    """A batch error's words with any key in them redacted (a format's error may quote a body)."""
    return str(redact(str(exc)))
