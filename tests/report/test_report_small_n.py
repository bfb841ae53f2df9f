"""Below 30 tasks: a t interval by default, BCa on request (report.bootstrap.small_n=bca), and the
small-n flag on every table whose intervals can be that small."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sps
from test_report import A1, A2, B, B_STATUS, QIDS, write_run

from wildtrace.report import sources
from wildtrace.report.assemble import build
from wildtrace.report.experiments import score_interval
from wildtrace.report.statistics import stats
from wildtrace.report.statistics.stats import Bootstrap

VALUES = np.array([0.1, 0.15, 0.2, 0.22, 0.3, 0.35, 0.5, 0.55, 0.6, 0.9, 0.95, 1.0])


def efron_bca(values: np.ndarray, resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Efron's BCa for a mean, written out: bias z0 from the share of resampled means below the
    mean, acceleration from the jackknife, then the adjusted percentiles of the same resamples."""
    n = len(values)
    theta = values.mean()
    draws = values[np.random.default_rng(seed).integers(0, n, (resamples, n))].mean(axis=1)
    z0 = sps.norm.ppf((draws < theta).mean())
    jack = np.array([np.delete(values, i).mean() for i in range(n)])
    u = jack.mean() - jack
    a = (u ** 3).sum() / (6 * ((u ** 2).sum()) ** 1.5)
    ends = []
    for z in (sps.norm.ppf((1 - level) / 2), sps.norm.ppf((1 + level) / 2)):
        ends.append(float(np.percentile(draws, 100 * sps.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))))
    return ends[0], ends[1]


def test_bca_is_scipys_and_efrons():
    boot = Bootstrap(resamples=20000, seed=3, small_n="bca")
    found = stats.bca_interval(VALUES, boot)
    scipy_bca = sps.bootstrap((VALUES,), np.mean, n_resamples=20000, method="BCa",
                              rng=np.random.default_rng(3)).confidence_interval
    assert found == (pytest.approx(scipy_bca.low, abs=1e-12), pytest.approx(scipy_bca.high, abs=1e-12))
    assert found == pytest.approx(efron_bca(VALUES, 20000, 0.95, 7), abs=0.01)  # other draws: Monte Carlo


def test_below_30_tasks_a_score_takes_t_or_bca_and_above_the_percentile_bootstrap():
    t_low, t_high = sps.t.interval(0.95, len(VALUES) - 1, loc=VALUES.mean(), scale=sps.sem(VALUES))
    assert score_interval(VALUES, Bootstrap()) == (pytest.approx(t_low), pytest.approx(t_high))
    bca = Bootstrap(small_n="bca")
    assert score_interval(VALUES, bca) == stats.bca_interval(VALUES, bca)
    many = np.tile(VALUES, 3)  # 36 tasks: the bootstrap whatever small_n says
    assert score_interval(many, bca) == stats.all_interval(many, bca)
    assert stats.bca_interval([0.4, 0.4, 0.4]) == (0.4, 0.4) and stats.bca_interval([0.4]) == (None, None)


def test_every_small_table_carries_the_flag(tmp_path):
    write_run(tmp_path, "a-rep0", "alpha", A1)
    write_run(tmp_path, "a-rep1", "alpha", A2, rep_j=1, date="2026-12-01T11:00:00+00:00")
    write_run(tmp_path, "a-only-a", "alpha", {"a": A1["a"]}, panel="trio_only_a")
    write_run(tmp_path, "a-hot", "alpha", A2, t=0.7)
    write_run(tmp_path, "b", "beta", B, status=B_STATUS)
    write_run(tmp_path, "b-only-a", "beta", {"a": B["a"]}, status=B_STATUS, panel="trio_only_a")
    report = build(sources.from_run_dirs([str(tmp_path / "*")]), Bootstrap(resamples=200))
    for name in ("baseline", "sweeps", "ablations", "gaps", "languages", "leaderboard"):
        table = getattr(report, name)
        assert len(table) and "small_n" in table and table["small_n"].astype(bool).all(), name  # 8 tasks


def test_an_unknown_small_n_method_is_refused_naming_the_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run([sys.executable, "-m", "wildtrace.report", f"root={tmp_path}", "report.bootstrap.small_n=z",
                           f"report.run_dirs=[{tmp_path}/none]", "mlflow.log_report=false"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "report.bootstrap.small_n must be one of t, bca, got 'z'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_languages_interval_below_30_tasks_follows_the_setting(tmp_path):
    out = write_run(tmp_path, "a", "alpha", A1)
    (out / "responses.json").write_text(json.dumps([{"question_id": q, "status": "answered", "response": "x",
                                                     "caps": {"cap_kind": "cjk" if i % 2 else "en"}}
                                                    for i, q in enumerate(QIDS)]))
    boot = Bootstrap(resamples=500, small_n="bca")
    table = build(sources.from_run_dirs([str(tmp_path / "*")]), boot).languages.set_index("language")
    scores = [float(np.nanmean([np.nan if A1[k][i] is None else A1[k][i] for k in "abc"])) for i in range(8)]
    chinese = np.array(scores[1::2])
    low, high = stats.bca_interval(chinese, boot)
    assert table.loc["Chinese", ["ci_low_pct", "ci_high_pct"]].tolist() == [pytest.approx(100 * low),
                                                                         pytest.approx(100 * high)]
    assert bool(table.loc["Chinese", "small_n"]) and table.loc["Chinese", "n"] == 4
