"""Logging keeps pace: a run's MLflow tail is a small share of logging everything at the end.

Figures in docs/performance.md come from the same comparison at 481 tasks (benchmarks/scale.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import pytest

from test_tracking_observer import scripted_run, traces_of
from wildtrace.core.events import RunEnd
from wildtrace.core.records import JudgmentRecord
from wildtrace.files import write_json
from wildtrace.tracking.mlflow_logger import log_run_dir

pytestmark = pytest.mark.slow
JUDGES = ("claude", "qwen", "gemini")
log = logging.getLogger(__name__)


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


def test_streamed_traces_leave_a_short_tail(tmp_path):
    n, gap = 250, 0.04  # tasks finishing at 25 a second
    streamed = paper_panel_run(tmp_path / "a", "streamed", n)
    obs = streamed.observer()
    obs.run_started(streamed.start())
    for done in streamed.dones:
        obs.task_done(done)
        time.sleep(gap)
    t = time.perf_counter()
    run_id = obs.run_finished(RunEnd(str(streamed.out_dir), "finished"))
    tail = time.perf_counter() - t

    at_end = paper_panel_run(tmp_path / "b", "at_end", n)
    t = time.perf_counter()
    log_run_dir(at_end.out_dir)
    whole = time.perf_counter() - t
    log.info("MLflow tail after the last task: streamed %.1f s, all at the end %.1f s", tail, whole)
    assert len(traces_of(streamed.client(), run_id, spans=False)) == n
    assert tail < 0.5 * whole, (tail, whole)
