"""Judge noise in the report, on runs whose noise is known by construction.

Synthetic run directories are written in the shape a job writes (config.json, run_stats.json,
scores.json, judgments.json with each item's points and the judge prompt, responses.json):
a judge whose replicates flip each rubric item with a known probability, scores with known
task, answer and judge variance, and two models a known gap apart. The real offline judge
(judge_panel=offline_panel, thresholds jittered above temperature 0) is run too, and the
offline tour end to end through MLflow.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from conftest import settings
from wildtrace.core.prompts import judge_prompt
from wildtrace.core.tasks import RubricItem
from wildtrace.report import render, sources
from wildtrace.report.statistics import noise
from wildtrace.report.statistics.stats import Bootstrap
from wildtrace.report.assemble import build

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 4  # rubric items of 25 points each


def _config(model: str, judges: list[str], rep_d: int, rep_j: int, out_dir: Path, t: float = 0.1,
            panel: str = "trio") -> dict:
    return {
        "model": {"name": model, "provider": "openai", "route": f"{model}-route", "base_url": "http://x/v1",
                  "api_key_env": "K", "caps": {"en": 2850000, "cjk": 850000}},
        "decoding": {"temperature": t, "max_tokens": None, "replicate": rep_d},
        "judge_panel": {"name": panel, "temperature": 0.1, "max_tokens": 16384, "replicate": rep_j,
                        "judges": {k: {"name": f"judge-{k}", "route": f"judge-{k}"} for k in judges}},
        "dataset": {"name": "synthetic", "tasks": f"{out_dir}/tasks.json", "corpus": f"{out_dir}/corpus"},
        "stage": "all", "out_dir": str(out_dir), "root": str(out_dir.parent), "progress": False,
    }


def write_run(root: Path, name: str, model: str, scores: dict[str, list[float]], rep_d: int = 0, rep_j: int = 0,
              points: dict[str, list[list[float]]] | None = None, answers: list[str] | None = None,
              served: dict[str, list[str]] | None = None, prompts: str = "p" * 64, **config) -> Path:
    """One run directory: judge → a score per task (0–1); with ``points``, judgments.json too
    (judge → per task, each item's points) with the spec's judge prompt for each answer."""
    out = root / name
    out.mkdir(parents=True)
    n = len(next(iter(scores.values())))
    qids = [f"q{i:03d}" for i in range(n)]
    answers = answers or [f"answer {i} of {model} set {rep_d}" for i in range(n)]
    rows = []
    for i, qid in enumerate(qids):
        judges = {k: {"status": "scored", "total": 100 * v[i], "score": v[i], "reason": None}
                  for k, v in scores.items()}
        rows.append({"question_id": qid, "status": "scored", "score": float(np.mean([v[i] for v in scores.values()])),
                     "judges": judges, "paradigm": "causal", "context_tier": "T1"})
    rubric = [RubricItem(25, f"criterion {k + 1} of task") for k in range(ITEMS)]
    judgments = [{"question_id": qid, "judge": k, "status": "scored", "score": scores[k][i],
                  "parsed": {"points_awarded": pts[i], "total": sum(pts[i])},
                  "prompt": judge_prompt(f"question {qid}?", rubric, answers[i])}
                 for k, pts in (points or {}).items() for i, qid in enumerate(qids)]
    stats = {"run_date": f"2026-12-01T10:{rep_d:02d}:{rep_j:02d}+00:00", "effective_max_tokens": 8192,
             "prompts_sha256": prompts, "served_models": served or {},
             "dataset": {"tasks_sha256": "f" * 64, "release_version": "synthetic-1"}}
    files = {"config.json": _config(model, list(scores), rep_d, rep_j, out, **config), "run_stats.json": stats,
             "scores.json": {"tasks": rows},
             "responses.json": [{"question_id": q, "status": "answered", "response": a}
                                for q, a in zip(qids, answers, strict=False)]}
    if points:
        files["judgments.json"] = judgments
    for file, data in files.items():
        (out / file).write_text(json.dumps(data), encoding="utf-8")
    return out


def report_of(root: Path, **boot):
    return build(sources.from_run_dirs([str(root / "*")]), Bootstrap(**boot) if boot else Bootstrap())


# --------------------------------------------------------------------------- intra-rater


P_FLIP = 0.2  # each item's award flips from its truth with this probability, per replicate


@pytest.fixture(scope="module")
def flipping_judge(tmp_path_factory):
    """Three judge replicates of 300 answers; judge a flips items with P_FLIP, judge b never."""
    root = tmp_path_factory.mktemp("flips")
    rng = np.random.default_rng(11)
    truth = rng.random((300, ITEMS)) < 0.5
    per_rep = []
    for rep in range(3):
        flips = rng.random((300, ITEMS)) < P_FLIP
        a = np.where(truth ^ flips, 25.0, 0.0)
        b = np.where(truth, 25.0, 0.0)
        per_rep.append({"a": a, "b": b})
        write_run(root, f"rep{rep}", "alpha", {k: list(v.sum(axis=1) / 100) for k, v in per_rep[-1].items()},
                  rep_j=rep, points={k: v.tolist() for k, v in per_rep[-1].items()})
    return root, per_rep


def test_intra_rater_alpha_matches_the_krippendorff_package(flipping_judge):
    import krippendorff

    root, per_rep = flipping_judge
    intra = report_of(root, resamples=200).agreement["intra_rater"]
    assert set(intra) == {"a", "b"}
    assert set(intra["a"]) == {"krippendorff_alpha_interval", "alpha_ci_low", "alpha_ci_high", "reading", "n_units",
                               "n_replicates", "changed_rate", "mean_abs_change", "max_abs_change"}
    # the reading is the interval's lower bound's: a point estimate alone says too much on few units
    assert intra["a"]["alpha_ci_low"] < intra["a"]["krippendorff_alpha_interval"] < intra["a"]["alpha_ci_high"]
    assert intra["a"]["reading"] == noise.interpretation(intra["a"]["alpha_ci_low"])
    data = np.array([rep["a"].sum(axis=1) / 100 for rep in per_rep])  # replicates × answers
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
    assert intra["a"]["krippendorff_alpha_interval"] == pytest.approx(expected, abs=1e-6)
    assert (intra["a"]["n_units"], intra["a"]["n_replicates"]) == (300, 3)
    changed = np.ptp(data, axis=0) > 0
    assert intra["a"]["changed_rate"] == pytest.approx(changed.mean())
    pairs = np.mean([np.abs(data[i] - data[j]) for i, j in combinations(range(3), 2)], axis=0)
    assert intra["a"]["mean_abs_change"] == pytest.approx(pairs.mean())
    assert intra["a"]["max_abs_change"] == pytest.approx(np.ptp(data, axis=0).max())
    # the design: an answer's score stays put only if no item's award differs between replicates
    same_item = (1 - P_FLIP) ** 3 + P_FLIP ** 3
    assert intra["a"]["changed_rate"] == pytest.approx(1 - same_item ** ITEMS, abs=0.07)
    assert intra["b"]["changed_rate"] == 0 and intra["b"]["mean_abs_change"] == 0
    assert intra["b"]["krippendorff_alpha_interval"] == pytest.approx(1.0)


def test_rubric_item_flips_come_out_as_designed(flipping_judge):
    root, per_rep = flipping_judge
    report = report_of(root, resamples=200)
    items = report.agreement["intra_rater_items"]
    stacked = np.stack([rep["a"] for rep in per_rep])  # replicates × answers × items
    assert items["a"]["n_item_units"] == 300 * ITEMS
    assert items["a"]["flip_rate"] == pytest.approx((np.ptp(stacked, axis=0) > 0).mean())
    assert items["a"]["flip_rate"] == pytest.approx(1 - (1 - P_FLIP) ** 3 - P_FLIP ** 3, abs=0.04)
    assert items["b"]["flip_rate"] == 0
    flips = report.item_flips
    first = flips[(flips["judge"] == "a") & (flips["question_id"] == "q000") & (flips["item"] == 2)].iloc[0]
    assert first["criterion"] == "criterion 2 of task" and first["n_answers"] == 1
    assert first["flip_rate"] == float(np.ptp(stacked[:, 0, 1]) > 0)


def test_page_and_files_show_intra_rater_with_its_reading(flipping_judge, tmp_path):
    root, _ = flipping_judge
    report = report_of(root, resamples=200)
    render.write(report, tmp_path)
    saved = json.loads((tmp_path / "judge_agreement.json").read_text())
    assert saved["intra_rater"]["a"]["krippendorff_alpha_interval"] == pytest.approx(
        report.agreement["intra_rater"]["a"]["krippendorff_alpha_interval"], abs=0)
    page = (tmp_path / "report.html").read_text()
    judge_section = html.unescape(page[page.index('<section id="judge-agreement">'):
                                       page.index('<section id="judge-splits">')])
    assert "Each judge against itself (intra-rater)" in judge_section
    assert "≥ 0.8 reliable, ≥ 0.667 tentative" in judge_section
    alpha = report.agreement["intra_rater"]["a"]["krippendorff_alpha_interval"]
    assert noise.interpretation(alpha) in judge_section
    assert pd.read_csv(tmp_path / "intra_rater.csv").set_index("judge").loc["b", "changed_pct"] == 0


@pytest.mark.parametrize("alpha,reading", [(0.8, "reliable (≥ 0.8)"), (0.95, "reliable (≥ 0.8)"),
                                           (0.667, "tentative (≥ 0.667, < 0.8)"),
                                           (0.7999, "tentative (≥ 0.667, < 0.8)"),
                                           (0.6669, "unreliable (< 0.667)"), (-0.2, "unreliable (< 0.667)"),
                                           (None, "undefined (no variation to agree on)")])
def test_alpha_reading_at_krippendorffs_thresholds(alpha, reading):
    assert noise.interpretation(alpha) == reading


def test_judge_replicates_need_the_same_answer_bytes(tmp_path):
    """Answers that differ between the runs (not served from the cache) are not the same unit."""
    scores = {"a": [0.2, 0.5, 0.9]}
    write_run(tmp_path, "r0", "alpha", scores, rep_j=0, answers=["x", "y", "z"])
    write_run(tmp_path, "r1", "alpha", {"a": [0.3, 0.5, 0.1]}, rep_j=1, answers=["x", "y", "other"])
    intra = report_of(tmp_path, resamples=100).agreement["intra_rater"]["a"]
    assert intra["n_units"] == 2 and intra["max_abs_change"] == pytest.approx(0.1)


# --------------------------------------------------------------------------- decomposition


SD_A, SD_J, T = 0.06, 0.04, 300


def known_noise(root: Path, n_answers: int, n_judges: int, seed: int = 5) -> np.ndarray:
    """Runs of one model: task truth μ_t, answer effect N(0, SD_A), grading effect N(0, SD_J)."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.3, 0.7, T)
    for d in range(n_answers):
        answer = mu + rng.normal(0, SD_A, T)
        for j in range(n_judges):
            score = answer + rng.normal(0, SD_J, T)
            assert score.min() > 0 and score.max() < 1  # no clipping: the variances stay as drawn
            write_run(root, f"d{d}j{j}", "alpha", {"a": list(score)}, rep_d=d, rep_j=j)
    return mu


def test_components_recover_known_task_answer_and_judge_variance(tmp_path):
    mu = known_noise(tmp_path, 3, 3)
    row = report_of(tmp_path, resamples=500).noise[0]
    assert (row["n_distinct_answers"], row["n_distinct_gradings"]) == (3 * T, 9 * T)
    var = row["var_pp2"]
    assert var["judges"] == pytest.approx(1e4 * SD_J ** 2, rel=0.1)
    assert var["answers"] == pytest.approx(1e4 * SD_A ** 2, rel=0.2)
    assert var["tasks"] == pytest.approx(1e4 * mu.var(ddof=1), rel=0.2)
    for source in ("tasks", "answers", "judges"):
        low, high = row["ci_pp2"][source]
        assert low < var[source] < high
    assert row["not_estimable"] == {} and row["negative"] == []


def test_judge_replicates_only_leave_answers_inside_tasks(tmp_path):
    known_noise(tmp_path, 1, 3)
    report = report_of(tmp_path, resamples=200)
    row = report.noise[0]
    assert row["var_pp2"]["answers"] is None and "one distinct answer" in row["not_estimable"]["answers"]
    assert row["var_pp2"]["judges"] == pytest.approx(1e4 * SD_J ** 2, rel=0.1)
    saved = tmp_path / "out"
    render.write(report, saved)
    assert json.loads((saved / "noise.json").read_text())["rows"][0]["var_pp2"]["answers"] is None
    assert (saved / "noise.png").read_bytes()[:4] == b"\x89PNG"


def test_answer_replicates_only_hold_the_judges_inside_answers(tmp_path):
    known_noise(tmp_path, 3, 1)
    row = report_of(tmp_path, resamples=200).noise[0]
    assert row["var_pp2"]["judges"] is None and "graded twice" in row["not_estimable"]["judges"]
    assert row["var_pp2"]["answers"] == pytest.approx(1e4 * (SD_A ** 2 + SD_J ** 2), rel=0.2)


def test_identical_answers_graded_from_the_cache_count_once(tmp_path):
    """Three decoding replicates at t=0.1 came back byte-identical, so the judge cache served the
    first grading to all three; a judge replicate graded them again. Two gradings per answer,
    one answer per task: the old split saw 4 runs, 3 answer sets, and floored the answers' share."""
    rng = np.random.default_rng(2)
    n = 40
    first, second = rng.uniform(0.2, 0.8, n), rng.uniform(0.2, 0.8, n)
    answers = [f"same answer {i}" for i in range(n)]
    for d in range(3):
        write_run(tmp_path, f"d{d}", "alpha", {"a": list(first)}, rep_d=d, answers=answers)
    write_run(tmp_path, "j1", "alpha", {"a": list(second)}, rep_j=1, answers=answers)
    report = report_of(tmp_path, resamples=200)
    row = report.noise[0]
    assert (row["n_runs"], row["n_distinct_answers"], row["n_distinct_gradings"]) == (4, n, 2 * n)
    assert row["var_pp2"]["answers"] is None  # one distinct answer per task: nothing to split
    assert row["var_pp2"]["judges"] == pytest.approx(1e4 * float(np.mean((first - second) ** 2 / 2)))
    # and in agreement: one unit per answer, the judge's two replicates of it, not four
    assert report.agreement["intra_rater"]["a"]["n_units"] == n


def test_a_row_without_replicates_has_no_noise_row(tmp_path):
    write_run(tmp_path, "one", "alpha", {"a": [0.1, 0.2, 0.3]})
    assert report_of(tmp_path, resamples=100).noise == []


# --------------------------------------------------------------------------- gaps


def two_models(root: Path, shift: float, sd_j: float = 0.1, n: int = 50, reps: int = 3,
               models: tuple[str, ...] = ("alpha", "beta")) -> np.ndarray:
    """Each model = alpha + its shift on every task, each graded ``reps`` times with noise N(0, sd_j)."""
    rng = np.random.default_rng(3)
    mu = rng.uniform(0.3, 0.6, n)
    per_model = []
    for i, model in enumerate(models):
        runs = [np.clip(mu + i * shift + rng.normal(0, sd_j, n), 0, 1) for _ in range(reps)]
        for j, scores in enumerate(runs):
            write_run(root, f"{model}{j}", model, {"a": list(scores)}, rep_j=j)
        per_model.append(np.mean(runs, axis=0))
    return np.array(per_model)


@pytest.mark.parametrize("shift,distinguishable", [(0.0, False), (0.15, True)])
def test_a_gap_is_a_paired_t_on_replicate_averaged_tasks(tmp_path, shift, distinguishable):
    """Judge noise counted once: the interval is scipy's paired t over the tasks' replicate means
    (the old nested bootstrap resampled the replicates again, an interval √((3R−2)/R) wider)."""
    averaged = two_models(tmp_path, shift)
    gap = report_of(tmp_path).gaps.iloc[0]
    upper, lower = (averaged[1], averaged[0]) if shift else sorted(averaged, key=lambda v: -v.mean())
    expected = sps.ttest_rel(upper, lower)
    low, high = expected.confidence_interval(0.95)
    assert (gap["ci_low_pp"], gap["gap_pp"], gap["ci_high_pp"]) == pytest.approx(
        (100 * low, 100 * float((upper - lower).mean()), 100 * high))
    assert gap["p_value"] == pytest.approx(expected.pvalue)
    assert bool(gap["distinguishable"]) is distinguishable


def test_gaps_are_holm_adjusted_across_the_leaderboard(tmp_path):
    from statsmodels.stats.multitest import multipletests

    two_models(tmp_path, 0.01, models=("alpha", "beta", "gamma", "delta"))
    gaps = report_of(tmp_path, resamples=200).gaps
    assert len(gaps) == 3
    assert list(gaps["p_holm"]) == pytest.approx(list(multipletests(list(gaps["p_value"]), method="holm")[1]))


# --------------------------------------------------------------------------- splits and drift


def test_judge_splits_rank_the_items_the_panel_disagrees_on(tmp_path):
    pts = {"a": [[25, 25, 0, 0], [25, 0, 0, 0]], "b": [[25, 0, 0, 0], [25, 0, 25, 0]]}
    scores = {k: [sum(p) / 100 for p in v] for k, v in pts.items()}
    write_run(tmp_path, "r", "alpha", scores, points=pts)
    splits = report_of(tmp_path, resamples=100).splits
    assert [(r.question_id, r.item) for r in splits.itertuples()] == [("q000", 2), ("q001", 3)]
    top = splits.iloc[0]
    assert (top["criterion"], top["points_a"], top["points_b"], top["split_rate"]) == \
        ("criterion 2 of task", 25, 0, 1.0)


def test_judge_failures_are_counted_as_parse_or_call_failures(tmp_path):
    out = write_run(tmp_path, "r", "alpha", {"a": [0.1, 0.2, 0.3, 0.4]})
    scores = json.loads((out / "scores.json").read_text())
    for i, reason in ((1, "no_numeric_total"), (2, "http_error"), (3, "empty_reply")):
        scores["tasks"][i]["judges"]["a"] = {"status": "unavailable", "total": None, "score": None, "reason": reason}
    (out / "scores.json").write_text(json.dumps(scores))
    judge = report_of(tmp_path, resamples=100).agreement["judges"]["a"]
    assert (judge["n_calls"], judge["n"], judge["n_parse_failures"], judge["n_call_failures"]) == (4, 1, 2, 1)
    assert judge["unavailable_rate"] == pytest.approx(0.75)


@pytest.mark.parametrize("served_b,prompts_b,drift", [
    ({"a": ["judge-a-0501"]}, "p" * 64, ""),
    ({"a": ["judge-a-0601"]}, "p" * 64, "served model of a (judge-a-0501 vs judge-a-0601)"),
    ({"a": ["judge-a-0501"]}, "q" * 64, "judge prompt digest"),
    ({"a": ["judge-a-0601"]}, "q" * 64, "judge prompt digest; served model of a (judge-a-0501 vs judge-a-0601)"),
])
def test_comparisons_label_judges_whose_served_model_or_prompt_differs(tmp_path, served_b, prompts_b, drift):
    scores = {"a": [0.2, 0.4, 0.6, 0.8]}
    write_run(tmp_path, "cool", "alpha", scores, served={"a": ["judge-a-0501"]})
    write_run(tmp_path, "hot", "alpha", scores, served=served_b, prompts=prompts_b, t=0.7)
    point = report_of(tmp_path, resamples=100).sweeps.set_index("value").loc[0.7]
    assert point["key"] == "decoding.temperature" and point["judge_drift"] == drift  # labelled, still compared


def test_judge_settings_drift_within_a_replicated_row_is_labelled(tmp_path):
    scores = {"a": [0.2, 0.4, 0.6, 0.8]}
    write_run(tmp_path, "r0", "alpha", scores, served={"a": ["judge-a-0501"]})
    write_run(tmp_path, "r1", "alpha", scores, rep_j=1, served={"a": ["judge-a-0601"]})  # the endpoint moved
    write_run(tmp_path, "hot", "alpha", scores, served={"a": ["judge-a-0501"]}, t=0.7)
    report = report_of(tmp_path, resamples=100)
    assert report.sweeps.set_index("value").loc[0.7, "judge_drift"] == \
        "served model of a (judge-a-0501 vs judge-a-0601)"
    assert report.replicates.iloc[0]["judge_drift"] == "served model of a (judge-a-0501 vs judge-a-0601)"


# --------------------------------------------------------------------------- the real offline judge


def test_offline_panel_replicates_move_only_above_temperature_0(tmp_path):
    """judge_panel=offline_panel: at judge temperature 0 the replicates agree exactly (alpha 1, no
    change); at 0.1 the thresholds wobble and the report's alpha equals the package's on the files."""
    import krippendorff

    from wildtrace.runtime.run.execute import run

    for t in (0.0, 0.1):
        for rep in range(3):
            cfg = settings(tmp_path, ["judge_panel=offline_panel", f"judge_panel.temperature={t}",
                                      f"judge_panel.replicate={rep}"])
            cfg.out_dir = str(tmp_path / "runs" / f"t{t}" / f"rep{rep}")
            run(cfg)
    still = report_of(tmp_path / "runs" / "t0.0", resamples=100).agreement["intra_rater"]
    assert set(still) == {"lenient", "balanced", "strict"}
    assert all(v["changed_rate"] == 0 and v["krippendorff_alpha_interval"] == pytest.approx(1.0)
               for v in still.values())
    moving = report_of(tmp_path / "runs" / "t0.1", resamples=100)
    for judge, row in moving.agreement["intra_rater"].items():
        data = [[t["judges"][judge]["score"] for t in json.loads((tmp_path / "runs" / "t0.1" / f"rep{r}" /
                                                                  "scores.json").read_text())["tasks"]]
                for r in range(3)]
        array = np.array([[np.nan if v is None else v for v in rep] for rep in data])
        expected = krippendorff.alpha(reliability_data=array, level_of_measurement="interval")
        assert row["krippendorff_alpha_interval"] == pytest.approx(expected, abs=1e-6)
    assert sum(v["changed_rate"] for v in moving.agreement["intra_rater"].values()) > 0
    assert moving.noise[0]["sd_pp"]["judges"] > 0 and moving.noise[0]["sd_pp"]["answers"] is None


# --------------------------------------------------------------------------- the tour, end to end


@pytest.mark.slow
def test_offline_tour_end_to_end(tmp_path):
    """`python -m wildtrace -m judge_panel=offline_panel judge_panel.replicate=0,1,2`, then
    `python -m wildtrace.report`: intra-rater alpha of each judge in judge_agreement.json (as the
    package computes it from the runs' files), the page's reading, noise.json, the run's metrics."""
    import krippendorff
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = tmp_path / "outputs"
    sweep = subprocess.run([sys.executable, "-m", "wildtrace", "-m", "judge_panel=offline_panel",
                            "judge_panel.replicate=0,1,2", f"root={root}"], capture_output=True, text=True, env=env,
                           timeout=600, cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "wildtrace.report", f"root={root}"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(next(line for line in proc.stdout.splitlines() if line.startswith("report: ")).split(": ", 1)[1]).parent
    intra = json.loads((out / "judge_agreement.json").read_text())["intra_rater"]
    assert set(intra) == {"lenient", "balanced", "strict"}
    run_dirs = sorted(p for p in (root / "multirun").glob("*/*/[0-9]*") if p.is_dir())
    assert len(run_dirs) == 3
    for judge, row in intra.items():
        by_rep = {}
        for d in run_dirs:
            rep = json.loads((d / "config.json").read_text())["judge_panel"]["replicate"]
            tasks = json.loads((d / "scores.json").read_text())["tasks"]
            by_rep[rep] = [t["judges"][judge]["score"] for t in sorted(tasks, key=lambda t: t["question_id"])]
        array = np.array([[np.nan if v is None else v for v in by_rep[r]] for r in sorted(by_rep)], dtype=float)
        expected = krippendorff.alpha(reliability_data=array, level_of_measurement="interval")
        assert row["krippendorff_alpha_interval"] == pytest.approx(expected, abs=1e-6)
        assert row["n_replicates"] == 3
    page = html.unescape((out / "report.html").read_text())
    for row in intra.values():
        assert row["reading"] == noise.interpretation(row["alpha_ci_low"]) and row["reading"] in page
    rows = json.loads((out / "noise.json").read_text())["rows"]
    assert len(rows) == 1 and set(rows[0]["var_pp2"]) == {"tasks", "answers", "judges"}
    assert rows[0]["n_distinct_gradings"] == 30 and rows[0]["n_distinct_answers"] == 10
    assert rows[0]["var_pp2"]["answers"] is None and rows[0]["var_pp2"]["judges"] > 0
    run_id = next(line for line in proc.stdout.splitlines() if line.startswith("mlflow: run ")).split()[2]
    metrics = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}").get_run(run_id).data.metrics
    for judge, row in intra.items():
        assert metrics[f"intra_rater/{judge}/krippendorff_alpha_interval"] == \
            pytest.approx(row["krippendorff_alpha_interval"], abs=1e-4)
        assert metrics[f"intra_rater/{judge}/n_units"] == 10


def test_report_metrics_are_legal_readable_and_rounded(flipping_judge):
    from mlflow.utils.validation import validate_param_and_metric_name

    from wildtrace.report.publish import report_metrics

    root, _ = flipping_judge
    report = report_of(root, resamples=200)
    metrics = report_metrics(report)
    alpha = report.agreement["intra_rater"]["a"]["krippendorff_alpha_interval"]
    assert metrics["intra_rater/a/krippendorff_alpha_interval"] == round(alpha, 4) != alpha
    assert metrics["intra_rater/a/n_units"] == 300
    assert not any(k.startswith("noise") for k in metrics)  # per-row figures are the run's tables, not label keys
    assert all(validate_param_and_metric_name(k) for k in metrics)
