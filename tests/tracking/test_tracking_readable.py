"""Numbers rounded where a person reads them (MLflow's metrics, spans, feedback); the run files keep full precision.

The rules are pinned at their boundaries, then a run with full-precision values is logged to a
real SQLite store and read back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from test_tracking_observer import scripted_run, traces_of
from wildtrace.files import write_json
from wildtrace.tracking import readable
from wildtrace.tracking.runs.mlflow_logger import log_run_dir

THIRDS = 0.6153846153846154  # 8/13: a score no rounding leaves alone


@pytest.mark.parametrize(("rule", "value", "expected"), [
    (readable.percent, 61.538461538461, 61.54),
    (readable.percent, 61.535, 61.53),  # binary 61.535 is just below the half: Python's round, no surprise kept
    (readable.percent, 100.0, 100.0),
    (readable.percent, 0, 0.0),
    (readable.fraction, THIRDS, 0.6154),
    (readable.fraction, 1, 1.0),
    (readable.fraction, -0.00004, -0.0),
    (readable.seconds, 1.2345678, 1.235),
    (readable.seconds, 0.0004, 0.0),  # under half a millisecond
    (readable.seconds, 0.0005001, 0.001),
    (readable.usd, 0.0001234567, 0.0001235),  # 4 significant digits: a tiny cost never reads as 0
    (readable.usd, 0.5, 0.5),
    (readable.usd, 12.345678, 12.35),  # to the cent once 4 digits are before it
    (readable.usd, 1234.5678, 1234.57),  # never fewer than 2 decimals
    (readable.usd, 0, 0.0),
    (readable.usd, -0.0123456, -0.01235),
])
def test_rounding_by_unit(rule, value, expected):
    assert rule(value) == expected


@pytest.mark.parametrize("rule", [readable.percent, readable.fraction, readable.seconds, readable.usd])
@pytest.mark.parametrize("value", [None, True, False, "0.123456", math.inf])
def test_what_is_not_a_finite_number_passes_untouched(rule, value):
    assert rule(value) is value


@pytest.mark.slow
def test_mlflow_shows_rounded_numbers_and_the_files_keep_full_precision(tmp_path):
    s = scripted_run(tmp_path, "precise", n=2, cached=frozenset())
    answers = json.loads((s.out_dir / "responses.json").read_text())
    for a in answers:
        a.update(latency_s=1.2345678, cost_usd=0.000123456789)
    judgments = json.loads((s.out_dir / "judgments.json").read_text())
    for j in judgments:
        j.update(total=100 * THIRDS, score=THIRDS, latency_s=0.98765432, cost_usd=0.0023456789)
    scores = json.loads((s.out_dir / "scores.json").read_text())
    scores.update(overall=100 * THIRDS, scored=100 * THIRDS)
    scores["judges"]["offline"].update(mean=THIRDS, unavailable_rate=1 / 3)
    for t in scores["tasks"]:
        t["score"] = THIRDS
    stats = json.loads((s.out_dir / "run_stats.json").read_text())
    stats.update(wall_s=12.3456789, cost={"total_usd": 0.00493827, "endpoints": {"model": {"cost_usd": 0.000246913}}})
    files = {"responses.json": answers, "judgments.json": judgments, "scores.json": scores, "run_stats.json": stats}
    for name, data in files.items():
        write_json(s.out_dir / name, data)

    run_id = log_run_dir(s.out_dir)
    client = s.client()
    metrics = client.get_run(run_id).data.metrics
    assert {k: metrics[k] for k in ("overall_pct", "scored_pct", "paradigm/causal/all_pct", "tier/T1/scored_pct")} == {
        "overall_pct": 61.54, "scored_pct": 61.54, "paradigm/causal/all_pct": 61.54, "tier/T1/scored_pct": 61.54}
    assert (metrics["judge/offline/mean"], metrics["judge/offline/unavailable_rate"]) == (0.6154, 0.3333)
    assert (metrics["judge/offline/n"], metrics["n_total"]) == (2, 2)  # counts exact
    assert (metrics["wall_s"], metrics["cost_usd"], metrics["cost_usd/model"]) == (12.346, 0.004938, 0.0002469)

    for trace in traces_of(client, run_id):
        spans = {span.name: span for span in trace.data.spans}
        answer, judge = spans["answer"], spans["judge offline"]
        assert (answer.attributes["latency_s"], answer.attributes["wildtrace.cost_usd"]) == (1.235, 0.0001235)
        assert (judge.attributes["latency_s"], judge.attributes["wildtrace.cost_usd"]) == (0.988, 0.002346)
        assert judge.attributes["score"] == judge.outputs["score"] == 0.6154
        assert {a.name: a.value for a in trace.info.assessments if a.name != "rubric"} == {
            "judge/offline": 0.6154, "panel/score": 0.6154}
        assert (answer.end_time_ns - answer.start_time_ns) == int(1.2345678 * 1e9)  # span times are not rounded

    # The run files, and the artifacts MLflow keeps of them, hold every digit.
    for name, data in files.items():
        assert json.loads((s.out_dir / name).read_text()) == data
        stored = client.download_artifacts(run_id, name, str(tmp_path / "downloaded"))
        assert json.loads(Path(stored).read_text(encoding="utf-8")) == data
