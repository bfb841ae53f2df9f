"""The report over scripted run directories: its numbers are the runs' own, computed here by hand.

Run directories are written in the shape a job writes (config.json, run_stats.json,
scores.json): two models, a replicate, an ablation, a one-setting change and a duplicate.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from wildtrace.report import render, sources
from wildtrace.report.statistics.stats import Bootstrap
from wildtrace.report.assemble import build

QIDS = [f"q{i}" for i in range(1, 9)]
PARADIGM = dict(zip(QIDS, ["causal", "causal", "temporal", "temporal", "causal", "temporal", "causal", "temporal"],
                    strict=True))
TIER = dict(zip(QIDS, ["T1", "T1", "T1", "T1", "T2", "T2", "T2", "T2"], strict=True))
PANEL = {"a": "judge-a", "b": "judge-b", "c": "judge-c"}


def _config(model: str, route: str, panel: str, judges: list[str], t: float, rep_d: int, rep_j: int,
            out_dir: str) -> dict:
    return {
        "model": {"name": model, "provider": "openai", "route": route, "base_url": "http://x/v1", "api_key_env": "K",
                  "send_temperature": True, "max_concurrency": 4, "timeout_s": 900.0, "extra_body": {},
                  "reasoning": False, "budget_field": "max_tokens", "caps": {"en": 2850000, "cjk": 850000}},
        "decoding": {"temperature": t, "max_tokens": None, "replicate": rep_d},
        "judge_panel": {"name": panel, "temperature": 0.1, "max_tokens": 16384, "replicate": rep_j,
                        "judges": {k: {"name": PANEL[k], "route": PANEL[k]} for k in judges}},
        "dataset": {"name": "synthetic", "tasks": f"{out_dir}/tasks.json", "corpus": f"{out_dir}/corpus",
                    "limit": None, "ids": None},
        "stage": "all", "out_dir": out_dir, "root": str(Path(out_dir).parent), "progress": False,
        "cache": {"dir": "/c", "enabled": True}, "mlflow": {"enabled": True, "tracking_uri": "sqlite:///x"},
    }


def write_run(root: Path, name: str, model: str, judge_scores: dict[str, list[float | None]],
              status: dict[str, str] | None = None, panel: str = "trio", t: float = 0.1, rep_d: int = 0,
              rep_j: int = 0, route: str | None = None, date: str = "2026-12-01T10:00:00+00:00") -> Path:
    """One run directory; task score = mean of the judges that scored it (None = unavailable)."""
    out = root / name
    out.mkdir(parents=True)
    status = status or {}
    rows = []
    for i, qid in enumerate(QIDS):
        verdicts = {k: v[i] for k, v in judge_scores.items()}
        answered = status.get(qid, "answered") == "answered"
        available = [s for s in verdicts.values() if s is not None] if answered else []
        score = sum(available) / len(available) if available else None
        task_status = status.get(qid) or ("scored" if available else "unscored")
        judges = {k: ({"status": "scored", "total": 100 * s, "score": s, "reason": None} if s is not None else
                      {"status": "unavailable", "total": None, "score": None, "reason": "no_total"})
                  for k, s in verdicts.items()} if answered else {}
        rows.append({"question_id": qid, "status": task_status, "score": score, "judges": judges,
                     "paradigm": PARADIGM[qid], "context_tier": TIER[qid]})
    scored = [r["score"] for r in rows if r["status"] == "scored"]
    scores = {"overall": 100 * sum(scored) / len(rows), "scored": 100 * sum(scored) / len(scored) if scored else None,
              "n_total": len(rows), "n_scored": len(scored), "tasks": rows}
    stats = {"run_date": date, "effective_max_tokens": 8192, "git_commit": "abc123",
             "dataset": {"tasks_sha256": "f" * 64, "release_version": "synthetic-1"}}
    config = _config(model, route or f"{model}-route", panel, list(judge_scores), t, rep_d, rep_j, str(out))
    for file, data in (("config.json", config), ("run_stats.json", stats), ("scores.json", scores)):
        (out / file).write_text(json.dumps(data), encoding="utf-8")
    return out


A1 = {"a": [0.2, 0.5, 0.9, 0.0, 0.4, 0.6, 1.0, 0.3], "b": [0.3, 0.5, 0.7, 0.1, None, 0.5, 0.9, 0.3],
      "c": [0.1, 0.6, 0.8, 0.0, 0.5, 0.7, 1.0, 0.2]}
A2 = {"a": [0.3, 0.5, 0.8, 0.1, 0.4, 0.6, 0.9, 0.4], "b": [0.3, 0.4, 0.7, 0.1, 0.3, 0.5, 0.9, 0.3],
      "c": [0.2, 0.6, 0.8, 0.0, 0.5, 0.8, 1.0, 0.2]}
B = {"a": [0.1, 0.2, 0.3, 0.0, 0.2, 0.1, 0.5, 0.0], "b": [0.0, 0.3, 0.2, 0.1, 0.2, 0.2, 0.4, 0.1],
     "c": [0.1, 0.2, 0.4, 0.0, 0.1, 0.2, 0.6, 0.0]}
B_STATUS = {"q7": "out_of_context_scope", "q8": "failed"}


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    write_run(tmp_path, "a-rep0", "alpha", A1)
    write_run(tmp_path, "a-rep1", "alpha", A2, rep_j=1, date="2026-12-01T11:00:00+00:00")
    write_run(tmp_path, "a-only-a", "alpha", {"a": A1["a"]}, panel="trio_only_a")  # the ablation
    write_run(tmp_path, "a-hot", "alpha", A2, t=0.7)  # one setting changed
    write_run(tmp_path, "b", "beta", B, status=B_STATUS)
    return tmp_path


def own(path: Path) -> dict:
    return json.loads((path / "scores.json").read_text())


def report_of(root: Path, pattern: str = "*", **boot):
    return build(sources.from_run_dirs([str(root / pattern)]), Bootstrap(**boot) if boot else Bootstrap())


def row(board: pd.DataFrame, needle: str) -> pd.Series:
    hits = board[board["model"].str.contains(needle, regex=False)]
    assert len(hits) == 1, (needle, list(board["model"]))
    return hits.iloc[0]


def test_leaderboard_equals_the_runs_own_numbers(runs_root):
    report = report_of(runs_root)
    board = report.leaderboard
    assert list(board.columns[:6]) == ["model", "route", "panel", "release", "run_date", "overall"]
    assert len(board) == 4  # alpha (2 replicates), alpha ablation, alpha t=0.7, beta
    pair = row(board, "alpha · panel=trio (a,b,c)")
    assert pair["n_runs"] == 2
    assert pair["overall"] == pytest.approx(
        (own(runs_root / "a-rep0")["overall"] + own(runs_root / "a-rep1")["overall"]) / 2)
    assert pair["scored"] == pytest.approx(
        (own(runs_root / "a-rep0")["scored"] + own(runs_root / "a-rep1")["scored"]) / 2)
    beta = row(board, "beta")
    assert beta["overall"] == pytest.approx(own(runs_root / "b")["overall"])
    assert beta["scored"] == pytest.approx(own(runs_root / "b")["scored"])
    assert (beta["n_scored"], beta["n_out_of_context"], beta["n_failed"], beta["n_tasks"]) == (6, 1, 1, 8)
    assert beta["scored"] > beta["overall"]  # zero-filled failures only pull the All view down
    ablation = row(board, "trio_only_a")
    assert ablation["overall"] == pytest.approx(100 * sum(A1["a"]) / 8)
    assert list(board["overall"]) == sorted(board["overall"], reverse=True)
    for _, r in board.iterrows():
        assert r["overall_ci_low"] <= r["overall"] <= r["overall_ci_high"]
        assert r["scored_ci_low"] <= r["scored"] <= r["scored_ci_high"]


def test_single_run_interval_is_a_percentile_bootstrap_over_tasks(runs_root):
    beta = row(report_of(runs_root, resamples=4000, seed=2).leaderboard, "beta")
    per_task = [r["score"] or 0.0 for r in own(runs_root / "b")["tasks"]]
    rng = np.random.default_rng(2)  # the documented method, written out: 4000 resamples of the 8 tasks
    draws = np.array(per_task)[rng.integers(0, 8, size=(4000, 8))].mean(axis=1)
    assert beta["overall_ci_low"] == pytest.approx(100 * np.percentile(draws, 2.5))
    assert beta["overall_ci_high"] == pytest.approx(100 * np.percentile(draws, 97.5))


def test_identical_runs_count_once(runs_root):
    shutil.copytree(runs_root / "b", runs_root / "b-rerun")  # a fully cached rerun: same outcomes
    config = json.loads((runs_root / "b-rerun" / "config.json").read_text())
    config["out_dir"] = str(runs_root / "b-rerun")
    (runs_root / "b-rerun" / "config.json").write_text(json.dumps(config))
    report = report_of(runs_root)
    assert report.n_runs_read == 6
    assert report.duplicates == {str(runs_root / "b-rerun"): str(runs_root / "b")}
    assert row(report.leaderboard, "beta")["n_runs"] == 1
    assert report.provenance.set_index("run_id").loc[str(runs_root / "b"), "duplicates"] == str(runs_root / "b-rerun")


def test_replicates_known_spread(tmp_path):
    base = [0.5] * 8
    for rep, shift in enumerate((-0.1, 0.0, 0.1)):  # overalls 40, 50, 60
        write_run(tmp_path, f"r{rep}", "alpha", {"a": [s + shift for s in base]}, rep_j=rep)
    report = report_of(tmp_path)
    summary = report.replicates.iloc[0]
    assert summary["replicate"] == "judge_panel"
    assert (summary["n_runs"], summary["overall_mean"], summary["overall_sd"]) == (
        3, pytest.approx(50), pytest.approx(10))
    assert (summary["overall_min"], summary["overall_max"], summary["overall_range"]) == pytest.approx((40, 60, 20))
    assert summary["task_sd_mean"] == pytest.approx(0.1)
    assert summary["task_range_max"] == pytest.approx(0.2)
    tasks = report.replicate_tasks
    assert len(tasks) == 8 and tasks["sd"].tolist() == pytest.approx([0.1] * 8)
    assert report.leaderboard.iloc[0]["overall_sd"] == pytest.approx(10)


def test_sweep_points_are_paired_t_tests_on_replicate_averaged_tasks(runs_root):
    """The temperature sweep's hot point against the baseline: the per-task difference of
    replicate-averaged scores, its interval and p from scipy's paired t (no second resampling)."""
    sweeps = report_of(runs_root).sweeps
    assert set(sweeps["key"]) == {"decoding.temperature"}  # the ablation is not a sweep, beta is another model
    hot = sweeps[sweeps["value"] == 0.7].iloc[0]
    assert sweeps[sweeps["value"] == 0.1].iloc[0]["reference"]
    per_task = lambda scores: np.array([r["score"] or 0.0 for r in scores["tasks"]])  # noqa: E731
    a = (per_task(own(runs_root / "a-rep0")) + per_task(own(runs_root / "a-rep1"))) / 2  # replicates averaged
    b = per_task(own(runs_root / "a-hot"))
    expected = sps.ttest_rel(b, a)
    low, high = expected.confidence_interval(0.95)
    assert hot["diff_pp"] == pytest.approx(round(100 * float(np.mean(b - a)), 1))
    assert (hot["diff_ci_low_pp"], hot["diff_ci_high_pp"]) == pytest.approx((round(100 * low, 1), round(100 * high, 1)))
    assert hot["p_value"] == pytest.approx(round(float(expected.pvalue), 4))
    assert hot["n_tasks"] == 8 and hot["small_n"]


