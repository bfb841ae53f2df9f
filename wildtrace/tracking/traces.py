"""One MLflow trace per task, exported off the event loop as tasks finish.

A trace is ``task <id>`` (CHAIN) → ``caps decision`` (PARSER), ``answer`` and ``judge <key>``
(CHAT_MODEL, chat-shaped so the UI shows prompt and reply as a conversation, token usage in
MLflow's own attribute so its token views count it); each judge's score is feedback.

Honest times: a span is timed by the row's ``started_at``/``latency_s``, which for a call
served from the cache are THIS run's lookup; such a span says ``wildtrace.cached=true`` and
keeps the paid call's latency as ``wildtrace.original_latency_s``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wildtrace.core.events import TaskDone
from wildtrace.core.records import OUT_OF_CONTEXT
from wildtrace.tracking.rundir import RunDir, task_status_of

log = logging.getLogger("wildtrace.tracking")

#: Span inputs/outputs are capped: documents go by reference, long texts are cut here.
SPAN_TEXT_LIMIT = 20_000
#: OpenTelemetry's span queue holds 2048 spans and drops the rest ("Queue full, dropping
#: Span", seen at 1100 tasks): drain MLflow's export queues every this-many traces. Not more
#: often: a flush costs about a second (MLflow's consumer polls its queue once a second),
#: and traces reach the store without it, on OpenTelemetry's own schedule.
FLUSH_EVERY = 100
CHAT_USAGE = "mlflow.chat.tokenUsage"  # SpanAttributeKey.CHAT_USAGE in mlflow 3.17
MODEL_ATTR = "mlflow.llm.model"  # SpanAttributeKey.MODEL
MESSAGE_FORMAT = "mlflow.message.format"  # SpanAttributeKey.MESSAGE_FORMAT


def cap_text(text: Any) -> Any:
    """A long text cut at SPAN_TEXT_LIMIT characters, saying how much was cut."""
    if isinstance(text, str) and len(text) > SPAN_TEXT_LIMIT:
        return text[:SPAN_TEXT_LIMIT] + f"… [{len(text) - SPAN_TEXT_LIMIT} more characters]"
    return text


def task_dones_of(rd: RunDir) -> list[TaskDone]:
    """Every task of a run directory as the event the runtime emits when it finishes."""
    by_task: dict[str, list[dict]] = {}
    for j in rd.judgments:
        by_task.setdefault(j["question_id"], []).append(j)
    scores = {t["question_id"]: t for t in (rd.scores or {}).get("tasks", [])}
    dones = []
    for r in rd.responses:
        s = scores.get(r["question_id"], {})
        meta = {k: s[k] for k in ("paradigm", "context_tier") if s.get(k) is not None}
        dones.append(TaskDone(question_id=r["question_id"], answer=r, judgments=by_task.get(r["question_id"], []),
                              status=task_status_of(r, s), score=s.get("score"), meta=meta))
    return dones


def window(row: Mapping) -> tuple[int, int] | None:
    """(start, end) in ns of a recorded call, from its started_at and latency_s."""
    started = row.get("started_at")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return None
    start = int(started * 1e9)
    return start, start + int(float(row.get("latency_s") or 0.0) * 1e9)


def token_usage(usage: Any) -> dict[str, int] | None:
    """A row's usage in MLflow's shape (input/output/total tokens), None when nothing was reported."""
    if not isinstance(usage, Mapping):
        return None
    given = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}
    if all(not isinstance(v, int) or isinstance(v, bool) for v in given.values()):
        return None
    inp, out = (int(v) if isinstance(v, int) and not isinstance(v, bool) else 0 for v in given.values())
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def call_attributes(row: Mapping, model: str | None) -> dict[str, Any]:
    """What a call span says about itself: attempts, cache, served model, temperature, usage."""
    attrs: dict[str, Any] = {"attempts": row.get("attempts"), "latency_s": row.get("latency_s"),
                             "finish_reason": str(row.get("finish_reason")), "wildtrace.cached": bool(row.get("cached")),
                             MESSAGE_FORMAT: "openai"}
    if row.get("cached"):
        attrs["wildtrace.original_latency_s"] = row.get("original_latency_s")
    if row.get("temperature_sent") is not None:
        attrs["wildtrace.temperature_sent"] = bool(row["temperature_sent"])
    if model:
        attrs[MODEL_ATTR] = str(model)
    usage = token_usage(row.get("usage"))
    if usage:
        attrs[CHAT_USAGE] = usage
    if isinstance(row.get("usage"), Mapping) and row["usage"].get("reasoning_tokens") is not None:
        attrs["wildtrace.reasoning_tokens"] = row["usage"]["reasoning_tokens"]
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


def _span(mlflow: Any, name: str, span_type: str, parent: Any, inputs: Any, start: int, attributes: dict) -> Any:
    return mlflow.start_span_no_context(name, span_type=span_type, parent_span=parent, inputs=inputs,
                                        start_time_ns=start, attributes=attributes)


def _answer_span(mlflow: Any, root: Any, done: TaskDone, target: TraceTarget, default: tuple[int, int]) -> None:
    r = done.answer
    start, end = window(r) or default
    span = _span(mlflow, "answer", "CHAT_MODEL", root, chat_in(r.get("prompt_ref")), start,
                 call_attributes(r, r.get("served_model") or target.model))
    span.end(outputs=chat_out(r.get("response"), r.get("finish_reason"), reasoning=cap_text(r.get("reasoning")),
                              status=r.get("status"), reason=r.get("reason"), error=r.get("error")), end_time_ns=end)


def _judge_span(mlflow: Any, root: Any, j: Mapping, target: TraceTarget, default: tuple[int, int]) -> None:
    start, end = window(j) or default
    attrs = call_attributes(j, j.get("served_model") or target.judge_routes.get(j["judge"]))
    attrs.update({"judge": j["judge"], "total": j.get("total"), "score": j.get("score"), "status": j["status"]})
    span = _span(mlflow, f"judge {j['judge']}", "CHAT_MODEL", root, chat_in(j.get("prompt")), start,
                 {k: v for k, v in attrs.items() if v is not None})
    span.end(outputs=chat_out(j.get("reply"), j.get("finish_reason"), total=j.get("total"), score=j.get("score"),
                              status=j["status"], reason=j.get("reason")), end_time_ns=end)


def build_trace(done: TaskDone, target: TraceTarget) -> tuple[str, bool]:
    """Start and end one task's spans (MLflow exports the trace when its root ends).

    Returns the trace id and whether the judges' feedback went with it.
    """
    import mlflow

    r = done.answer
    windows = [w for w in map(window, [r, *done.judgments]) if w]
    start = min((w[0] for w in windows), default=time.time_ns())
    end = max((w[1] for w in windows), default=start)
    attrs = {k: str(v) for k, v in done.meta.items()}
    root = mlflow.start_span_no_context(
        f"task {done.question_id}", span_type="CHAIN", experiment_id=target.experiment_id, start_time_ns=start,
        inputs={"question_id": done.question_id, "document": r.get("document"), "prompt": cap_text(r.get("prompt_ref"))},
        metadata={"mlflow.sourceRun": target.run_id},
        tags={"question_id": done.question_id, "status": done.status, "wildtrace.cached": str(bool(r.get("cached"))).lower()},
        attributes=attrs)
    caps = _span(mlflow, "caps decision", "PARSER", root, {"doc_chars": (r.get("caps") or {}).get("doc_chars")}, start, {})
    caps.end(outputs=r.get("caps"), end_time_ns=start)
    if r.get("status") != OUT_OF_CONTEXT and (r.get("attempts") or r.get("cached")):  # a call was made or served
        _answer_span(mlflow, root, done, target, (start, end))
    for j in done.judgments:
        _judge_span(mlflow, root, j, target, (start, end))
    attached = attach_feedback(root.trace_id, done, target)
    root.end(outputs={"status": done.status, "score": done.score}, end_time_ns=end)
    return root.trace_id, attached


def feedbacks(trace_id: str, done: TaskDone, target: TraceTarget) -> list:
    """Each judge's score on the trace as LLM-judge feedback."""
    from mlflow.entities import AssessmentSource, Feedback

    return [Feedback(
        name=f"judge/{j['judge']}", value=j.get("score"), trace_id=trace_id,
        source=AssessmentSource(source_type="LLM_JUDGE", source_id=target.judge_routes.get(j["judge"], j["judge"])),
        rationale=j.get("reason") or cap_text(j.get("reply")),
        metadata={"total": str(j.get("total")), "status": j["status"]}) for j in done.judgments]


