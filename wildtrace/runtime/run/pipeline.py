"""The run: caps → answer → judges, pipelined, every outcome cached as it arrives.

Answers are produced by a pool of ``model.max_concurrency`` workers, fed requests prepared
ahead (a quarter of a wave: at most 1.25 × max_concurrency documents' requests are in
memory, and a worker whose call ends sends the next at once; an answer the cache holds
needs no document read: the plan made its request, runtime/run/plan.py); each answer goes to
the judges the moment it arrives, and each judge endpoint has its own bound. The run reports
what happens to an observer it is handed (task started, call finished, task done) and
never knows who listens. A stop (a signal, a store that fails) ends the sending: in-flight
calls get a grace period, and the outcome holds every task that finished. Nothing here
knows a wire format or a config library.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field

from wildtrace.core.caps import CapKind, CapsDecision
from wildtrace.core.events import RunObserver, TaskDone
from wildtrace.core.judging import parse_judge_reply
from wildtrace.core.prompts import answer_prompt, document_reference, judge_prompt
from wildtrace.core.records import (AnswerRecord, AnswerStatus, CallProvenance, CallResult, FailReason, JudgmentRecord,
                                    JudgmentStatus)
from wildtrace.core.tasks import Task
from wildtrace.core.views import task_outcome
from wildtrace.providers.base import Provider
from wildtrace.runtime.batch import batch_phase
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.store.dataset import Dataset, read_document
from wildtrace.runtime.net.call import interpret
from wildtrace.runtime.net.endpoint import Endpoint, Prepared, prepare_request
from wildtrace.runtime.run.prompt_cache import PromptCacheTally, outlived
from wildtrace.runtime.run.plan import Plan, PlannedAnswer, sha256_text
from wildtrace.runtime.net.ratelimit import Cost, estimate_tokens
from wildtrace.runtime.net.served import enforce


@dataclass
class Counters:
    """Live counts for the progress line and the run's stats."""

    answered: int = 0
    failed: int = 0
    out_of_context: int = 0
    judged: int = 0
    judge_unavailable: int = 0
    retries: int = 0
    tasks_done: int = 0
    budget_exhausted: int = 0  # answers the spend cap kept from being sent
    #: (label, reason) → count of failed calls, for the headline's "failures by reason".
    failures: Counter = field(default_factory=Counter)
    #: label → count of calls made (cached or not) and their errors, for the dominant error.
    calls: Counter = field(default_factory=Counter)
    errors: dict[str, Counter] = field(default_factory=dict)
    #: batch id → its endpoint, state and counts (batch mode), for the progress line.
    batches: dict[str, str] = field(default_factory=dict)
    #: The providers' prompt caches: tokens read and written, hit rate and saving per endpoint (run_stats).
    prompt_cache: PromptCacheTally = field(default_factory=PromptCacheTally)

    def as_postfix(self) -> dict[str, int]:
        """Short names for the progress line."""
        return {"ok": self.answered, "failed": self.failed, "ooc": self.out_of_context, "judged": self.judged,
                "j_unavail": self.judge_unavailable, "retries": self.retries}

    def record_call(self, label: str, result: CallResult) -> None:
        """Count one call's outcome under its endpoint (a call the cap kept back is not a call, nor a failure)."""
        if result.reason == FailReason.BUDGET_EXHAUSTED:
            return
        self.calls[label] += 1
        self.prompt_cache.record(label, result)
        if not result.ok:
            self.failures[(label, result.reason or "unknown")] += 1
            self.errors.setdefault(label, Counter())[(result.error or result.reason or "unknown")[:160]] += 1


def call_fields(result: CallResult) -> dict:
    """What every record keeps of its call: error, usage, attempts, timing, HTTP status, and its provenance."""
    return {"error": result.error, "usage": result.usage.to_dict(), "attempts": result.attempts,
            "latency_s": result.latency_s, "started_at": result.started_at, "http_status": result.http_status,
            "provenance": CallProvenance.of(result)}