def test_the_ablation_is_recognised_with_its_dropped_judges(runs_root):
    ablations = report_of(runs_root).ablations
    assert len(ablations) == 1
    only = ablations.iloc[0]
    assert (only["model"], only["dropped"], only["variant"]) == ("alpha", "b,c", "a")
    assert only["overall_pct"] == pytest.approx(round(100 * sum(A1["a"]) / 8, 1))


def test_matched_panel_uses_tasks_every_row_scored(runs_root):
    matched = report_of(runs_root).matched.set_index("model")
    assert set(matched["n"]) == {6}  # beta did not score q7 (out of context) and q8 (failed)
    beta_tasks = {r["question_id"]: r["score"] for r in own(runs_root / "b")["tasks"]}
    expected = 100 * np.mean([beta_tasks[q] for q in QIDS[:6]])
    assert matched.loc[next(m for m in matched.index if "beta" in m), "matched"] == pytest.approx(expected)


def test_paradigm_and_tier_views(runs_root):
    report = report_of(runs_root)
    tiers = report.tiers[report.tiers["model"].str.contains("beta")].set_index("context_tier")
    beta = {r["question_id"]: r for r in own(runs_root / "b")["tasks"]}
    t2 = [beta[q]["score"] or 0.0 for q in QIDS[4:]]
    assert tiers.loc["T2", "all"] == pytest.approx(100 * np.mean(t2))
    assert tiers.loc["T2", "scored"] == pytest.approx(100 * np.mean([beta[q]["score"] for q in ("q5", "q6")]))
    paradigms = report.paradigms
    assert set(paradigms["paradigm"]) == {"causal", "temporal"} and len(paradigms) == 8


