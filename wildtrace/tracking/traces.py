"""One MLflow trace per task, stored in batches off the event loop as tasks finish.

A trace is ``task <id>`` (CHAIN) → ``caps decision`` (PARSER), ``answer`` and ``judge <key>``
(CHAT_MODEL, chat-shaped so the UI shows prompt and reply as a conversation, token usage in
MLflow's own attribute so its token views count it).

What a trace says, for filtering and sorting in MLflow's Traces tab and ``mlflow.search_traces``:
tags with the run's settings (``decoding.temperature``, ``decoding.max_tokens``, both
replicates, the panel and its judges) and the task's (``paradigm``, ``context_tier``,
``language``); the rubric as an Expectation; on the root span, the panel's score and the
judges' spread (max − min) as Feedback (``panel/score``, ``panel/spread``, 0–1; the spread
also as the tag ``panel.spread``, which ``order_by`` can sort); on each judge's span, its
score as Feedback from its route and this run, or the reason it has none as the Feedback's
error.

The traces are made here as MLflow entities (the attributes and metadata MLflow's own tracer
writes; a test compares the two) and stored through MLflow's trace client: each trace's info,
then the batch's spans in one ``log_spans``. MLflow's documented tracer would write each span
in its own transaction and pick random ids (``mlflow_compat`` says why and what that costs).

Honest times: a span is timed by the row's ``started_at``/``latency_s``, which for a call
served from the cache are THIS run's lookup; such a span says ``wildtrace.cached=true`` and
keeps the paid call's latency as ``wildtrace.original_latency_s``.

A trace stored once is not stored again: a task whose every call this run made was served
from the outcome cache, and whose trace with the same content (``content_digest``: what the
trace shows, not when or by which run) is stored whole in the experiment, is linked to the
new run (MLflow's ``link_traces_to_run``) instead. The run's Traces view and
``search_traces(run_id=…)`` list it as one of the run's; it keeps the times, ``mlflow.sourceRun``
and cache flags of the run that stored it.

Numbers a person reads are rounded (``tracking.readable``: latencies to the ms, costs to
the cent and 4 significant digits, 0–1 scores to 4 decimals); span times and the run's
files keep full precision.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from wildtrace.core.events import TaskDone
from wildtrace.core.records import AnswerRecord, AnswerStatus, JudgmentRecord
from wildtrace.core.prompts import JUDGE_RESPONSE, JUDGE_RUBRIC
from wildtrace.tracking import mlflow_compat, readable
from wildtrace.tracking.rundir import LANGUAGE, RunDir, language_of, task_status_of
from wildtrace.tracking.store import client_for, open_store

log = logging.getLogger("wildtrace.tracking")

#: Span inputs/outputs are capped: documents go by reference, long texts are cut here.
SPAN_TEXT_LIMIT = 20_000
#: At most this many traces are stored together (their spans in one transaction).
BATCH = 100
CHAT_USAGE = "mlflow.chat.tokenUsage"  # SpanAttributeKey.CHAT_USAGE in mlflow 3.17
MODEL_ATTR = "mlflow.llm.model"  # SpanAttributeKey.MODEL
MESSAGE_FORMAT = "mlflow.message.format"  # SpanAttributeKey.MESSAGE_FORMAT
SPANS_LOCATION = "mlflow.trace.spansLocation"  # TraceTagKey.SPANS_LOCATION: set when the spans are stored
CONTENT = "wildtrace.content"  # tag: ``content_digest`` of the trace
SETTINGS = "wildtrace.settings"  # tag: ``settings_digest`` of its run, what a cached rerun searches by
#: At most this many traces are linked to a run in one call (MLflow's limit).
LINK_BATCH = 100
#: Span attributes that tell a paid call from the same call served from the cache: not content.
PER_RUN_ATTRIBUTES = frozenset({"latency_s", "wildtrace.cached", "wildtrace.original_latency_s", "wildtrace.cost_usd",
                                "wildtrace.original_cost_usd"})


def cap_text(text: Any) -> Any:
    """A long text cut at SPAN_TEXT_LIMIT characters, saying how much was cut."""
    if isinstance(text, str) and len(text) > SPAN_TEXT_LIMIT:
        return text[:SPAN_TEXT_LIMIT] + f"… [{len(text) - SPAN_TEXT_LIMIT} more characters]"
    return text


def task_dones_of(rd: RunDir) -> list[TaskDone]:
    """Every task of a run directory as the event the runtime emits when it finishes (its rows read back)."""
    by_task: dict[str, list[JudgmentRecord]] = {}
    for j in rd.judgments:
        by_task.setdefault(j["question_id"], []).append(JudgmentRecord.from_row(j))
    scores = {t["question_id"]: t for t in (rd.scores or {}).get("tasks", [])}
    dones = []
    for r in rd.responses:
        answer = AnswerRecord.from_row(r)
        s = scores.get(answer.question_id, {})
        meta = {k: s[k] for k in ("paradigm", "context_tier") if s.get(k) is not None}
        dones.append(TaskDone(question_id=answer.question_id, answer=answer,
                              judgments=by_task.get(answer.question_id, []), status=task_status_of(answer, s),
                              score=s.get("score"), meta=meta))
    return dones


def window(call: AnswerRecord | JudgmentRecord) -> tuple[int, int] | None:
    """(start, end) in ns of a recorded call, from its started_at and latency_s."""
    started = call.started_at
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return None
    start = int(started * 1e9)
    return start, start + int(float(call.latency_s or 0.0) * 1e9)


def token_usage(usage: Any) -> dict[str, int] | None:
    """A row's usage in MLflow's shape (input/output/total tokens), None when nothing was reported."""
    if not isinstance(usage, Mapping):
        return None
    given = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}
    if all(not isinstance(v, int) or isinstance(v, bool) for v in given.values()):
        return None
    inp, out = (int(v) if isinstance(v, int) and not isinstance(v, bool) else 0 for v in given.values())
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def finish_reason_of(call: AnswerRecord | JudgmentRecord) -> str | None:
    """The provider's stop reason: an answer keeps it, a judgment row never has (judgments.json has no such key)."""
    return call.finish_reason if isinstance(call, AnswerRecord) else None


