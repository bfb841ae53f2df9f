"""The run: caps → answer → judges, pipelined, every outcome cached as it arrives.

Answers are produced by a pool of ``model.max_concurrency`` workers (so at most that many
documents are in memory); each answer goes to the judges the moment it arrives, and each
judge endpoint has its own bound. Nothing here knows a wire format or a config library.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from wildtrace.core import records as R
from wildtrace.core.caps import Caps, CapsDecision, decide
from wildtrace.core.judging import parse_judge_reply
from wildtrace.core.prompts import answer_prompt, document_reference, judge_prompt
from wildtrace.core.records import AnswerRecord, CallResult, JudgmentRecord
from wildtrace.core.tasks import Task
from wildtrace.providers.base import EndpointSpec, Provider, Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.cache import Cache
from wildtrace.runtime.calls import CachedEndpoint
from wildtrace.runtime.dataset import Dataset, read_document
from wildtrace.runtime.http import Endpoint, local_transport
from wildtrace.runtime.retry import RetryPolicy


class MissingKeyError(RuntimeError):
    """An endpoint's api_key_env names a variable that is not set."""


def sha256_text(text: str) -> str:
    """sha256 of a prompt's UTF-8 bytes, recorded so a prompt can be checked without storing it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_keys(specs: list[EndpointSpec], environ: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """label → key, read once at start. A missing variable stops the run before any request."""
    keys: dict[str, str | None] = {}
    for spec in specs:
        if spec.provider == "offline" or not spec.api_key_env:
            keys[spec.label] = None
            continue
        value = environ.get(spec.api_key_env)
        if not value:
            where = "model" if spec.label == "model" else f"judge_panel.judges.{spec.label}"
            raise MissingKeyError(f"{where}.api_key_env: environment variable {spec.api_key_env} is not set "
                                  f"(it must hold the API key for {spec.name})")
        keys[spec.label] = value
    return keys


@dataclass
class Counters:
    """Live counts for the progress line and the run's stats."""

    answered: int = 0
    failed: int = 0
    out_of_context: int = 0
    judged: int = 0
    judge_unavailable: int = 0
    retries: int = 0

    def as_postfix(self) -> dict[str, int]:
        """Short names for the tqdm postfix."""
        return {"ok": self.answered, "failed": self.failed, "ooc": self.out_of_context, "judged": self.judged,
                "j_unavail": self.judge_unavailable, "retries": self.retries}


@dataclass
class Caller:
    """A provider and its cached endpoint: what the pipeline uses to make one call."""

    provider: Provider
    endpoint: CachedEndpoint

    @property
    def label(self) -> str:
        """"model" or the judge key."""
        return self.provider.spec.label


def make_caller(spec: EndpointSpec, key: str | None, retry: RetryPolicy, cache: Cache,
                on_retry: Callable[[str], None]) -> Caller:
    """Provider + HTTP endpoint + cache for one spec. Offline providers get an in-process transport."""
    provider = make_provider(spec)
    transport = local_transport(provider.answer_locally) if hasattr(provider, "answer_locally") else None
    endpoint = Endpoint(provider, key, retry, transport=transport, on_retry=on_retry)
    return Caller(provider, CachedEndpoint(endpoint, cache))


def call_fields(result: CallResult) -> dict:
    """What every record keeps of its call: error, usage, attempts, timing, status, raw JSON."""
    return {"error": result.error, "usage": result.usage.to_dict(), "attempts": result.attempts,
            "latency_s": result.latency_s, "started_at": result.started_at, "http_status": result.http_status,
            "raw": result.raw}


def answer_record(task: Task, caps: CapsDecision, document: dict, prompt_sha: str, prompt_ref: str,
                  result: CallResult) -> AnswerRecord:
    """Turn a call's outcome into the task's responses.json row."""
    return AnswerRecord(
        question_id=task.question_id,
        status=R.ANSWERED if result.ok else R.FAILED,
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
        status=R.JUDGED if available else R.UNAVAILABLE,
        reason=None if available else (verdict.reason if verdict else result.reason),
        total=verdict.total if verdict else None,
        score=verdict.score if available else None,
        parsed=verdict.parsed if verdict else None,
        reply=result.text,
        prompt_sha256=sha256_text(prompt),
        prompt=prompt,
        **call_fields(result),
    )


@dataclass
class Plan:
    """What one pipeline execution needs, already resolved from the config."""

    dataset: Dataset
    caps: Caps
    answer_sampling: Sampling
    judge_sampling: Sampling
    answer_replicate: int
    judge_replicate: int
    model: Caller | None  # None with stage=judge
    judges: list[Caller]
    given_answers: dict[str, dict] | None = None  # stage=judge: rows read from responses=PATH


