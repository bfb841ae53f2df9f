"""Traces are made by wildtrace and stored in batches: they must read back as MLflow's own tracer writes them.

The reference is the same task traced through MLflow's public tracing API (live spans,
exported by MLflow's tracer); both are read back from a real SQLite store and compared
after the ids and the per-process fields are taken out.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import mlflow
import pytest

from wildtrace.core.events import TaskDone
from wildtrace.core.records import AnswerRecord, JudgmentRecord, TaskStatus
from wildtrace.tracking.store import client_for
from wildtrace.tracking.traces import (CONTENT, SETTINGS, assessments, build_trace, call_attributes, chat_in, chat_out,
                                       root_output, task_tags, TraceTarget, traced_tasks, tracing_client, write_traces)

ANSWER = {"question_id": "q1", "prompt_ref": "Read the report. 事故报告", "response": "The seal was worn.",
          "finish_reason": "stop", "status": "answered", "attempts": 2, "latency_s": 1.5, "started_at": 1700000000.0,
          "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "reasoning_tokens": 20},
          "caps": {"doc_chars": 1200, "in_scope": True}, "document": "report-1.txt", "cached": True,
          "original_latency_s": 9.5, "temperature_sent": False, "served_model": "model-2026-01"}
JUDGMENTS = [
    {"question_id": "q1", "judge": "qwen", "prompt": "Grade this.", "reply": '{"points_awarded":[3],"total":3}',
     "total": 3, "score": 0.5, "status": "scored", "attempts": 1, "latency_s": 0.5, "started_at": 1700000001.5,
     "usage": {"prompt_tokens": 70, "completion_tokens": 9}},
    {"question_id": "q1", "judge": "gemini", "prompt": "Grade this.", "reply": "not json", "total": None,
     "score": None, "status": "unavailable", "reason": "unparseable", "attempts": 1, "latency_s": 0.25,
     "started_at": 1700000001.6},
]
DONE = TaskDone(question_id="q1", answer=AnswerRecord.from_row(ANSWER),
                judgments=[JudgmentRecord.from_row(j) for j in JUDGMENTS], status=TaskStatus.SCORED, score=0.5,
                meta={"paradigm": "causal", "context_tier": "long"})
ROUTES = {"qwen": "route-qwen", "gemini": "route-gemini"}

pytestmark = pytest.mark.mlflow


def reference_trace(done: TaskDone, target: TraceTarget) -> str:
    """The task traced through MLflow's own tracer (the global URI must point at the store)."""
    ns = int(1e9)
    r = done.answer.to_dict()  # the row, as MLflow's tracer would be handed it
    root = mlflow.start_span_no_context(
        f"task {done.question_id}", span_type="CHAIN", experiment_id=target.experiment_id,
        start_time_ns=int(r["started_at"] * ns),
        inputs={"question_id": done.question_id, "document": r["document"], "prompt": r["prompt_ref"]},
        metadata={"mlflow.sourceRun": target.run_id},
        tags={**target.tags, **task_tags(done), "question_id": done.question_id, "status": done.status,
              "wildtrace.cached": "true"},
        attributes={k: str(v) for k, v in done.meta.items()})
    start = int(r["started_at"] * ns)
    caps = mlflow.start_span_no_context("caps decision", span_type="PARSER", parent_span=root,
                                        inputs={"doc_chars": r["caps"]["doc_chars"]}, start_time_ns=start)
    caps.end(outputs=r["caps"], end_time_ns=start)
    answer = mlflow.start_span_no_context("answer", span_type="CHAT_MODEL", parent_span=root,
                                          inputs=chat_in(r["prompt_ref"]), start_time_ns=start,
                                          attributes=call_attributes(done.answer, r["served_model"]))
    answer.end(outputs=chat_out(r["response"], r["finish_reason"], status=r["status"]),
               end_time_ns=start + int(r["latency_s"] * ns))
    end = start
    for record in done.judgments:
        j = record.to_dict()
        js = int(j["started_at"] * ns)
        je = js + int(j["latency_s"] * ns)
        end = max(end, je)
        attrs = call_attributes(record, ROUTES[j["judge"]])
        attrs.update({k: v for k, v in {"judge": j["judge"], "total": j["total"], "score": j["score"],
                                        "status": j["status"]}.items() if v is not None})
        span = mlflow.start_span_no_context(f"judge {j['judge']}", span_type="CHAT_MODEL", parent_span=root,
                                            inputs=chat_in(j["prompt"]), start_time_ns=js, attributes=attrs)
        span.end(outputs=chat_out(j["reply"], j.get("finish_reason"), total=j["total"], score=j["score"],
                                  status=j["status"], reason=j.get("reason")), end_time_ns=je)
    root.end(outputs=root_output(done), end_time_ns=end)
    mlflow.flush_trace_async_logging()
    for a in assessments(root.trace_id, done, target):
        mlflow.log_assessment(trace_id=root.trace_id, assessment=a)
    return root.trace_id


