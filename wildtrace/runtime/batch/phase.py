"""Batch mode in the pipeline: answers first, then the judges, before the workers start.

The phase only fills ``Endpoint.ready`` (and the cache); the pipeline then runs as in a
synchronous run and every call it makes for a batched endpoint finds its outcome there, so
records, judging, scoring, the observer and the run files are the synchronous path's own.
When only judges are in batch, the answers are fetched first (synchronously, at the
model's ``max_concurrency``) so the judges' batch can hold every answer's judgment.
Under a spend cap every item is reserved before its batch is created (batch/spend.py), and
every outcome put in ``Endpoint.ready`` is settled against the budget when it arrives.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wildtrace.core.prompts import judge_prompt
from wildtrace.core.records import AnswerStatus, CallResult
from wildtrace.core.tasks import Task
from wildtrace.providers.batch import BatchAPI
from wildtrace.providers.registry import batch_providers
from wildtrace.runtime.batch.base import LINE_OVERHEAD, Control
from wildtrace.runtime.batch.ledger import Ledger
from wildtrace.runtime.batch.runner import Runner, Want
from wildtrace.runtime.batch.spend import send_capped
from wildtrace.runtime.spend.cap import Ledger as Budget
from wildtrace.runtime.spend.cap import Ticket
from wildtrace.runtime.net.attempt import encode_body
from wildtrace.runtime.net.call import interpret
from wildtrace.runtime.net.endpoint import Endpoint, Prepared
from wildtrace.runtime.net.served import enforce

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class BatchSettings:
    """Which endpoints go through the batch API, how often to poll, how long to wait, where to write."""

    labels: frozenset[str]  #: "model" and/or judge keys
    poll_s: float
    max_wait_h: float
    run_dir: Path  #: batches.json goes here (and the spooled request bytes while they are needed)
    shared_dir: Path | None  #: <cache.dir>/batches: the records a resumed run finds; None without a cache


def api_for(endpoint: Endpoint, url: str, control: Control) -> BatchAPI:
    """The batch format its provider class names (validated in config: ``Provider.batch_api`` is set)."""
    make = type(endpoint.provider).batch_api
    if make is None:
        raise ValueError(f"{endpoint.label}: provider {endpoint.provider.spec.provider!r} has no batch mode here "
                         f"(choose from {', '.join(batch_providers())})")
    return make(control, url, endpoint.max_response_bytes + LINE_OVERHEAD)


def control_for(endpoint: Endpoint, spool: Path) -> Control:
    """The endpoint's batch control: its base URL, key and API headers, the run's retry rule, the spool."""
    spec = endpoint.provider.spec
    return Control(spec.base_url, endpoint.auth, dict(endpoint.provider.api_headers), endpoint.retry,
                   min(spec.timeout_s, 600.0), spool=spool)


def _known(endpoint: Endpoint, key: str) -> CallResult | None:
    """The outcome this run or the cache already holds for a key (None: it must be sent)."""
    if key in endpoint.ready:
        return endpoint.ready[key]
    stored = endpoint.cache.get(key)
    if stored is None:
        return None
    return interpret(endpoint.provider, stored["payload"], stored["http_status"], stored["attempts"], 0.0)


def _spool(spool: Path, endpoint: Endpoint, prepared: Prepared, temperature_sent: bool | str, ticket: Ticket,
           cache_ttl: str | None = None) -> Want:
    """The item's bytes as the batch sends them: the request with its prompt-cache hint, as a synchronous
    call sends it (OpenAI's Batch and Anthropic's Message Batches both cache prompts; the key stays the
    plain request's)."""
    wire = endpoint.provider.with_cache_hint(prepared.request, cache_ttl)
    content = prepared.content if wire.body is prepared.request.body else encode_body(wire.body)
    path = spool / f"{prepared.key}.json"
    path.write_bytes(content)
    return Want(prepared.material, path, len(content), temperature_sent, ticket)


async def _through_batch(endpoint: Endpoint, wants: dict[str, Want], url: str, settings: BatchSettings,
                         ledger: Ledger, budget: Budget, stop: asyncio.Event, show: Callable[[str, str], None],
                         spool: Path) -> None:
    if not wants:
        return
    control = control_for(endpoint, spool)
    try:
        api = api_for(endpoint, url, control)

        async def send(admitted: dict[str, Want]) -> None:
            await Runner(endpoint, api, ledger, settings.poll_s, settings.max_wait_h, stop, show).run(admitted)

        await send_capped(endpoint, wants, budget, ledger.open_records(api.provider, endpoint.label), send, stop)
    finally:
        await control.aclose()


async def batch_phase(plan: Any, prepare: Callable[[Task], Any], stop: asyncio.Event, settings: BatchSettings,
                      show: Callable[[str, str], None]) -> None:
    """Fetch the batched endpoints' outcomes into ``Endpoint.ready``: answers, then judgments."""
    batched_judges = [j for j in plan.judges if j.label in settings.labels]
    model = plan.model
    model_batched = model is not None and model.label in settings.labels and plan.given_answers is None
    if not model_batched and not batched_judges:
        return
    spool = settings.run_dir / "batch-spool"
    spool.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.shared_dir, settings.run_dir)
    try:
        answers = await _answers(plan, prepare, stop, settings, ledger, spool, show, model_batched)
        if stop.is_set() or not batched_judges:
            return
        await asyncio.gather(*(_judges(plan, judge, answers, stop, settings, ledger, spool, show)
                               for judge in batched_judges))
    finally:
        shutil.rmtree(spool, ignore_errors=True)