def answer_record(task: Task, caps: CapsDecision, document: dict, prompt_sha: str, prompt_ref: str,
                  result: CallResult) -> AnswerRecord:
    """Turn a call's outcome into the task's responses.json row."""
    return AnswerRecord(
        question_id=task.question_id,
        status=AnswerStatus.ANSWERED if result.ok
        else AnswerStatus.BUDGET_EXHAUSTED if result.reason == FailReason.BUDGET_EXHAUSTED else AnswerStatus.FAILED,
        caps=caps.to_dict(),
        document=document,
        reason=result.reason,
        response=result.text,
        finish_reason=result.finish_reason,
        prompt_sha256=prompt_sha,
        prompt_ref=prompt_ref,
        **call_fields(result),
    )


def judgment_record(task: Task, judge: str, prompt: str, result: CallResult) -> JudgmentRecord:
    """Turn a judge call's outcome into a judgments.json row; no usable total → unavailable."""
    verdict = parse_judge_reply(result.text) if result.ok else None
    available = verdict is not None and verdict.available
    return JudgmentRecord(
        question_id=task.question_id,
        judge=judge,
        status=JudgmentStatus.SCORED if available
        else JudgmentStatus.BUDGET_EXHAUSTED if result.reason == FailReason.BUDGET_EXHAUSTED
        else JudgmentStatus.UNAVAILABLE,
        reason=None if available else (verdict.reason if verdict else result.reason),
        total=verdict.total if verdict else None,
        score=verdict.score if verdict else None,  # None unless available (JudgeVerdict.available)
        parsed=verdict.parsed if verdict else None,
        reply=result.text,
        prompt_sha256=sha256_text(prompt),
        prompt=prompt,
        **call_fields(result),
    )


@dataclass
class Outcome:
    """Everything a run produced, in dataset order: only finished tasks when it was stopped."""

    answers: list[dict]
    judgments: list[JudgmentRecord]
    counters: Counters
    wall_s: float
    stopped: str | None = None  # why the run stopped early (a signal, a storage failure), or None
    #: Every answer and judgment received, in dataset order: after a stop, also those of tasks
    #: that did not finish (their judging was not done). Those are in no score, but they reach
    #: the run files (responses.json, judgments.json), so nothing received is lost.
    received_answers: list[dict] = field(default_factory=list)
    received_judgments: list[JudgmentRecord] = field(default_factory=list)


def document_of(dataset: Dataset, task: Task) -> dict:
    """The task's document by reference: corpus file and sha256 (chars are in the caps decision)."""
    return {"corpus_file": task.corpus_file, "sha256": dataset.document(task).sha256}


# ---------------------------------------------------------------------- the survey


@dataclass(frozen=True)
class PlannedCall:
    """One call the survey found still to send: its endpoint, prompt size and completion budget."""

    label: str
    prompt_chars: int
    cjk: bool
    max_tokens: int
    #: A judge call of an answer not known yet: its prompt will also hold the answer (unknown length).
    answer_pending: bool = False


@dataclass
class Survey:
    """What a run will have to send, found before any request from the caps and the cache."""

    answers_to_request: int = 0
    answers_cached: int = 0
    out_of_context: int = 0
    judge_calls_to_make: Counter = field(default_factory=Counter)  # per judge, for answers already known
    judge_calls_cached: int = 0
    judge_calls_pending: int = 0  # per judge: answers not known yet, each will be judged if it succeeds
    #: Every call still to send, as the estimate prices it (python -m wildtrace.estimate).
    planned: list[PlannedCall] = field(default_factory=list)

    def needs(self, label: str) -> bool:
        """Whether endpoint ``label`` has at least one call to make (so its key is needed)."""
        if label == "model":
            return self.answers_to_request > 0
        return self.judge_calls_to_make[label] > 0 or self.judge_calls_pending > 0

    def describe(self, judges: list[str]) -> str:
        """One line for the terminal before the first request."""
        parts = [f"answers: {self.answers_to_request} to request, {self.answers_cached} from the cache, "
                 f"{self.out_of_context} out of context"]
        if judges:
            to_make = sum(self.judge_calls_to_make.values())
            pending = self.judge_calls_pending * len(judges)
            parts.append(f"judge calls: {to_make} to make"
                         + (f" (+ up to {pending} for new answers)" if pending else "")
                         + f", {self.judge_calls_cached} from the cache")
        return "plan: " + "; ".join(parts)


