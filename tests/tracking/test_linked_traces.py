"""A task served wholly from the cache whose trace is stored already is linked to the new run, not stored again.

Each test writes a first run's traces into a real SQLite MLflow store through the exporter, then
exports a rerun's tasks (the same rows served from the cache, timed by this run's look-ups) and
reads back what the new run lists, as ``search_traces(run_id=…)`` and as the run's Traces view
asks (``request_metadata.mlflow.sourceRun``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from test_tracking_traces import DONE, fresh_store
from wildtrace.core.events import TaskDone
from wildtrace.core.records import AnswerRecord, JudgmentRecord, TaskStatus
from wildtrace.tracking.store import client_for
from wildtrace.tracking.traces import (CONTENT, TraceExporter, TraceTarget, build_trace, served_from_cache,
                                       traced_tasks, tracing_client)

pytestmark = pytest.mark.mlflow

RERUN_AT = 1_800_000_000.0  # when the rerun looked its calls up in the cache


def call_from_cache(call: AnswerRecord | JudgmentRecord) -> AnswerRecord | JudgmentRecord:
    """A paid call as a rerun records it: served from the cache, timed by the look-up, the paid latency kept."""
    provenance = dataclasses.replace(call.provenance, cached=True, original_latency_s=call.latency_s, cost_usd=0.0,
                                     original_cost_usd=call.provenance.cost_usd)
    return dataclasses.replace(call, provenance=provenance, started_at=RERUN_AT, latency_s=0.001)


def paid(call: AnswerRecord | JudgmentRecord) -> AnswerRecord | JudgmentRecord:
    """The same call as the run that paid for it records it."""
    return dataclasses.replace(call, provenance=dataclasses.replace(call.provenance, cached=False,
                                                                    original_latency_s=None, cost_usd=0.002))


def task(qid: str, served: bool = False) -> TaskDone:
    """The judged task as question ``qid``: paid, or (``served``) every call served from the cache."""
    change = call_from_cache if served else paid
    return dataclasses.replace(DONE, question_id=qid, answer=change(dataclasses.replace(DONE.answer, question_id=qid)),
                               judgments=[change(dataclasses.replace(j, question_id=qid)) for j in DONE.judgments])


def export(uri: str, target: TraceTarget, dones: list[TaskDone]) -> TraceExporter:
    """The dones exported to ``target``'s run as a run's exporter does, until it is closed."""
    exporter = TraceExporter(target, uri)
    for done in dones:
        exporter.submit(done)
    exporter.close(60)
    return exporter


def rerun_of(uri: str, target: TraceTarget) -> TraceTarget:
    """A new run in the same experiment, with the same settings."""
    run_id = client_for(uri).create_run(target.experiment_id).info.run_id
    return dataclasses.replace(target, run_id=run_id)


def listed(uri: str, target: TraceTarget) -> dict[str, str]:
    """question_id → trace id of what the run lists, checked the same both ways MLflow asks."""
    tc = tracing_client(uri)
    by_run = tc.search_traces(locations=[target.experiment_id], run_id=target.run_id, include_spans=False,
                              max_results=500)
    view = tc.search_traces(locations=[target.experiment_id], include_spans=False, max_results=500,
                            filter_string=f"request_metadata.`mlflow.sourceRun` = '{target.run_id}'")
    got = sorted((t.info.tags["question_id"], t.info.trace_id) for t in by_run)
    assert sorted((t.info.tags["question_id"], t.info.trace_id) for t in view) == got
    assert len({q for q, _ in got}) == len(got), "a task listed twice"
    return dict(got)


def all_traces(uri: str, target: TraceTarget) -> int:
    return len(tracing_client(uri).search_traces(locations=[target.experiment_id], include_spans=False,
                                                 max_results=500))


@pytest.fixture
def first(tmp_path: Path) -> tuple[str, TraceTarget, dict[str, str]]:
    """A store whose first run paid for and traced q0–q4."""
    uri, target = fresh_store(tmp_path)
    target = dataclasses.replace(target, tags={"decoding.temperature": "0.1", "judge_panel.judges": "gemini,qwen"})
    export(uri, target, [task(f"q{i}") for i in range(5)])
    return uri, target, listed(uri, target)


def one_judge_paid(done: TaskDone) -> TaskDone:
    """The task with its first judge's call paid in this run, the rest as they were."""
    return dataclasses.replace(done, judgments=[paid(done.judgments[0]), *done.judgments[1:]])


def out_of_context(qid: str) -> TaskDone:
    """A task no call was made for (its document over the model's cap)."""
    answer = AnswerRecord.from_row({"question_id": qid, "status": "out_of_context_scope", "reason": "over the cap"})
    return TaskDone(qid, answer, [], TaskStatus.OUT_OF_CONTEXT, None, {})