def test_judge_agreement_is_over_distinct_answers(runs_root):
    """A unit is one answer: alpha's judge replicates (a-rep0, a-rep1) are averaged per judge and
    the ablation's cached copy of a-rep0's grading counts once (the old unit, a run's task,
    counted the same answer three times: 38 units, 29 a~b pairs)."""
    agreement = report_of(runs_root).agreement

    def mean2(x, y):
        known = [v for v in (x, y) if v is not None]
        return sum(known) / len(known) if known else None

    answers = {"alpha t=0.1": {k: [mean2(x, y) for x, y in zip(A1[k], A2[k], strict=True)] for k in "abc"},
               "alpha t=0.7": A2, "beta": B}
    units = []
    for name, judges in answers.items():
        for i, qid in enumerate(QIDS):
            if name == "beta" and qid in B_STATUS:
                continue
            units.append({k: judges[k][i] for k in "abc"})
    frame = pd.DataFrame(units, dtype=float)
    both = frame[["a", "b"]].dropna()
    pair = agreement["pairs"]["a~b"]
    assert len(both) == 22
    assert pair["pearson"] == pytest.approx(sps.pearsonr(both["a"], both["b"]).statistic)
    assert pair["spearman"] == pytest.approx(sps.spearmanr(both["a"], both["b"]).statistic)
    assert pair["mad"] == pytest.approx(float((both["a"] - both["b"]).abs().mean()))
    judge_b = agreement["judges"]["b"]
    assert judge_b["unavailable_rate"] == pytest.approx(1 / 30)
    panel = frame.mean(axis=1)
    assert judge_b["bias"] == pytest.approx(float((frame["b"] - panel).dropna().mean()))
    import krippendorff

    expected = krippendorff.alpha(reliability_data=frame[list("abc")].T.to_numpy(), level_of_measurement="interval")
    assert agreement["krippendorff_alpha_interval"] == pytest.approx(expected)
    assert agreement["n_units"] == 22
    low, high = agreement["krippendorff_alpha_ci"]
    assert low < agreement["krippendorff_alpha_interval"] < high
    # ICC(3,k) by the two-way mixed consistency formula, complete units only
    m = frame.dropna().to_numpy()
    n, k = m.shape
    ms_rows = k * ((m.mean(axis=1) - m.mean()) ** 2).sum() / (n - 1)
    resid = m - m.mean(axis=1, keepdims=True) - m.mean(axis=0, keepdims=True) + m.mean()
    ms_err = (resid ** 2).sum() / ((n - 1) * (k - 1))
    assert agreement["icc_3k"] == pytest.approx((ms_rows - ms_err) / ms_rows)