def _cached_ok(provider: Provider, cache: Cache, key: str) -> str | None:
    """The answer text the cache holds under this request key, "" for a stored failure, None for a miss."""
    stored = cache.get(key)
    if stored is None:
        return None
    result = interpret(provider, stored["payload"], stored["http_status"], stored["attempts"], 0.0)
    return result.text if result.ok and result.text else ""


def _judge_key(judge: Provider, prompt: str, plan: Plan) -> str:
    return prepare_request(judge, judge.build_request(prompt, plan.judge_sampling), plan.judge_replicate).key


def survey(plan: Plan, cache: Cache) -> Survey:
    """Count the calls a run will make: the plan's answer requests and the judges' looked up in the cache.

    No document is read here: the plan made each answer request (and its key) when it measured the document.
    """
    out = Survey()
    model, judges, sampling = plan.model_provider, plan.judge_providers, plan.answer_sampling
    for task in plan.dataset.tasks:
        answer: str | None
        decision = plan.decisions[task.question_id]
        if plan.given_answers is not None:
            row = plan.given_answers.get(task.question_id) or {}
            answer = row.get("response") if row.get("status") == AnswerStatus.ANSWERED else ""
        elif not decision.in_scope:
            out.out_of_context += 1
            continue
        else:
            assert model is not None
            planned = plan.answers[task.question_id]
            answer = _cached_ok(model, cache, planned.key)
            if answer is None:
                out.answers_to_request += 1
                out.planned.append(PlannedCall("model", planned.prompt_chars, decision.cap_kind == CapKind.CJK,
                                               sampling.max_tokens))
            else:
                out.answers_cached += 1
        if not judges:
            continue
        if answer is None:
            out.judge_calls_pending += 1
            empty = len(judge_prompt(task.question_text, task.rubric, ""))
            out.planned.extend(PlannedCall(j.spec.label, empty, False, plan.judge_sampling.max_tokens, True)
                               for j in judges)
            continue
        if not answer:
            continue  # a failed answer is never judged
        prompt = judge_prompt(task.question_text, task.rubric, answer)
        for judge in judges:
            if _cached_ok(judge, cache, _judge_key(judge, prompt, plan)) is None:
                out.judge_calls_to_make[judge.spec.label] += 1
                out.planned.append(PlannedCall(judge.spec.label, len(prompt), False, plan.judge_sampling.max_tokens))
            else:
                out.judge_calls_cached += 1
    return out


# ---------------------------------------------------------------------- execution


class Stop:
    """A request to stop sending, with the first reason given (a signal, a storage failure)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.now = asyncio.Event()  # a second request: no grace period
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Stop sending; the first reason is the one reported."""
        if self.reason is None:
            self.reason = reason
        self.event.set()

    def hurry(self) -> None:
        """Cancel the calls in flight now, without waiting for the grace period."""
        self.request("stopped")
        self.now.set()

    def is_set(self) -> bool:
        """True once a stop was requested."""
        return self.event.is_set()


@dataclass
class _Ready:
    """A task ready for a worker: its prepared answer request (None when out of context), or why it is not."""

    task: Task
    prepared: Prepared | None = None
    cost: Cost = field(default_factory=Cost)  # what the request counts against the rate limits, for pacing
    prompt_sha256: str = ""
    error: Exception | None = None  # preparing it raised (an unreadable document): the worker raises it
    #: The cache held its answer when it was readied: its document was not read again (the plan's request).
    planned: PlannedAnswer | None = None