def call_attributes(call: AnswerRecord | JudgmentRecord, model: str | None) -> dict[str, Any]:
    """What a call span says about itself: attempts, cache, served model, temperature, usage."""
    p = call.provenance
    attrs: dict[str, Any] = {"attempts": call.attempts, "latency_s": readable.seconds(call.latency_s),
                             "finish_reason": str(finish_reason_of(call)),
                             "wildtrace.cached": bool(p.cached), MESSAGE_FORMAT: "openai"}
    if p.cached:
        attrs["wildtrace.original_latency_s"] = readable.seconds(p.original_latency_s)
        attrs["wildtrace.original_cost_usd"] = readable.usd(p.original_cost_usd)
    attrs["wildtrace.cost_usd"] = readable.usd(p.cost_usd)  # None (unknown) is left off, never written as 0
    if p.batched:  # sent through the provider's batch API (runtime/batch): its discount applies
        attrs["wildtrace.batched"] = True
    if p.temperature_sent is not None:
        sent = p.temperature_sent  # True, False, or "ignored" (sent; the provider documents it ignores it)
        attrs["wildtrace.temperature_sent"] = sent if isinstance(sent, str) else bool(sent)
    if model:
        attrs[MODEL_ATTR] = str(model)
    usage = token_usage(call.usage)
    if usage:
        attrs[CHAT_USAGE] = usage
    if isinstance(call.usage, Mapping) and call.usage.get("reasoning_tokens") is not None:
        attrs["wildtrace.reasoning_tokens"] = call.usage["reasoning_tokens"]
    return {k: v for k, v in attrs.items() if v is not None}