def test_runs_without_scores_are_skipped(runs_root):
    answer_only = runs_root / "answer-only"
    answer_only.mkdir()
    (answer_only / "config.json").write_text("{}")
    (runs_root / "broken").mkdir()
    (runs_root / "broken" / "config.json").write_text("{not json")
    (runs_root / "broken" / "scores.json").write_text("[]")
    bad_rows = write_run(runs_root, "bad-rows", "gamma", {"a": A1["a"]})
    scores = json.loads((bad_rows / "scores.json").read_text())
    scores["tasks"][3]["judges"] = ["not", "a", "mapping"]
    (bad_rows / "scores.json").write_text(json.dumps(scores))
    bad_score = write_run(runs_root, "bad-score", "epsilon", {"a": A1["a"]})
    (bad_score / "scores.json").write_text(
        (bad_score / "scores.json").read_text().replace('"score": 0.2', '"score": "0.2"'))
    bad_config = write_run(runs_root, "bad-config", "delta", {"a": A1["a"]})
    (bad_config / "config.json").write_text(json.dumps({"model": "x"}))
    assert len(sources.from_run_dirs([str(runs_root / "*")])) == 5


def test_markdown_table_golden():
    frame = pd.DataFrame([{"model": "a|b", "overall": 28.25, "n": 10, "sd": None, "tiny": 0.001234}])
    assert render.markdown(frame) == ("| model | overall | n | sd | tiny |\n|---|---|---|---|---|\n"
                                      "| a\\|b | 28.2 | 10 | — | 0.0012 |\n")