#: Fields that differ between any two traces, or between two processes writing the same one.
VOLATILE_METADATA = {"mlflow.trace.sizeBytes", "mlflow.trace.sizeStats", "mlflow.source.name", "mlflow.source.type",
                     "mlflow.source.git.commit", "mlflow.source.git.branch", "mlflow.source.git.repoURL"}


def comparable(trace) -> dict:
    """A stored trace without its ids, times of writing and the writing process."""
    info = trace.info
    spans = []
    for span in trace.data.spans:
        attrs = {k: v for k, v in span.attributes.items() if k != "mlflow.traceRequestId"}
        parent = next((s.name for s in trace.data.spans if s.span_id == span.parent_id), None)
        spans.append({"name": span.name, "type": span.span_type, "parent": parent, "start": span.start_time_ns,
                      "end": span.end_time_ns, "status": span.status.status_code, "inputs": span.inputs,
                      "outputs": span.outputs, "attributes": attrs})
    return {
        "state": info.state, "request_time": info.request_time, "execution_duration": info.execution_duration,
        "request_preview": info.request_preview, "response_preview": info.response_preview,
        "metadata": {k: v for k, v in info.trace_metadata.items() if k not in VOLATILE_METADATA},
        "tags": {k: v for k, v in info.tags.items() if k not in {"mlflow.artifactLocation", CONTENT, SETTINGS}},
        "assessments": sorted((a.name, json.dumps(a.value), a.source.source_type, a.source.source_id, a.rationale,
                               json.dumps(a.metadata, sort_keys=True)) for a in info.assessments),
        "spans": sorted(spans, key=lambda s: s["name"]),
    }


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("traces", artifact_location=f"file://{tmp_path}/mlartifacts")
    run = client.create_run(experiment)
    return uri, client, TraceTarget(experiment, run.info.run_id, ROUTES, "route-model",
                                    {"decoding.temperature": "0.1", "judge_panel.judges": "gemini,qwen"})


def test_a_trace_reads_back_as_mlflows_own_tracer_writes_it(store):
    uri, client, target = store
    mlflow.set_tracking_uri(uri)
    try:
        reference = client.get_trace(reference_trace(DONE, target))
    finally:
        mlflow.set_tracking_uri(None)
    trace = build_trace(DONE, target)
    assert write_traces(tracing_client(uri), target.experiment_id, [trace]) == ([trace.info.trace_id], [])
    ours = client.get_trace(trace.info.trace_id)
    expected, got = comparable(reference), comparable(ours)
    for key in expected:
        assert got[key] == expected[key], key
    assert ours.info.tags["mlflow.trace.spansLocation"] == "TRACKING_STORE"
    assert json.loads(ours.info.trace_metadata["mlflow.trace.tokenUsage"]) == {
        "input_tokens": 1070, "output_tokens": 59, "total_tokens": 1129}
    assert json.loads(ours.info.trace_metadata["mlflow.trace.sizeStats"])["num_spans"] == 5
    # The trace list's Response column is the answer a person reads, not a status dict.
    assert json.loads(ours.info.response_preview) == "The seal was worn."