@dataclass
class Outcome:
    """Everything a run produced, in dataset order."""

    answers: list[dict]
    judgments: list[JudgmentRecord]
    counters: Counters
    wall_s: float


def document_of(plan: Plan, task: Task) -> dict:
    """The task's document by reference: corpus file and sha256 (chars are in the caps decision)."""
    return {"corpus_file": task.corpus_file, "sha256": plan.dataset.document(task).sha256}


async def _answer(plan: Plan, task: Task, decision: CapsDecision) -> AnswerRecord:
    document_ref = document_of(plan, task)
    if not decision.in_scope:
        return AnswerRecord(question_id=task.question_id, status=R.OUT_OF_CONTEXT, caps=decision.to_dict(),
                            document=document_ref,
                            reason=f"document has {decision.doc_chars} characters > {decision.cap_kind} cap {decision.cap}")
    assert plan.model is not None
    document = await asyncio.to_thread(read_document, plan.dataset.document(task).path)
    prompt = answer_prompt(task.question_text, document)
    del document
    request = plan.model.provider.build_request(prompt, plan.answer_sampling)
    result = await plan.model.endpoint.call(request, plan.answer_replicate)
    reference = answer_prompt(task.question_text,
                              document_reference(task.corpus_file, document_ref["sha256"], decision.doc_chars))
    return answer_record(task, decision, document_ref, sha256_text(prompt), reference, result)


async def _judge(plan: Plan, judge: Caller, task: Task, response: str) -> JudgmentRecord:
    prompt = judge_prompt(task.question_text, task.rubric, response)
    request = judge.provider.build_request(prompt, plan.judge_sampling)
    result = await judge.endpoint.call(request, plan.judge_replicate)
    return judgment_record(task, judge.label, prompt, result)


async def execute(plan: Plan, counters: Counters | None = None,
                  progress: Callable[[Counters, bool], None] = lambda c, done: None) -> Outcome:
    """Run the plan; returns rows in dataset order. ``progress(counters, task_done)`` is live."""
    started = time.perf_counter()
    counters = counters or Counters()
    tasks = plan.dataset.tasks
    decisions = {t.question_id: decide(plan.dataset.document(t).chars, plan.dataset.document(t).ideographs, plan.caps)
                 for t in tasks}
    answers: dict[str, dict] = {}
    judgments: dict[tuple[str, str], JudgmentRecord] = {}

    async with asyncio.TaskGroup() as group:

        async def judge_all(task: Task, response: str) -> None:
            async def one(judge: Caller) -> None:
                record = await _judge(plan, judge, task, response)
                judgments[(task.question_id, judge.label)] = record
                if record.status == R.JUDGED:
                    counters.judged += 1
                else:
                    counters.judge_unavailable += 1
                progress(counters, False)

            async with asyncio.TaskGroup() as panel:
                for judge in plan.judges:
                    panel.create_task(one(judge))
            progress(counters, True)

        def settle(task: Task, row: dict) -> None:
            answers[task.question_id] = row
            status = row["status"]
            if status == R.ANSWERED:
                counters.answered += 1
                if plan.judges:
                    group.create_task(judge_all(task, row["response"]))
                    progress(counters, False)
                    return
            elif status == R.OUT_OF_CONTEXT:
                counters.out_of_context += 1
            else:
                counters.failed += 1
            progress(counters, True)

        if plan.given_answers is not None:
            for task in tasks:
                row = plan.given_answers.get(task.question_id)
                if row is None:
                    row = {"question_id": task.question_id, "status": R.MISSING, "caps": decisions[task.question_id].to_dict(),
                           "document": document_of(plan, task), "reason": "no row in the responses file"}
                    answers[task.question_id] = row
                    counters.failed += 1
                    progress(counters, True)
                    continue
                row.setdefault("caps", decisions[task.question_id].to_dict())
                row.setdefault("document", document_of(plan, task))
                settle(task, row)
        else:
            queue = iter(tasks)

            async def worker() -> None:
                for task in queue:  # one shared iterator: each task is taken by exactly one worker
                    record = await _answer(plan, task, decisions[task.question_id])
                    settle(task, record.to_dict())

            assert plan.model is not None
            for _ in range(min(plan.model.provider.spec.max_concurrency, len(tasks))):
                group.create_task(worker())

    order = {t.question_id: i for i, t in enumerate(tasks)}
    judge_order = {j.label: i for i, j in enumerate(plan.judges)}
    return Outcome(
        answers=[answers[t.question_id] for t in tasks],
        judgments=sorted(judgments.values(), key=lambda j: (order[j.question_id], judge_order[j.judge])),
        counters=counters,
        wall_s=time.perf_counter() - started,
    )