@pytest.mark.parametrize(("done", "want"), [
    (task("q1", served=True), True),
    (task("q1"), False),
    (one_judge_paid(task("q1", served=True)), False),
    (out_of_context("q1"), True),  # no call sent: its trace shows the same in every run
])
def test_served_from_cache_means_this_run_sent_no_call(done, want):
    assert served_from_cache(done) is want


def test_the_content_tag_ignores_times_cache_and_run_but_not_what_the_trace_shows(first):
    uri, target, _ = first
    again = rerun_of(uri, target)
    tag = build_trace(task("q1"), target).info.tags[CONTENT]
    assert build_trace(task("q1", served=True), again).info.tags[CONTENT] == tag
    rescored = dataclasses.replace(task("q1", served=True), score=0.75)
    reset = dataclasses.replace(again, tags={**again.tags, "decoding.temperature": "0.7"})
    for other in (build_trace(rescored, again), build_trace(task("q1", served=True), reset),
                  build_trace(task("q2", served=True), again)):
        assert other.info.tags[CONTENT] != tag


def test_a_cached_rerun_lists_the_stored_traces_and_stores_what_changed(first):
    uri, target, stored = first
    again = rerun_of(uri, target)
    dones = [task("q0", True), task("q1", True), dataclasses.replace(task("q2", True), score=0.75),
             one_judge_paid(task("q3", True)), task("q4", True)]
    exporter = export(uri, again, dones)
    assert exporter.linked == {"q0", "q1", "q4"} and exporter.errors == 0
    got = listed(uri, again)
    assert {q: got[q] for q in ("q0", "q1", "q4")} == {q: stored[q] for q in ("q0", "q1", "q4")}
    assert got["q2"] not in stored.values() and got["q3"] not in stored.values()  # stored as new traces
    assert all_traces(uri, target) == 7
    assert listed(uri, target) == stored  # the first run's own list is unchanged
    found = traced_tasks(client_for(uri), again)
    assert sorted(found) == [f"q{i}" for i in range(5)] and all(s.has_spans for s in found.values())


def test_a_rerun_with_other_settings_stores_its_own_traces(first):
    uri, target, stored = first
    again = rerun_of(uri, dataclasses.replace(target, tags={**target.tags, "decoding.temperature": "0.7"}))
    exporter = export(uri, again, [task(f"q{i}", True) for i in range(5)])
    assert exporter.linked == set()
    assert not set(listed(uri, again).values()) & set(stored.values())


def test_a_trace_stored_without_its_spans_is_never_linked(tmp_path):
    uri, target = fresh_store(tmp_path)
    tracing_client(uri).start_trace(build_trace(task("q0"), target).info)  # a first run killed before its spans
    export(uri, target, [task("q1")])
    again = rerun_of(uri, target)
    exporter = export(uri, again, [task("q0", True), task("q1", True)])
    assert exporter.linked == {"q1"}
    got = listed(uri, again)
    assert got["q0"] == build_trace(task("q0", True), again).info.trace_id  # this run's own, with its spans
    assert len(client_for(uri).get_trace(got["q0"]).data.spans) == 5


def test_a_cut_off_rerun_resumed_neither_links_nor_stores_twice(first):
    """An exporter stopped after two tasks; the next one (as upload makes) skips what the run lists."""
    uri, target, stored = first
    again = rerun_of(uri, target)
    dones = [task(f"q{i}", True) for i in range(5)]
    export(uri, again, dones[:2])
    existing = traced_tasks(client_for(uri), again)
    assert sorted(existing) == ["q0", "q1"] and all(s.has_spans for s in existing.values())
    resumed = TraceExporter(again, uri)
    resumed.skip(existing)
    for done in dones:
        resumed.submit(done)
    resumed.close(60)
    assert resumed.linked == {"q2", "q3", "q4"}
    assert listed(uri, again) == stored and all_traces(uri, target) == 5


class RefusingLinks:
    """An MLflow client whose store refuses to link traces (a tracking server without the endpoint)."""

    def link_traces_to_run(self, trace_ids: list[str], run_id: str) -> None:
        raise RuntimeError("404 Not Found: /api/2.0/mlflow/traces/link-to-run")


def test_a_store_that_refuses_the_link_gets_the_traces_stored(first, caplog):
    uri, target, stored = first
    again = rerun_of(uri, target)
    exporter = TraceExporter(again, uri)
    exporter.runs = RefusingLinks()
    for i in range(5):
        exporter.submit(task(f"q{i}", True))
    exporter.close(60)
    assert exporter.linked == set() and exporter.errors == 0
    got = listed(uri, again)
    assert sorted(got) == [f"q{i}" for i in range(5)] and not set(got.values()) & set(stored.values())
    assert "traces not linked to the run (RuntimeError: 404 Not Found" in caplog.text