def chat_in(prompt: Any) -> dict:
    """The prompt as the one user message it was (the spec sends no system prompt)."""
    return {"messages": [{"role": "user", "content": cap_text(prompt)}]}


def chat_out(text: Any, finish_reason: Any, **extra: Any) -> dict:
    """The reply as an assistant message (OpenAI's shape, which MLflow's UI renders as chat)."""
    choice = {"index": 0, "message": {"role": "assistant", "content": cap_text(text)}, "finish_reason": finish_reason}
    return {"choices": [choice], **{k: v for k, v in extra.items() if v is not None}}


@dataclass
class TraceTarget:
    """Where traces go and what they link to."""

    experiment_id: str
    """The run's experiment."""
    run_id: str
    """The MLflow run the traces belong to (``mlflow.sourceRun``)."""
    judge_routes: dict[str, str] = field(default_factory=dict)
    """judge key → route, the feedback's source id."""
    model: str | None = None
    """The model's route, for spans whose row names no served model."""
    tags: dict[str, str] = field(default_factory=dict)
    """The run's settings every trace is tagged with (``rundir.trace_tags``)."""


# --- building a trace (MLflow entities, made here: no OpenTelemetry provider, no global state) ---

def _ids(run_id: str, question_id: str) -> tuple[int, str]:
    """A task's trace ids, the same every time it is built for this run: (OpenTelemetry id, MLflow id).

    Stable ids let a cut-off export be completed (spans re-sent onto the trace already stored)
    instead of leaving a trace without spans beside a second copy.
    """
    digest = hashlib.sha256(f"{run_id}/{question_id}".encode()).digest()
    otel = int.from_bytes(digest[:16], "big") or 1
    return otel, f"tr-{otel:032x}"


