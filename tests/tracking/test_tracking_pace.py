"""Logging keeps pace: a run's traces are stored while it goes, so its MLflow tail holds none of them.

The tail is measured in what it does, not in seconds (a busy machine stretches seconds):
every trace write MLflow's trace client makes is counted, and the counts before and after
the run ends are compared with logging the same run all at the end. Wall-time figures
come from the same comparison at 481 tasks (benchmarks/scale.py): today's tail in docs/reference/performance.md,
logging at the end (``c42484b``) beside it in benchmarks/HISTORY.md.
"""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from mlflow.tracing.client import TracingClient

from test_tracking_observer import scripted_run, traces_of
from wildtrace.core.events import RunEnd
from wildtrace.core.records import JudgmentRecord
from wildtrace.files import write_json
from wildtrace.tracking.runs.mlflow_logger import log_run_dir
from wildtrace.tracking import traces as traces_module
from wildtrace.tracking.traces import BATCH

pytestmark = pytest.mark.slow
JUDGES = ("claude", "qwen", "gemini")
#: A safety net only: the test waits on the traces it means, never on a time.
SAFETY_S = 120.0


def paper_panel_run(tmp, name: str, n: int):
    """A scripted run with three judges per task, as the paper's panel."""
    s = scripted_run(tmp, name, n=n, cached=frozenset())
    rows = [dict(j, judge=k) for j in json.loads((s.out_dir / "judgments.json").read_text()) for k in JUDGES]
    write_json(s.out_dir / "judgments.json", rows)
    s.config["judge_panel"]["judges"] = {k: {"route": k} for k in JUDGES}
    write_json(s.out_dir / "config.json", s.config)
    by_task: dict[str, list[JudgmentRecord]] = {}
    for row in rows:
        by_task.setdefault(row["question_id"], []).append(JudgmentRecord.from_row(row))
    s.dones = [dataclasses.replace(d, judgments=by_task[d.question_id]) for d in s.dones]
    return s


class TraceWrites:
    """Counts, by phase, what MLflow's trace client stores: trace infos (``start_traces``), span
    batches (``log_spans``) and the traces those batches complete (their root spans)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.phase = "running"
        self.traces: dict[str, int] = {}
        self.span_batches: dict[str, int] = {}
        self.completed: dict[str, int] = {}  # traces whose spans are stored
        self._lock = threading.Lock()
        self._reached = threading.Condition(self._lock)
        start_traces, log_spans = traces_module.start_traces, TracingClient.log_spans

        def counted_start(client, infos, *args, **kwargs):
            failed = start_traces(client, infos, *args, **kwargs)
            self._count(self.traces, len(infos) - len(failed))
            return failed

        def counted_spans(client, location, spans, *args, **kwargs):
            result = log_spans(client, location, spans, *args, **kwargs)
            self._count(self.span_batches)
            self._count(self.completed, sum(1 for span in spans if span.parent_id is None))
            return result

        monkeypatch.setattr(traces_module, "start_traces", counted_start)
        monkeypatch.setattr(TracingClient, "log_spans", counted_spans)

    def _count(self, counts: dict[str, int], by: int = 1) -> None:
        with self._lock:
            counts[self.phase] = counts.get(self.phase, 0) + by
            self._reached.notify_all()

    def wait_for_traces(self, n: int) -> int:
        """Wait until ``n`` traces were stored with their spans in this phase (the event), SAFETY_S at
        most; how many were."""
        with self._lock:
            self._reached.wait_for(lambda: self.completed.get(self.phase, 0) >= n, SAFETY_S)
            return self.completed.get(self.phase, 0)

    def enter(self, phase: str) -> None:
        with self._lock:
            self.phase = phase


def test_streamed_traces_leave_no_trace_to_the_tail(tmp_path, monkeypatch):
    n = BATCH + 50  # more than one batch, so batching cannot hide a trace until the end
    writes = TraceWrites(monkeypatch)
    streamed = paper_panel_run(tmp_path / "a", "streamed", n)
    obs = streamed.observer()
    obs.run_started(streamed.start())
    for done in streamed.dones:
        obs.task_done(done)
    # Every trace is stored while the run goes: the run has not ended, and all n are written.
    assert writes.wait_for_traces(n) == n
    assert writes.traces["running"] == n
    writes.enter("tail")
    run_id = obs.run_finished(RunEnd(str(streamed.out_dir), "finished"))
    assert run_id is not None
    assert (writes.traces.get("tail", 0), writes.span_batches.get("tail", 0)) == (0, 0)  # nothing left to the end
    assert len(traces_of(streamed.client(), run_id, spans=False)) == n

    # The same run logged all at the end writes every trace in its tail: what streaming saves.
    at_end = paper_panel_run(tmp_path / "b", "at_end", n)
    writes.enter("at_end")
    at_end_id = log_run_dir(at_end.out_dir)
    assert (writes.traces["at_end"], writes.completed["at_end"]) == (n, n) and writes.span_batches["at_end"] >= 2
    assert len(traces_of(at_end.client(), at_end_id, spans=False)) == n