@pytest.mark.parametrize(("answer", "want"), [
    ({"response": "The seal was worn.", "status": "answered"}, "The seal was worn."),
    ({"response": None, "status": "out_of_context_scope", "reason": "document has 9 characters > en cap 5"},
     "out_of_context_scope: document has 9 characters > en cap 5"),
    ({"response": "", "status": "failed", "reason": "empty_output"}, "failed: empty_output"),
])
def test_the_root_span_shows_the_answer_or_why_there_is_none(answer, want):
    record = AnswerRecord.from_row({"question_id": "q1", **answer})
    assert root_output(TaskDone("q1", record, [], record.status, 0.0, {})) == want


def test_trace_ids_are_stable_per_run_and_task(store):
    _, _, target = store
    first, again = build_trace(DONE, target), build_trace(DONE, target)
    assert first.info.trace_id == again.info.trace_id
    assert [s.span_id for s in first.data.spans] == [s.span_id for s in again.data.spans]
    other = build_trace(DONE, TraceTarget(target.experiment_id, "another-run", ROUTES))
    assert other.info.trace_id != first.info.trace_id


def test_a_batch_is_stored_whole_and_a_trace_without_spans_is_completed(store):
    uri, client, target = store
    dones = [TaskDone(question_id=f"q{i}", answer=AnswerRecord.from_row({**ANSWER, "question_id": f"q{i}"}),
                      judgments=[JudgmentRecord.from_row({**j, "question_id": f"q{i}"}) for j in JUDGMENTS],
                      status=TaskStatus.SCORED, score=0.5, meta={}) for i in range(30)]
    traces = [build_trace(d, target) for d in dones]
    tc = tracing_client(uri)
    tc.start_trace(traces[0].info)  # a process cut off between a trace's info and its spans
    assert not traced_tasks(client, target)["q0"].has_spans
    stray = build_trace(dataclasses.replace(dones[1], question_id="stray"),
                        TraceTarget("987654", target.run_id, ROUTES))  # an experiment the store lacks
    stored, failed = write_traces(tc, target.experiment_id, [traces[1], stray, *traces[2:]])
    assert len(stored) == 29 and [q for q, _ in failed] == ["stray"]  # the rest of the batch still goes
    write_traces(tc, target.experiment_id, traces[:1], spans_only={traces[0].info.trace_id})
    found = traced_tasks(client, target)
    assert sorted(found) == sorted(d.question_id for d in dones)
    assert all(s.has_spans and s.assessments == 3 for s in found.values())  # 2 judges, the panel's score
    assert len(client.get_trace(traces[0].info.trace_id).data.spans) == 5


def fresh_store(path: Path, run: bool = True, uri: str | None = None) -> tuple[str, TraceTarget]:
    """A store with one experiment and a run (or, with ``run=False``, a run id the same in every store);
    SQLite in ``path`` unless ``uri`` names another database."""
    uri = uri or f"sqlite:///{path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("traces", artifact_location=f"file://{path}/mlartifacts")
    run_id = client.create_run(experiment).info.run_id if run else "run-fixed"
    return uri, TraceTarget(experiment, run_id, ROUTES, "route-model")


def tasks(n: int) -> list[TaskDone]:
    """n copies of the judged task, each its own question."""
    return [dataclasses.replace(DONE, question_id=f"q{i}", answer=dataclasses.replace(DONE.answer, question_id=f"q{i}"))
            for i in range(n)]


def test_each_judge_is_feedback_on_its_own_span_and_a_failed_one_carries_its_error():
    target = TraceTarget("1", "run-a", ROUTES)
    trace = build_trace(DONE, target)
    spans = {s.name: s.span_id for s in trace.data.spans}
    got = {a.name: a for a in trace.info.assessments}
    assert set(got) == {"judge/qwen", "judge/gemini", "panel/score"}  # one judge scored: no spread
    assert (got["judge/qwen"].value, got["judge/qwen"].error) == (0.5, None)
    failed = got["judge/gemini"]
    assert failed.value is None
    assert (failed.error.error_code, failed.error.error_message) == ("unavailable", "unparseable")
    for key in ("qwen", "gemini"):
        assert got[f"judge/{key}"].span_id == spans[f"judge {key}"]
        assert got[f"judge/{key}"].run_id == "run-a" and got[f"judge/{key}"].source.source_id == ROUTES[key]
    assert got["panel/score"].span_id == spans["task q1"] and got["panel/score"].value == 0.5