def attach_feedback(trace_id: str, done: TaskDone, target: TraceTarget) -> bool:
    """Put the judges' feedback on a trace still in memory, so it is stored with the trace itself.

    One insert per trace instead of one store round trip per judge (about 70 ms each on
    SQLite, which made feedback the slowest part of logging a run). False if not in memory.
    """
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    with InMemoryTraceManager.get_instance().get_trace(trace_id) as trace:
        if trace is None:
            return False
        trace.info.assessments.extend(feedbacks(trace_id, done, target))
    return True


def log_feedback(trace_id: str, done: TaskDone, target: TraceTarget) -> None:
    """Each judge's feedback on a trace already stored (a store round trip each)."""
    import mlflow

    for f in feedbacks(trace_id, done, target):
        mlflow.log_assessment(trace_id=trace_id, assessment=f)


def traced_tasks(client: Any, target: TraceTarget) -> dict[str, tuple[str, int]]:
    """question_id → (trace id, number of assessments) of the traces a run already has in the store."""
    found: dict[str, tuple[str, int]] = {}
    token = None
    while True:
        page = client.search_traces(locations=[target.experiment_id], run_id=target.run_id, max_results=500,
                                    include_spans=False, page_token=token)
        for t in page:
            qid = t.info.tags.get("question_id")
            if qid is not None:
                found[qid] = (t.info.trace_id, len(t.info.assessments or []))
        token = getattr(page, "token", None)
        if not token:
            return found