@pytest.mark.parametrize(("column", "value", "shown"), [
    ("overall_pct", 28.2549, 28.3), ("diff_ci_low_pp", -2.0449, -2.0), ("mean_spread", 28.5714, 28.6),
    ("points_strict", 5.7143, 5.7), ("p_value", 0.0123456, 0.0123), ("tau", 0.333333, 0.3333),
    ("cost_usd", 0.12345678, 0.1235), ("var_task_pp2", 12.3456, 12.35)])
def test_every_table_rounds_by_the_unit_in_its_column_name(column, value, shown):
    assert render.rounded(pd.DataFrame({column: [value, None]}))[column].tolist() == [shown, None]


def _with_max_tokens(run: Path, max_tokens: int) -> Path:
    """The run as one sent at ``decoding.max_tokens=max_tokens`` (its config and the budget it records)."""
    config = json.loads((run / "config.json").read_text())
    config["decoding"]["max_tokens"] = max_tokens
    (run / "config.json").write_text(json.dumps(config))
    stats = json.loads((run / "run_stats.json").read_text())
    stats["effective_max_tokens"] = max_tokens
    (run / "run_stats.json").write_text(json.dumps(stats))
    return run


def test_sweeps_csv_writes_each_value_as_the_config_has_it(tmp_path):
    """A max_tokens sweep beside a temperature sweep: sweeps.csv's value column holds 64 and 0.4,
    not the 64.0 a column of mixed numbers would make."""
    _with_max_tokens(write_run(tmp_path / "runs", "mt64", "alpha", {"a": [0.1] * 8}), 64)
    write_run(tmp_path / "runs", "t04", "alpha", {"a": [0.2] * 8}, t=0.4)
    write_run(tmp_path / "runs", "default", "alpha", {"a": [0.3] * 8})
    render.write(report_of(tmp_path / "runs"), tmp_path / "report")
    values = pd.read_csv(tmp_path / "report" / "sweeps.csv", dtype=str).set_index("key")["value"]
    assert sorted(values["decoding.max_tokens"]) == ["64", "8192"]
    assert sorted(values["decoding.temperature"]) == ["0.1", "0.4"]