async def _answers(plan: Any, prepare: Callable[[Task], Any], stop: asyncio.Event, settings: BatchSettings,
                   ledger: Ledger, spool: Path, show: Callable[[str, str], None], batched: bool) -> dict[str, str]:
    """Every task's answer text (answered tasks only), sent in batch when the model is batched."""
    if plan.given_answers is not None:
        return {qid: row["response"] for qid, row in plan.given_answers.items()
                if row.get("status") == AnswerStatus.ANSWERED and isinstance(row.get("response"), str)}
    model: Endpoint = plan.model
    keys: dict[str, str] = {}
    wants: dict[str, Want] = {}
    in_scope = [t for t in plan.dataset.tasks if _in_scope(plan, t)]

    async def one(task: Task) -> None:
        try:
            ready = await asyncio.to_thread(prepare, task)
        except Exception:  # noqa: BLE001 - an unreadable document: the pipeline's worker reports it as it would
            return
        prepared = ready.prepared
        keys[task.question_id] = prepared.key
        if _known(model, prepared.key) is not None:
            return
        # The worst case the pipeline's own call would reserve (pipeline._Run.answer), batched or not.
        ticket = plan.ledger.ticket("model", len(prepared.content), plan.answer_sampling.max_tokens, batched)
        if batched:
            if prepared.key not in wants:
                wants[prepared.key] = await asyncio.to_thread(
                    _spool, spool, model, prepared, model.provider.temperature_sent(prepared.request), ticket,
                    plan.repeats.ttl())
            return
        try:
            result = await model.call(prepared.request, plan.answer_replicate, ready.cost, prepared, ticket=ticket,
                                      cache_ttl=plan.repeats.ttl())
        except BaseException:  # as in the pipeline: it may have been billed, so its reservation stays spent
            plan.ledger.abandon("model", ticket)
            raise
        result = plan.ledger.settle_ahead("model", result, ticket)
        model.ready[prepared.key] = result
        if model.temperature_dropped:  # the pipeline will ask for the request without temperature
            plain = model.prepare(model.provider.without_temperature(prepared.request), plan.answer_replicate)
            model.ready[plain.key] = result

    limit = 1 if batched else model.provider.spec.max_concurrency
    queue = list(reversed(in_scope))

    async def worker() -> None:
        while queue and not stop.is_set():
            await one(queue.pop())

    await asyncio.gather(*(worker() for _ in range(min(limit, len(in_scope)) or 1)))
    if batched and not stop.is_set():
        await _through_batch(model, wants, _model_url(plan), settings, ledger, plan.ledger, stop, show, spool)
    texts = {}
    for qid, key in keys.items():
        result = _known(model, key)
        if result is not None:  # the served-model rule, as the pipeline applies it before judging
            result = enforce(plan.served.get("model"), result)
        if result is not None and result.ok and result.text:
            texts[qid] = result.text
    return texts


def _in_scope(plan: Any, task: Task) -> bool:
    return plan.decisions[task.question_id].in_scope  # made once, by the plan (runtime/run/plan.py)


def _model_url(plan: Any) -> str:
    """The model's synchronous URL (its path is the batch line's ``url``)."""
    return plan.model.provider.build_request("", plan.answer_sampling).url


async def _judges(plan: Any, judge: Endpoint, answers: dict[str, str], stop: asyncio.Event, settings: BatchSettings,
                  ledger: Ledger, spool: Path, show: Callable[[str, str], None]) -> None:
    """One judge's calls for every answered task, in batch (the requests the pipeline would send)."""
    wants: dict[str, Want] = {}
    url = ""
    for task in plan.dataset.tasks:
        response = answers.get(task.question_id)
        if response is None:
            continue
        prompt = judge_prompt(task.question_text, task.rubric, response)
        request = judge.provider.build_request(prompt, plan.judge_sampling)
        url = request.url
        prepared = judge.prepare(request, plan.judge_replicate)
        if _known(judge, prepared.key) is None and prepared.key not in wants:
            # the worst case the pipeline's judge call reserves (pipeline._Run.judge), at the batch price
            ticket = plan.ledger.ticket(judge.label, len(prompt.encode("utf-8")), plan.judge_sampling.max_tokens,
                                        batched=True)
            wants[prepared.key] = _spool(spool, judge, prepared, judge.provider.temperature_sent(request), ticket)
    await _through_batch(judge, wants, url, settings, ledger, plan.ledger, stop, show, spool)
