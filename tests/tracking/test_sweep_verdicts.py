"""A sweep parent's verdicts: paired t per point against the first, Holm-adjusted across the sweep,
checked against scipy's paired t and statsmodels' Holm."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from wildtrace.tracking.runs.parent import verdicts

N_TASKS = 20


def approx(value: float):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


#: The unadjusted two-sided p each swept point's difference is built to have: each below 0.05
#: alone, none below it after Holm across the three (0.03·3, 0.04·2, 0.045 → 0.09, 0.09, 0.09).
TARGET_P = {"t/0.4": 0.03, "t/0.7": 0.04, "t/1.0": 0.045}


def _noise(seed: int) -> np.ndarray:
    """Centred noise with sd 1 (so a shift mu gives t = mu·√n exactly)."""
    e = np.random.default_rng(seed).normal(size=N_TASKS)
    e = e - e.mean()
    return e / e.std(ddof=1)


def _job(root: Path, index: int, run_id: str, scores: np.ndarray) -> Path:
    job = root / str(index)
    job.mkdir()
    (job / "mlflow.json").write_text(json.dumps({"run_id": run_id}))
    (job / "scores.json").write_text(json.dumps({"tasks": [{"question_id": f"q{i:02d}", "score": float(s)}
                                                           for i, s in enumerate(scores)]}))
    return job


def test_verdicts_are_paired_t_holm_adjusted_across_the_sweep(tmp_path):
    base = np.full(N_TASKS, 0.5)
    jobs, rows, diffs = [_job(tmp_path, 0, "r0", base)], [{"run_id": "r0", "point": "t/0.1"}], {}
    for index, (point, p) in enumerate(TARGET_P.items(), start=1):
        t = float(sps.t.isf(p / 2.0, N_TASKS - 1))
        diff = 0.02 * (_noise(index) + t / np.sqrt(N_TASKS))  # 0–1 scale: sd 2 pp, t as targeted
        diffs[point] = diff
        jobs.append(_job(tmp_path, index, f"r{index}", base + diff))
        rows.append({"run_id": f"r{index}", "point": point})
    found = {r["point"]: r for r in verdicts(pd.DataFrame(rows), jobs)}

    assert sorted(found) == sorted(TARGET_P)
    raw = [float(sps.ttest_rel(100 * (base + diffs[k]), 100 * base).pvalue) for k in TARGET_P]
    assert raw == [approx(p) for p in TARGET_P.values()]
    reject, holm_p, _, _ = multipletests(raw, alpha=0.05, method="holm")
    for (point, d), p, adjusted, rejected in zip(diffs.items(), raw, holm_p, reject, strict=True):
        row = found[point]
        ci = sps.ttest_rel(100 * (base + d), 100 * base).confidence_interval(0.95)
        assert row["p_value"] == approx(p)
        assert row["p_holm"] == approx(float(adjusted))
        assert (row["diff_pp"], row["diff_ci_low_pp"], row["diff_ci_high_pp"]) == (
            round(100 * float(d.mean()), 2), round(float(ci.low), 2), round(float(ci.high), 2))
        assert row["distinguishable"] is bool(rejected) is False  # each p < 0.05 alone; none after Holm
        assert row["verdict"].startswith("within noise of t/0.1: ")
        assert "paired t over 20 tasks" in row["verdict"] and "across the sweep's 3 comparisons" in row["verdict"]


def test_a_clear_difference_stays_distinguishable_after_holm(tmp_path):
    base = np.full(N_TASKS, 0.5)
    clear = base + 0.02 * (_noise(7) + 6.0 / np.sqrt(N_TASKS))  # t = 6
    same = base + 0.02 * _noise(8)  # t = 0
    jobs = [_job(tmp_path, 0, "r0", base), _job(tmp_path, 1, "r1", clear), _job(tmp_path, 2, "r2", same)]
    frame = pd.DataFrame([{"run_id": f"r{i}", "point": f"mt/{v}"} for i, v in enumerate((64, 256, 1024))])
    found = {r["point"]: r for r in verdicts(frame, jobs)}
    raw = [float(sps.ttest_rel(100 * x, 100 * base).pvalue) for x in (clear, same)]
    reject, holm_p, _, _ = multipletests(raw, alpha=0.05, method="holm")
    assert [found["mt/256"]["p_holm"], found["mt/1024"]["p_holm"]] == [approx(float(v)) for v in holm_p]
    assert [found["mt/256"]["distinguishable"], found["mt/1024"]["distinguishable"]] == list(map(bool, reject)) \
        == [True, False]
    assert found["mt/256"]["verdict"].startswith("distinguishable from mt/64: +")