def test_files_and_a_self_contained_page(runs_root, tmp_path):
    report = report_of(runs_root)
    out = tmp_path / "report"
    written = render.write(report, out)
    names = {p.name for p in written}
    assert {"leaderboard.csv", "leaderboard.md", "judge_agreement.json", "report.html", "leaderboard.png",
            "tiers.png", "judge_agreement.png", "noise.png", "noise.json", "sweeps.csv", "ablations.csv",
            "reruns.csv", "baseline.csv", "provenance.csv"} <= names
    csv = pd.read_csv(out / "leaderboard.csv")
    assert csv["overall"].tolist() == pytest.approx(report.leaderboard["overall"].round(1).tolist())
    for name in names:  # no unrounded float in any table: at most 4 decimals
        if name.endswith(".csv"):
            text = (out / name).read_text()
            assert not re.search(r"\d\.\d{5,}", text), name
    md = (out / "leaderboard.md").read_text()
    assert "Matched panel — robustness check (spec §5), not the headline" in md
    assert md.index("# WildTrace leaderboard") < md.index("Matched panel")
    page = (out / "report.html").read_text()
    for section in render.SECTIONS:
        assert f'<section id="{section}">' in page and f'<a href="#{section}">' in page  # the contents list
    assert page.index('id="leaderboard"') < page.index('id="sweeps"') < page.index('id="ablations"')
    assert page.count('src="data:image/png;base64,') == 5  # leaderboard, one sweep, noise, tiers, agreement
    assert "http://" not in page.replace("http://x/v1", "") and "https://" not in page
    assert "<script" not in page and "<link" not in page
    alpha = json.loads((out / "judge_agreement.json").read_text())["krippendorff_alpha_interval"]
    assert alpha == pytest.approx(report.agreement["krippendorff_alpha_interval"])


@pytest.mark.parametrize("runs,labels", [
    ([("alpha", "trio", "abc"), ("beta", "trio", "abc")], {"alpha · panel=trio (a,b,c)", "beta · panel=trio (a,b,c)"}),
    ([("alpha", "trio", "abc"), ("alpha", "duo", "ab")], {"alpha · panel=trio (a,b,c)", "alpha · panel=duo (a,b)"}),
    ([("alpha", "offline_panel", "abc"), ("alpha", "offline_panel", "ab")],
     {"alpha · without balanced · without lenient · without strict · with a · with b · with c",
      "alpha · without balanced · without lenient · without strict · with a · with b"}),
])
def test_labels_are_the_points_own_settings_whatever_else_is_read(tmp_path, runs, labels):
    for i, (model, panel, judges) in enumerate(runs):
        write_run(tmp_path, f"r{i}", model, {k: A1[k] for k in judges}, panel=panel)
    assert set(report_of(tmp_path).leaderboard["model"]) == labels
    for i in range(len(runs)):  # each point alone gets the same label
        assert report_of(tmp_path, f"r{i}").leaderboard["model"].iloc[0] in labels