class _Run:
    """One execution's state: records by task, the stop flag, and the observer."""

    def __init__(self, plan: Plan, observer: RunObserver, counters: Counters,
                 progress: Callable[[Counters, bool], None], stop: Stop) -> None:
        self.plan, self.observer, self.counters, self.progress, self.stop = plan, observer, counters, progress, stop
        self.decisions = plan.decisions
        self.answers: dict[str, AnswerRecord] = {}
        #: stage=judge: each task's row as given; responses.json keeps it whole (a foreign row's own keys too).
        self.given_rows: dict[str, dict] = {}
        self.judgments: dict[tuple[str, str], JudgmentRecord] = {}
        self.done: set[str] = set()

    def show_batch(self, batch_id: str, line: str) -> None:
        """A batch's state for the progress line."""
        self.counters.batches[batch_id] = line
        self.progress(self.counters, False)

    def _check_storage(self, endpoint: Endpoint) -> None:
        if endpoint.storage_error is not None:
            self.stop.request(f"storage failure: {endpoint.storage_error}")

    def prepare(self, task: Task) -> _Ready:
        """What an in-scope answer needs before its call (any thread): document, prompt, bytes, key."""
        plan, decision = self.plan, self.decisions[task.question_id]
        assert plan.model is not None and decision.in_scope
        prompt = answer_prompt(task.question_text, read_document(plan.dataset.document(task).path))
        request = plan.model.provider.build_request(prompt, plan.answer_sampling)
        cjk = decision.cap_kind == CapKind.CJK
        cost = Cost(estimate_tokens(len(prompt), cjk), plan.answer_sampling.max_tokens)
        prepared = plan.model.prepare(request, plan.answer_replicate)
        # The bytes the plan hashed, byte for byte (the key says so): its prompt's sha256 is this one's.
        planned = plan.answers.get(task.question_id)
        sha = planned.prompt_sha256 if planned is not None and planned.key == prepared.key else sha256_text(prompt)
        return _Ready(task, prepared, cost, sha)

    def _held(self, task: Task) -> PlannedAnswer | None:
        """The plan's answer request of a task when this run or the cache already holds its outcome."""
        model, planned = self.plan.model, self.plan.answers.get(task.question_id)
        assert model is not None
        if planned is None or (planned.key not in model.ready and model.cache.get(planned.key) is None):
            return None
        return planned

    async def prepare_all(self, ready: asyncio.Queue, workers: int) -> None:
        """Prepare the tasks in order, ahead of the workers; a task that cannot be prepared carries its error."""
        for task in self.plan.dataset.tasks:
            if self.stop.is_set():
                break
            if not self.decisions[task.question_id].in_scope:
                item = _Ready(task)  # no document to read: no thread hop
            elif (planned := self._held(task)) is not None:  # its outcome is at hand: no document to read either
                item = _Ready(task, prompt_sha256=planned.prompt_sha256, planned=planned)
            else:
                try:
                    item = await asyncio.to_thread(self.prepare, task)
                except Exception as exc:  # noqa: BLE001 - the worker that takes it raises it, as if it had read it
                    item = _Ready(task, error=exc)
            await ready.put(item)
        for _ in range(workers):
            await ready.put(None)

    async def answer(self, ready: _Ready) -> AnswerRecord:
        """A task's answer record."""
        task, plan, decision = ready.task, self.plan, self.decisions[ready.task.question_id]
        document_ref = document_of(plan.dataset, task)
        if not decision.in_scope:
            return AnswerRecord(question_id=task.question_id, status=AnswerStatus.OUT_OF_CONTEXT,
                                caps=decision.to_dict(), document=document_ref,
                                reason=f"document has {decision.doc_chars} characters > {decision.cap_kind} cap "
                                       f"{decision.cap}")
        assert plan.model is not None
        result, size = None, 0
        if ready.planned is not None:
            size = ready.planned.body_bytes
            result = plan.model.cached(ready.planned.key, ready.planned.temperature_sent)
            if result is None:  # no longer servable as it is (gone, or to be asked again): read the document now
                ready = await asyncio.to_thread(self.prepare, task)
        if ready.prepared is not None:
            size = len(ready.prepared.content)
        ticket = plan.ledger.ticket("model", size, plan.answer_sampling.max_tokens)
        repeats: list[tuple[Prepared, int, Cost]] = []
        ttl, began = None, time.monotonic()
        if result is None:
            assert ready.prepared is not None
            repeats = await asyncio.to_thread(self._repeats_to_send, task)
            # One lifetime for a prompt's first call and its repeats; none when the cache holds them all.
            ttl = plan.repeats.ttl() if repeats or not plan.answer_siblings else None
            try:
                async with self._first_call(ready):
                    began = time.monotonic()
                    result = await plan.model.call(ready.prepared.request, plan.answer_replicate, ready.cost,
                                                   ready.prepared, ticket=ticket, cache_ttl=ttl)
            except BaseException:  # cancelled or raised: it may have been billed, so its reservation stays spent
                plan.ledger.abandon("model", ticket)
                raise
        result = plan.ledger.settle("model", result, ticket)
        result = enforce(plan.served.get("model"), result)
        self._check_storage(plan.model)
        self.counters.record_call("model", result)
        if repeats and not self.stop.is_set():
            await self.siblings(repeats, ttl, outlived(ttl, time.monotonic() - began))
            plan.repeats.note(time.monotonic() - began)
        reference = answer_prompt(task.question_text,
                                  document_reference(task.corpus_file, document_ref["sha256"], decision.doc_chars))
        return answer_record(task, decision, document_ref, ready.prompt_sha256, reference, result)

    def _first_call(self, ready: _Ready) -> AbstractAsyncContextManager[None]:
        """In a sweep, a prompt's first call goes alone: the sweep's other jobs (processes, machines sharing
        the cache folder) wait for it here, then send their calls of it while the provider holds it."""
        plan = self.plan
        if not plan.answer_siblings or plan.model is None:
            return nullcontext()
        spec = plan.model.provider.spec
        key = hashlib.sha256(f"prompt\0{spec.provider}\0{spec.base_url}\0{spec.route}\0{ready.prompt_sha256}"
                             .encode()).hexdigest()
        return plan.model.cache.lock(key)

    def _sibling_requests(self, task: Task) -> list[tuple[Prepared, int, Cost]]:
        """The task's answer requests at the sweep's other points: (prepared, budget, estimated tokens)."""
        plan, decision = self.plan, self.decisions[task.question_id]
        assert plan.model is not None
        prompt = answer_prompt(task.question_text, read_document(plan.dataset.document(task).path))
        cjk = decision.cap_kind == CapKind.CJK
        out = []
        for sampling, replicate in plan.answer_siblings:
            try:
                request = plan.model.provider.build_request(prompt, sampling)
            except ValueError:  # a point this model cannot take: its own job says so before any request
                continue
            out.append((plan.model.prepare(request, replicate), sampling.max_tokens,
                        Cost(estimate_tokens(len(prompt), cjk), sampling.max_tokens)))
        return out

    def _repeats_to_send(self, task: Task) -> list[tuple[Prepared, int, Cost]]:
        """The task's answer requests at the sweep's other points that the cache does not hold yet: none,
        and its first call asks the provider to hold nothing (a write no repeat would read)."""
        if not self.plan.answer_siblings or self.plan.model is None:
            return []
        cache = self.plan.model.cache
        return [item for item in self._sibling_requests(task) if cache.get(item[0].key) is None]

    async def siblings(self, repeats: list[tuple[Prepared, int, Cost]], ttl: str | None, expired: bool) -> None:
        """Send the task's answers at the sweep's other points now, while the provider holds the prompt: they
        are stored in the cache, where the other jobs find them (paid here, under this run's caps); they
        ask for the lifetime the task's first call asked for (``ttl``). When the first call outlived it
        (``expired``), one repeat goes first to write the prompt again and the others then read it,
        rather than all writing at once."""
        plan = self.plan
        assert plan.model is not None
        model = plan.model

        async def one(prepared: Prepared, max_tokens: int, cost: Cost) -> None:
            ticket = plan.ledger.ticket("model", len(prepared.content), max_tokens)
            try:
                result = await model.call(prepared.request, prepared.replicate, cost, prepared, ticket=ticket,
                                          cache_ttl=ttl)
            except BaseException:
                plan.ledger.abandon("model", ticket)
                raise
            self.counters.prompt_cache.record("model", plan.ledger.settle("model", result, ticket))

        if expired and len(repeats) > 1:
            await one(*repeats[0])
            repeats = repeats[1:]
        await asyncio.gather(*(one(*item) for item in repeats))

    async def judge(self, judge: Endpoint, task: Task, response: str) -> JudgmentRecord:
        prompt = judge_prompt(task.question_text, task.rubric, response)
        request = judge.provider.build_request(prompt, self.plan.judge_sampling)
        cost = Cost(estimate_tokens(len(prompt), False), self.plan.judge_sampling.max_tokens)
        ticket = self.plan.ledger.ticket(judge.label, len(prompt.encode("utf-8")),
                                         self.plan.judge_sampling.max_tokens)
        try:
            result = await judge.call(request, self.plan.judge_replicate, cost, ticket=ticket)
        except BaseException:  # as for answers: the reservation stays spent
            self.plan.ledger.abandon(judge.label, ticket)
            raise
        result = self.plan.ledger.settle(judge.label, result, ticket)
        result = enforce(self.plan.served.get(judge.label), result)
        self._check_storage(judge)
        self.counters.record_call(judge.label, result)
        return judgment_record(task, judge.label, prompt, result)

    def finish_task(self, task: Task) -> None:
        """A task has its answer and every judgment: tell the observer and the progress line."""
        qid = task.question_id
        answer = self.answers[qid]
        judgments = [self.judgments[(qid, j.label)] for j in self.plan.judges if (qid, j.label) in self.judgments]
        status, score = task_outcome(answer.status, judgments)
        self.done.add(qid)
        self.counters.tasks_done += 1
        meta = {k: task.meta[k] for k in ("paradigm", "context_tier") if k in task.meta}
        self.observer.task_done(TaskDone(question_id=qid, answer=answer, judgments=judgments, status=status,
                                         score=score, meta=meta))
        self.progress(self.counters, True)

    async def judge_all(self, task: Task, response: str) -> None:
        async def one(judge: Endpoint) -> None:
            record = await self.judge(judge, task, response)
            self.judgments[(task.question_id, judge.label)] = record
            self.observer.call_finished(task.question_id, judge.label, record)
            if record.status == JudgmentStatus.SCORED:
                self.counters.judged += 1
            else:
                self.counters.judge_unavailable += 1
            self.progress(self.counters, False)

        if self.stop.is_set():
            return  # the answer is in the run files and the cache (or the journal); a resumed run judges it
        async with asyncio.TaskGroup() as panel:
            for judge in self.plan.judges:
                panel.create_task(one(judge))
        self.finish_task(task)

    def answer_row(self, question_id: str) -> dict:
        """The task's responses.json row: as given (stage=judge), else its record's."""
        given = self.given_rows.get(question_id)
        return given if given is not None else self.answers[question_id].to_dict()

    def settle(self, group: asyncio.TaskGroup, task: Task, record: AnswerRecord) -> None:
        self.answers[task.question_id] = record
        status = record.status
        if status == AnswerStatus.ANSWERED:
            self.counters.answered += 1
            if self.plan.judges:
                group.create_task(self.judge_all(task, record.response or ""))  # answered: it has text
                self.progress(self.counters, False)
                return
        elif status == AnswerStatus.OUT_OF_CONTEXT:
            self.counters.out_of_context += 1
        elif status == AnswerStatus.BUDGET_EXHAUSTED:
            self.counters.budget_exhausted += 1
        else:
            self.counters.failed += 1
        self.finish_task(task)

    async def all_tasks(self) -> None:
        plan, tasks = self.plan, self.plan.dataset.tasks
        if plan.batch is not None:  # batched endpoints' outcomes first; the calls below then find them
            try:
                await batch_phase(plan, self.prepare, self.stop.event, plan.batch, self.show_batch)
            except OSError as exc:  # the spool or a batch record cannot be written: stop as a failed store does
                self.stop.request(f"storage failure: {exc}")
            if self.stop.is_set():
                return
        async with asyncio.TaskGroup() as group:
            if plan.given_answers is not None:
                for task in tasks:
                    self.observer.task_started(task.question_id)
                    row = plan.given_answers.get(task.question_id)
                    if row is None:
                        row = {"question_id": task.question_id, "status": AnswerStatus.MISSING,
                               "caps": self.decisions[task.question_id].to_dict(),
                               "document": document_of(plan.dataset, task), "reason": "no row in the responses file"}
                        self.given_rows[task.question_id] = row
                        self.answers[task.question_id] = AnswerRecord.from_row(row)
                        self.counters.failed += 1
                        self.finish_task(task)
                        continue
                    row.setdefault("caps", self.decisions[task.question_id].to_dict())
                    row.setdefault("document", document_of(plan.dataset, task))
                    self.given_rows[task.question_id] = row
                    self.settle(group, task, AnswerRecord.from_row(row))
                return
            assert plan.model is not None
            workers = min(plan.model.provider.spec.max_concurrency, len(tasks))
            # Requests are prepared ahead (a quarter of a wave: a whole wave measured no faster on
            # the full-size benchmark), so a worker whose call ends sends the next at once:
            # reading, encoding and hashing a document happen while the calls are in flight.
            ready: asyncio.Queue[_Ready | None] = asyncio.Queue(maxsize=max(1, workers // 4))

            async def one(item: _Ready) -> None:
                task = item.task
                self.observer.task_started(task.question_id)
                record = await self.answer(item)
                del item
                if record.status != AnswerStatus.OUT_OF_CONTEXT:
                    self.observer.call_finished(task.question_id, "model", record)
                self.settle(group, task, record)

            async def worker() -> None:
                while (item := await ready.get()) is not None:  # each task is taken by exactly one worker
                    if self.stop.is_set():
                        return
                    if item.error is not None:
                        raise item.error
                    await one(item)
                    del item

            preparer = asyncio.create_task(self.prepare_all(ready, workers))
            try:
                async with asyncio.TaskGroup() as pool:
                    for _ in range(workers):
                        pool.create_task(worker())
            finally:
                preparer.cancel()  # stopped (or failed) workers leave it waiting for room in the queue


async def execute(plan: Plan, counters: Counters | None = None,
                  progress: Callable[[Counters, bool], None] = lambda c, done: None,
                  observer: RunObserver | None = None, stop: Stop | None = None) -> Outcome:
    """Run the plan; rows in dataset order. ``progress(counters, task_done)`` is live.

    Setting ``stop`` ends the sending; calls in flight get ``plan.grace_s`` to finish, then
    are cancelled (their outcomes, when they arrived, are in the cache or its journal). The
    outcome then scores the finished tasks only, keeps what the others received, and says why
    it stopped.
    """
    started = time.perf_counter()
    counters = counters or Counters()
    stop = stop or Stop()
    state = _Run(plan, observer or RunObserver(), counters, progress, stop)
    main = asyncio.create_task(state.all_tasks())
    stopper = asyncio.create_task(stop.event.wait())
    await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not main.done():
        hurry = asyncio.create_task(stop.now.wait())
        await asyncio.wait({main, hurry}, timeout=plan.grace_s, return_when=asyncio.FIRST_COMPLETED)
        hurry.cancel()
        if not main.done():
            main.cancel()
    stopper.cancel()
    try:
        await main
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
    tasks = plan.dataset.tasks
    order = {t.question_id: i for i, t in enumerate(tasks)}
    judge_order = {j.label: i for i, j in enumerate(plan.judges)}
    by_order = sorted(state.judgments.values(), key=lambda j: (order[j.question_id], judge_order[j.judge]))
    rows = {t.question_id: state.answer_row(t.question_id) for t in tasks if t.question_id in state.answers}
    return Outcome(
        answers=[rows[t.question_id] for t in tasks if t.question_id in state.done],
        judgments=[j for j in by_order if j.question_id in state.done],
        counters=counters,
        wall_s=time.perf_counter() - started,
        stopped=stop.reason,
        received_answers=list(rows.values()),
        received_judgments=by_order,
    )