def _span_id(otel_trace: int, index: int) -> int:
    digest = hashlib.sha256(f"{otel_trace:032x}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def span_hex(run_id: str, question_id: str, index: int) -> str:
    """A span's id as MLflow shows it (16 hex digits): index 0 is the root, then the drafts in order."""
    return f"{_span_id(_ids(run_id, question_id)[0], index):016x}"


def answer_span(answer: AnswerRecord) -> bool:
    """Whether a task's trace has an answer span: a call was made or served from the cache."""
    return answer.status != AnswerStatus.OUT_OF_CONTEXT and bool(answer.attempts or answer.provenance.cached)


def first_judge_span(answer: AnswerRecord) -> int:
    """The index of the first judge span: after the root, the caps decision and the answer span if any."""
    return 3 if answer_span(answer) else 2


@dataclass
class _Draft:
    """One span before it becomes an MLflow ``Span``."""

    name: str
    span_type: str
    start: int
    end: int
    inputs: Any
    outputs: Any
    attributes: dict[str, Any]
    parent: int | None = None  # index of the parent draft


def _spans(drafts: list[_Draft], otel_trace: int, trace_id: str, experiment_id: str) -> list:
    """The drafts as MLflow spans, with the attributes MLflow's own tracer writes (JSON-encoded)."""
    from mlflow.entities import Span

    def b64(value: int, size: int) -> str:
        return base64.b64encode(value.to_bytes(size, "big")).decode()

    ids = [_span_id(otel_trace, i) for i in range(len(drafts))]
    out = []
    for i, d in enumerate(drafts):
        attrs: dict[str, Any] = {"mlflow.spanStartTimeNs": d.start, "mlflow.traceRequestId": trace_id,
                                 "mlflow.spanType": d.span_type, "mlflow.spanInputs": d.inputs}
        if d.parent is None:
            attrs["mlflow.experimentId"] = experiment_id
        attrs.update(d.attributes)
        attrs["mlflow.spanOutputs"] = d.outputs
        attrs["mlflow.spanLogLevel"] = mlflow_compat.span_log_level(d.span_type)
        out.append(Span.from_dict({
            "trace_id": b64(otel_trace, 16), "span_id": b64(ids[i], 8),
            "parent_span_id": None if d.parent is None else b64(ids[d.parent], 8),
            "name": d.name, "start_time_unix_nano": d.start, "end_time_unix_nano": d.end,
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "attributes": {k: mlflow_compat.dump_attribute(v) for k, v in attrs.items() if v is not None}}))
    return out


def _answer_draft(done: TaskDone, target: TraceTarget, default: tuple[int, int]) -> _Draft:
    r = done.answer
    start, end = window(r) or default
    return _Draft("answer", "CHAT_MODEL", start, end, chat_in(r.prompt_ref),
                  chat_out(r.response, r.finish_reason, reasoning=cap_text(r.provenance.reasoning),
                           status=r.status, reason=r.reason, error=r.error),
                  call_attributes(r, r.provenance.served_model or target.model), parent=0)


def _judge_draft(j: JudgmentRecord, target: TraceTarget, default: tuple[int, int]) -> _Draft:
    start, end = window(j) or default
    attrs = call_attributes(j, j.provenance.served_model or target.judge_routes.get(j.judge))
    score = readable.fraction(j.score)
    attrs.update({"judge": j.judge, "total": j.total, "score": score, "status": j.status})
    return _Draft(f"judge {j.judge}", "CHAT_MODEL", start, end, chat_in(j.prompt),
                  chat_out(j.reply, finish_reason_of(j), total=j.total, score=score, status=j.status,
                           reason=j.reason),
                  {k: v for k, v in attrs.items() if v is not None}, parent=0)


def root_output(done: TaskDone) -> str:
    """What the trace list's Response column shows: the answer's text, or why there is none.

    The status is the trace's ``status`` tag and each judge's score its feedback, so the
    column a person reads first holds what the model said (a status dict told them nothing).
    """
    r = done.answer
    if isinstance(r.response, str) and r.response:
        return str(cap_text(r.response))
    return f"{done.status}: {r.reason or r.error or 'no answer'}"


def digest(value: Any) -> str:
    """A short sha256 of a JSON-able value (keys sorted)."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def settings_digest(target: TraceTarget) -> str:
    """The run's settings a trace shows: its setting tags, the judges' routes, the model's route."""
    return digest([target.tags, target.judge_routes, target.model])


def assessment_content(a: Any) -> list:
    """What an assessment says, without its trace, span, run and times."""
    error = getattr(a, "error", None)
    return [a.name, getattr(a, "value", None), error and [error.error_code, error.error_message], a.rationale,
            a.source.source_type, a.source.source_id,
            {k: v for k, v in (a.metadata or {}).items() if not k.startswith("mlflow.")}]


def content_digest(drafts: list[_Draft], tags: Mapping[str, str], feedback: list) -> str:
    """What a trace shows: its spans' names, inputs, outputs and attributes, its tags and its
    assessments; not its ids, times, run or whether its calls were paid or served from the cache."""
    return digest({"spans": [[d.name, d.span_type, d.parent, d.inputs, d.outputs,
                              {k: v for k, v in d.attributes.items() if k not in PER_RUN_ATTRIBUTES}] for d in drafts],
                   "tags": {k: v for k, v in tags.items() if k != "wildtrace.cached"},
                   "assessments": [assessment_content(a) for a in feedback]})


def served_from_cache(done: TaskDone) -> bool:
    """Whether this run sent none of the task's calls: each call made was served from the outcome cache."""
    calls: list[AnswerRecord | JudgmentRecord] = [done.answer, *done.judgments]
    return all(c.provenance.cached for c in calls if c.attempts or c.provenance.cached)


def build_trace(done: TaskDone, target: TraceTarget) -> Any:
    """One task as an MLflow ``Trace``: what MLflow's tracer would make of the same spans, feedback included."""
    from mlflow.entities import Trace, TraceData, TraceInfo, TraceLocation, TraceState

    r = done.answer
    calls: list[AnswerRecord | JudgmentRecord] = [r, *done.judgments]
    windows = [w for w in map(window, calls) if w]
    start = min((w[0] for w in windows), default=time.time_ns())
    end = max((w[1] for w in windows), default=start)
    otel, trace_id = _ids(target.run_id, done.question_id)
    inputs = {"question_id": done.question_id, "document": r.document, "prompt": cap_text(r.prompt_ref)}
    outputs = root_output(done)
    drafts = [_Draft(f"task {done.question_id}", "CHAIN", start, end, inputs, outputs,
                     {k: str(v) for k, v in done.meta.items()}),
              _Draft("caps decision", "PARSER", start, start, {"doc_chars": (r.caps or {}).get("doc_chars")},
                     r.caps, {}, parent=0)]
    if answer_span(r):
        drafts.append(_answer_draft(done, target, (start, end)))
    drafts.extend(_judge_draft(j, target, (start, end)) for j in done.judgments)
    spans = _spans(drafts, otel, trace_id, target.experiment_id)
    metadata = {**mlflow_compat.env_metadata(), "mlflow.trace_schema.version": "3", "mlflow.sourceRun": target.run_id,
                "mlflow.traceInputs": mlflow_compat.metadata_preview(inputs),
                "mlflow.traceOutputs": mlflow_compat.metadata_preview(outputs)}
    usage = [u for u in (token_usage(x.usage) for x in calls) if u]
    if usage:
        metadata["mlflow.trace.tokenUsage"] = json.dumps(
            {k: sum(u[k] for u in usage) for k in ("input_tokens", "output_tokens", "total_tokens")})
    tags = {**target.tags, **task_tags(done), "mlflow.traceName": f"task {done.question_id}",
            "question_id": done.question_id, "status": str(done.status),
            "wildtrace.cached": str(bool(r.provenance.cached)).lower(), SETTINGS: settings_digest(target)}
    feedback = assessments(trace_id, done, target)
    info = TraceInfo(
        trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(target.experiment_id),
        request_time=start // 1_000_000, execution_duration=(end - start) // 1_000_000, state=TraceState.OK,
        trace_metadata=metadata, tags={**tags, CONTENT: content_digest(drafts, tags, feedback)},
        assessments=feedback)
    trace = Trace(info=info, data=TraceData(spans=spans))
    mlflow_compat.add_size_stats(trace)
    return trace


def spread(done: TaskDone) -> float | None:
    """The judges' disagreement on a task: max − min of the scores they gave (None under two)."""
    scores = [j.score for j in done.judgments if j.score is not None]
    return max(scores) - min(scores) if len(scores) >= 2 else None


def task_tags(done: TaskDone) -> dict[str, str]:
    """The task's own tags: paradigm, context tier, language (the spec's CJK rule), the panel's spread."""
    tags = {k: str(v) for k, v in done.meta.items() if v is not None}
    language = language_of(done.answer.caps)
    if language:
        tags[LANGUAGE] = language
    gap = spread(done)
    if gap is not None:  # fixed digits: the tag sorts as the number does (``order_by=["tags.`panel.spread` DESC"]``)
        tags["panel.spread"] = f"{gap:.{readable.FRACTION_DIGITS}f}"
    return tags


def rubric_of(done: TaskDone) -> str | None:
    """The rubric as the judges saw it (their prompt's rubric lines), None when no judge was asked."""
    for j in done.judgments:
        _, sep, rest = (j.prompt or "").partition(JUDGE_RUBRIC)
        rubric, sep2, _tail = rest.partition(JUDGE_RESPONSE)
        if sep and sep2:
            return rubric.strip()
    return None


def assessments(trace_id: str, done: TaskDone, target: TraceTarget) -> list:
    """Everything a task's trace is assessed with: the rubric (Expectation), the panel's score and
    spread on the root span, each judge's Feedback on its span."""
    from mlflow.entities import AssessmentSource, Expectation, Feedback

    root = span_hex(target.run_id, done.question_id, 0)
    harness = AssessmentSource(source_type="CODE", source_id="wildtrace")
    out: list = []
    rubric = rubric_of(done)
    if rubric:
        out.append(Expectation(name="rubric", value=rubric, trace_id=trace_id, span_id=root,
                               source=AssessmentSource(source_type="HUMAN", source_id="dataset")))
    if done.score is not None:
        out.append(Feedback(name="panel/score", value=readable.fraction(done.score), trace_id=trace_id, span_id=root,
                            source=harness, rationale="the mean of the judges' scores (spec §4)"))
    gap = spread(done)
    if gap is not None:
        out.append(Feedback(name="panel/spread", value=readable.fraction(gap), trace_id=trace_id, span_id=root,
                            source=harness, rationale="max − min of the judges' scores"))
    out.extend(feedbacks(trace_id, done, target))
    for a in out:
        a.run_id = target.run_id  # the run that made it (MLflow's source run of an assessment)
    return out


def feedbacks(trace_id: str, done: TaskDone, target: TraceTarget) -> list:
    """Each judge's score as LLM-judge feedback on its span; a judge without a score gives its
    status and reason as the feedback's error."""
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback

    first = first_judge_span(done.answer)
    out = []
    for i, j in enumerate(done.judgments):
        error = None if j.score is not None else AssessmentError(
            error_code=str(j.status), error_message=str(j.reason or j.error or j.status))
        f = Feedback(
            name=f"judge/{j.judge}", value=readable.fraction(j.score), error=error, trace_id=trace_id,
            span_id=span_hex(target.run_id, done.question_id, first + i),
            source=AssessmentSource(source_type="LLM_JUDGE", source_id=target.judge_routes.get(j.judge, j.judge)),
            rationale=j.reason or cap_text(j.reply),
            metadata={"total": str(j.total), "status": str(j.status)})
        f.run_id = target.run_id
        out.append(f)
    return out


def tracing_client(tracking_uri: str) -> Any:
    """MLflow's trace client for one store (explicit: the global tracking URI is never touched)."""
    open_store(tracking_uri)  # a new local store is created under its lock, never by a racing open
    return mlflow_compat.trace_client(tracking_uri)


def start_traces(client: Any, infos: list) -> list[tuple[Any, Exception]]:
    """Store each trace info (with its feedback); (info, error) for each that could not be stored."""
    failed: list[tuple[Any, Exception]] = []
    for info in infos:
        try:
            client.start_trace(info)
        except Exception as exc:  # noqa: BLE001 - the rest of the batch still goes
            failed.append((info, exc))
    return failed


def write_traces(client: Any, experiment_id: str, traces: list,
                 spans_only: Set[str] = frozenset()) -> tuple[list[str], list[tuple[str, Exception]]]:
    """Store a batch of traces: their infos (with their feedback), then all their spans at once.

    Info first: spans arriving before their trace make MLflow's store create a bare trace and
    then merge the real one into it, about four times the work (this is what MLflow's own
    exporter does, one trace at a time). ``spans_only``: traces whose info is stored already.
    Returns the ids stored and, for each trace whose info could not be stored (left out of the
    spans too), its task and the error. A failure of the spans' transaction raises.
    """
    refused = {info.trace_id: exc for info, exc in
               start_traces(client, [t.info for t in traces if t.info.trace_id not in spans_only])}
    failed = [(str(t.info.tags.get("question_id")), refused[t.info.trace_id]) for t in traces
              if t.info.trace_id in refused]
    stored = [t for t in traces if t.info.trace_id not in refused]
    if stored:
        try:
            client.log_spans(experiment_id, [span for trace in stored for span in trace.data.spans])
        except NotImplementedError:  # the server's version unknown: MLflow would refuse every later batch
            mlflow_compat.forget_server_version()
            raise
    return [trace.info.trace_id for trace in stored], failed


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def log_feedback(client: Any, trace_id: str, done: TaskDone, target: TraceTarget) -> None:
    """A task's assessments on a trace already stored (a store round trip each)."""
    for a in assessments(trace_id, done, target):
        client.log_assessment(trace_id, a)


@dataclass(frozen=True)
class Stored:
    """What the store holds of one task's trace."""

    trace_id: str
    """The trace."""
    assessments: int
    """How many feedback entries it has."""
    has_spans: bool
    """Whether its spans were stored (MLflow tags the trace when they are)."""


def traced_tasks(client: Any, target: TraceTarget) -> dict[str, Stored]:
    """question_id → what the store holds of its trace, for the run's traces."""
    found: dict[str, Stored] = {}
    token = None
    while True:
        page = client.search_traces(locations=[target.experiment_id], run_id=target.run_id, max_results=500,
                                    include_spans=False, page_token=token)
        for t in page:
            qid = t.info.tags.get("question_id")
            if qid is not None:
                found[qid] = Stored(t.info.trace_id, len(t.info.assessments or []),
                                    t.info.tags.get(SPANS_LOCATION) == "TRACKING_STORE")
        token = getattr(page, "token", None)
        if not token:
            return found


def stored_contents(client: Any, target: TraceTarget) -> dict[str, Stored]:
    """content digest → a trace of another run of the experiment with the same settings, stored whole."""
    query = f"tags.`{SETTINGS}` = '{settings_digest(target)}' AND tags.`{SPANS_LOCATION}` = 'TRACKING_STORE'"
    found: dict[str, Stored] = {}
    token = None
    while True:
        page = client.search_traces(locations=[target.experiment_id], filter_string=query, max_results=500,
                                    include_spans=False, page_token=token)
        for t in page:
            content = t.info.tags.get(CONTENT)
            if content and t.info.trace_metadata.get("mlflow.sourceRun") != target.run_id:
                found.setdefault(content, Stored(t.info.trace_id, len(t.info.assessments or []), True))
        token = getattr(page, "token", None)
        if not token:
            return found


class TraceExporter:
    """A thread that turns finished tasks into traces and stores them in batches while the run goes.

    ``submit`` never blocks (the event loop calls it); ``close`` waits for the queue to drain
    and returns the ids of the tasks traced. Failures are counted and logged, never raised:
    the export may be completed by upload.
    """

    def __init__(self, target: TraceTarget, tracking_uri: str, skip: Iterable[str] = (),
                 also: Callable[[TaskDone], None] | None = None) -> None:
        """Export to ``target`` in the store at ``tracking_uri``; ``skip``: tasks already traced there;
        ``also`` runs on this thread for each finished task too (the run's documents go to the store
        this way)."""
        self.target = target
        self.client = tracing_client(tracking_uri)
        self.also = also
        self.traced: set[str] = set(skip)
        self.submitted: set[str] = set(skip)
        self.spans_only: set[str] = set()  # trace ids stored without their spans
        self.linked: set[str] = set()  # tasks whose trace, stored by an earlier run, was linked to this one
        self.runs = client_for(tracking_uri)  # MlflowClient: links traces to the run
        self._stored: dict[str, Stored] | None = None  # stored_contents, searched at the first cached task
        self.errors = 0
        self._queue: queue.Queue[TaskDone | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="wildtrace-traces", daemon=True)
        self._thread.start()

    def submit(self, done: TaskDone) -> None:
        """Queue one finished task (ignored when it was queued or traced before)."""
        if done.question_id in self.submitted:
            return
        self.submitted.add(done.question_id)
        self._queue.put(done)

    def skip(self, question_ids: Iterable[str]) -> None:
        """Tasks already traced in the store (by an earlier, cut-off process): never sent again."""
        ids = set(question_ids)
        self.submitted |= ids
        self.traced |= ids

    def complete_spans(self, question_ids: Iterable[str]) -> None:
        """Tasks whose trace is stored without its spans (an export cut off, a failed batch): the
        next ``submit`` of each sends its spans onto that trace, not a second trace info."""
        ids = set(question_ids)
        self.spans_only |= {_ids(self.target.run_id, q)[1] for q in ids}
        self.submitted -= ids
        self.traced -= ids

    def close(self, timeout: float | None = None) -> set[str]:
        """Drain, stop; the tasks traced (including those skipped as already there)."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("MLflow: trace export still running after %s s; the rest is left to upload", timeout)
        return set(self.traced)

    def _work(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < BATCH and not self._queue.empty():  # whatever else has finished meanwhile
                items.append(self._queue.get_nowait())
            batch = [d for d in items if d is not None]
            if batch:
                self._export(batch)
            if len(batch) < len(items):  # a None: the run has ended
                return

    def _export(self, batch: list[TaskDone]) -> None:
        built: list[tuple[TaskDone, Any]] = []
        for done in batch:
            try:
                built.append((done, build_trace(done, self.target)))
            except Exception as exc:  # noqa: BLE001 - one bad row must not stop the others
                self._failed(done.question_id, exc)
        linked = self._link(built)
        traces = [trace for done, trace in built if done.question_id not in linked]
        by_trace = {trace.info.trace_id: done.question_id for done, trace in built}
        try:
            stored, failed = write_traces(self.client, self.target.experiment_id, traces, self.spans_only)
            for trace_id in stored:
                self.traced.add(by_trace[trace_id])
            for question_id, error in failed:
                self._failed(question_id, error)
        except Exception as exc:  # noqa: BLE001 - the batch's spans: upload completes them
            self._failed(f"{batch[0].question_id} (+{len(batch) - 1} more)", exc)
        if self.also is not None:
            for done in batch:
                try:
                    self.also(done)
                except Exception as exc:  # noqa: BLE001 - the end of the run tries again
                    log.warning("MLflow: document of task %s not stored yet (%s)", done.question_id, exc)

    def _link(self, built: list[tuple[TaskDone, Any]]) -> set[str]:
        """Link each task served wholly from the cache whose content is stored whole by another run;
        the tasks linked (the rest are stored). A trace this run stored without its spans is completed."""
        wanted = {done.question_id: trace for done, trace in built
                  if served_from_cache(done) and trace.info.trace_id not in self.spans_only}
        if not wanted:
            return set()
        if self._stored is None:
            try:
                self._stored = stored_contents(self.client, self.target)
            except Exception as exc:  # noqa: BLE001 - the traces are stored instead
                log.warning("MLflow: stored traces not searched (%s); storing each again", _first_line(exc))
                self._stored = {}
        found = {q: self._stored.get(t.info.tags[CONTENT]) for q, t in wanted.items()}
        matches = [(q, s.trace_id) for q, s in found.items()
                   if s is not None and s.assessments == len(wanted[q].info.assessments)]
        linked: set[str] = set()
        for i in range(0, len(matches), LINK_BATCH):
            chunk = matches[i:i + LINK_BATCH]
            try:
                self.runs.link_traces_to_run([trace_id for _, trace_id in chunk], self.target.run_id)
            except Exception as exc:  # noqa: BLE001 - stored instead
                log.warning("MLflow: traces not linked to the run (%s); storing them", _first_line(exc))
                continue
            linked |= {q for q, _ in chunk}
        self.linked |= linked
        self.traced |= linked
        return linked

    def _failed(self, question_id: str, exc: Exception) -> None:
        self.errors += 1
        if self.errors <= 3:
            log.warning("MLflow: trace of task %s not logged (%s)", question_id, _first_line(exc))