def test_a_stopped_run_is_zero_filled_to_the_datasets_task_count(tmp_path, caplog):
    """The run finished 8 of the dataset's 16 tasks: the All view is its sum over 16 (the spec's
    All view), not over the 8 it reached; the Scored view is unchanged."""
    out = write_run(tmp_path, "stopped", "alpha", A2)
    stats = json.loads((out / "run_stats.json").read_text())
    stats["dataset"]["n_tasks"] = 16
    (out / "run_stats.json").write_text(json.dumps(stats))
    with caplog.at_level("WARNING"):
        report = report_of(tmp_path)
    board = report.leaderboard.iloc[0]
    per_task = [np.mean([A2[k][i] for k in "abc"]) for i in range(8)]
    assert board["overall"] == pytest.approx(100 * sum(per_task) / 16)
    assert board["scored"] == pytest.approx(100 * np.mean(per_task))
    assert (board["n_tasks"], board["n_not_reached"]) == (16, 8)
    assert report.baseline.iloc[0]["overall_pct"] == pytest.approx(round(100 * sum(per_task) / 16, 1))
    assert "holds 8 of the dataset's 16 tasks" in caplog.text


def test_tasks_every_judge_failed_on_are_counted_and_flagged(tmp_path):
    write_run(tmp_path, "r", "alpha", {"a": [0.5, None, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
                                       "b": [0.5, None, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]})
    board = report_of(tmp_path).leaderboard.iloc[0]
    assert board["n_unscored"] == 1 and board["overall"] == pytest.approx(100 * 3.5 / 8)


def _with_responses(out: Path, finish: list[str], lengths: list[int], tokens: list[int | None]) -> None:
    rows = [{"question_id": q, "status": "answered", "response": "x" * n, "finish_reason": f,
             "usage": {"completion_tokens": t, "reasoning_tokens": None}}
            for q, f, n, t in zip(QIDS, finish, lengths, tokens, strict=True)]
    (out / "responses.json").write_text(json.dumps(rows), encoding="utf-8")


def test_a_budget_sweep_shows_what_the_budget_cut(tmp_path):
    """max_tokens 64 cut 3 answers (each provider's spelling of it), 8192 none; one answer at the
    budget point is past the 5,000 characters the judge sees."""
    small = _with_max_tokens(write_run(tmp_path, "mt64", "alpha", {"a": [0.1] * 8}), 64)
    _with_responses(small, ["length", "max_tokens", "MAX_TOKENS", "stop", "stop", "stop", "stop", "stop"],
                    [100] * 8, [64, 64, 64, 10, 10, 10, 10, 10])
    full = write_run(tmp_path, "mt-default", "alpha", {"a": [0.3] * 8})
    _with_responses(full, ["stop"] * 8, [100] * 7 + [5001], [100] * 8)
    sweeps = report_of(tmp_path).sweeps.set_index("value")
    assert list(sweeps.index) == [64, 8192] and sweeps.loc[8192, "reference"]
    assert (sweeps.loc[64, "truncated_pct"], sweeps.loc[8192, "truncated_pct"]) == (37.5, 0.0)
    assert (sweeps.loc[64, "over_judge_limit_pct"], sweeps.loc[8192, "over_judge_limit_pct"]) == (0.0, 12.5)
    assert sweeps.loc[64, "mean_output_tokens"] == pytest.approx(round((3 * 64 + 5 * 10) / 8, 1))
    assert sweeps.loc[64, "diff_pp"] == pytest.approx(-20.0)
    assert sweeps.loc[64, "key"] == "decoding.max_tokens"


def test_power_columns_are_the_paired_t_power_of_the_comparison(tmp_path):
    from statsmodels.stats.power import TTestPower

    write_run(tmp_path, "cool", "alpha", A1)
    write_run(tmp_path, "hot", "alpha", A2, t=0.7)
    hot = report_of(tmp_path).sweeps.set_index("value").loc[0.7]
    per_task = lambda judges: np.array([np.mean([v for v in (judges[k][i] for k in "abc") if v is not None])  # noqa: E731
                                        for i in range(8)])
    sd = float(np.std(per_task(A2) - per_task(A1), ddof=1))
    power = TTestPower().power(effect_size=hot["detectable_pp"] / 100 / sd, nobs=8, alpha=0.05)
    assert power == pytest.approx(0.8, abs=0.02)  # detectable_pp is rounded to 0.1 pp
    needed = TTestPower().solve_power(effect_size=0.05 / sd, power=0.8, alpha=0.05)
    assert abs(hot["tasks_for_5pp"] - needed) <= 2


def test_per_language_breakdown_has_n_and_a_t_interval(tmp_path):
    out = write_run(tmp_path, "r", "alpha", {"a": [0.1, 0.3, 0.5, 0.7, 0.2, 0.4, 0.6, 0.8]})
    kinds = ["en", "en", "en", "cjk", "cjk", "cjk", "en", "cjk"]
    (out / "responses.json").write_text(json.dumps([
        {"question_id": q, "status": "answered", "response": "x", "caps": {"cap_kind": k}}
        for q, k in zip(QIDS, kinds, strict=True)]))
    table = report_of(tmp_path).languages.set_index("language")
    chinese = np.array([0.7, 0.2, 0.4, 0.8])
    low, high = sps.t.interval(0.95, 3, loc=chinese.mean(), scale=sps.sem(chinese))
    assert table.loc["Chinese", "n"] == 4 and table.loc["English", "n"] == 4
    assert table.loc["Chinese", ["all_pct", "ci_low_pct", "ci_high_pct"]].tolist() == pytest.approx(
        [100 * chinese.mean(), 100 * low, 100 * high])


def test_help_describes_every_key_of_the_reports_schema():
    """`python -m wildtrace.report --help` lists each key of ReportConfig with what it does, and no other."""
    import dataclasses
    import typing

    import yaml

    from wildtrace.report.app import ReportConfig

    def leaves(cls, prefix=""):
        for name, kind in typing.get_type_hints(cls).items():
            if dataclasses.is_dataclass(kind):
                yield from leaves(kind, f"{prefix}{name}.")
            else:
                yield prefix + name

    conf = Path(__file__).resolve().parents[2] / "conf"
    template = yaml.safe_load((conf / "report.yaml").read_text())["hydra"]["help"]["template"]
    section = template.split("== The report's keys", 1)[1].split("== Config ==", 1)[0]
    listed = {line.split()[0] for line in section.splitlines()[1:] if line and not line.startswith(" ")}
    assert listed == set(leaves(ReportConfig))


def test_a_differences_variance_is_split_into_replicate_noise_and_the_rest(tmp_path):
    """Both points graded twice: the replicate noise of the per-task difference is, per task, each
    side's variance of its two gradings over 2; its share of the differences' sample variance."""
    rng = np.random.default_rng(9)
    mu = rng.uniform(0.2, 0.8, 8)
    sides = {}
    for t, name in ((0.1, "cool"), (0.7, "hot")):
        runs = [np.clip(mu + (0.05 if t == 0.7 else 0) + rng.normal(0, 0.05, 8), 0, 1) for _ in range(2)]
        for j, scores in enumerate(runs):
            write_run(tmp_path, f"{name}{j}", "alpha", {"a": list(scores)}, t=t, rep_j=j)
        sides[name] = np.array(runs)
    hot = report_of(tmp_path).sweeps.set_index("value").loc[0.7]
    noise = sum(sides[k].var(axis=0, ddof=1).mean() / 2 for k in sides)
    diff = sides["hot"].mean(axis=0) - sides["cool"].mean(axis=0)
    assert hot["diff_noise_share_pct"] == pytest.approx(round(100 * noise / diff.var(ddof=1), 1))


def test_the_report_reads_the_swept_keys_tag_tracking_writes():
    from wildtrace.tracking.runs.parent import SWEEP_KEYS_TAG

    assert sources.SWEPT_TAG == SWEEP_KEYS_TAG
    assert sources.swept_keys(["judge_panel=offline_panel", "decoding.temperature=0.1,0.4", "root=/x",
                               "decoding.max_tokens=range(64,256,64)"]) == ["decoding.max_tokens",
                                                                           "decoding.temperature"]