class TraceExporter:
    """A thread that turns finished tasks into traces, in batches, while the run goes.

    ``submit`` never blocks (the event loop calls it); ``close`` waits for the queue to drain
    and MLflow's export queue to be flushed, and returns the ids of the tasks traced.
    Failures are counted and logged, never raised: the trace export may be redone by upload.
    """

    def __init__(self, target: TraceTarget, skip: Iterable[str] = (),
                 also: Callable[[TaskDone], None] | None = None) -> None:
        """Export to ``target``; ``skip`` are tasks already traced in the store; ``also`` runs on
        this thread for each finished task too (the run's documents go to the store this way)."""
        self.target = target
        self.also = also
        self.traced: set[str] = set(skip)
        self.submitted: set[str] = set(skip)
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

    def close(self, timeout: float | None = None) -> set[str]:
        """Drain, flush, stop; the tasks traced (including those skipped as already there)."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("MLflow: trace export still running after %s s; the rest is left to upload", timeout)
        return set(self.traced)

    def _work(self) -> None:
        since_flush: list[tuple[tuple[str, bool], TaskDone]] = []
        while True:
            done = self._queue.get()
            if done is not None:
                try:
                    since_flush.append((build_trace(done, self.target), done))
                except Exception as exc:  # noqa: BLE001 - one bad row must not stop the others
                    self._failed(done.question_id, exc)
                if self.also is not None:
                    try:
                        self.also(done)
                    except Exception as exc:  # noqa: BLE001 - the end of the run tries again
                        log.warning("MLflow: document of task %s not stored yet (%s)", done.question_id, exc)
            if since_flush and (done is None or len(since_flush) >= FLUSH_EVERY):
                self._flush(since_flush)
                since_flush = []
            if done is None:
                return

    def _flush(self, built: list[tuple[tuple[str, bool], TaskDone]]) -> None:
        """Wait until MLflow has stored the traces built since the last flush; note them traced."""
        import mlflow

        try:
            mlflow.flush_trace_async_logging()
        except Exception as exc:  # noqa: BLE001
            self._failed("(flush)", exc)
        for (trace_id, attached), done in built:
            try:
                if not attached:  # its feedback could not ride along: log it now the trace is stored
                    log_feedback(trace_id, done, self.target)
                self.traced.add(done.question_id)
            except Exception as exc:  # noqa: BLE001
                self._failed(done.question_id, exc)

    def _failed(self, question_id: str, exc: Exception) -> None:
        self.errors += 1
        if self.errors <= 3:
            log.warning("MLflow: trace of task %s not logged (%s: %s)", question_id, type(exc).__name__,
                        str(exc).splitlines()[0] if str(exc) else "")
