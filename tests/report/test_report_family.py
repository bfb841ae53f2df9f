"""The judge-family check (family.csv, #judge-family), recomputed here from the judges' own scores:
each judge's offset against the other judges, same-family contestants against the others, a one-sample
t over tasks (scipy), Holm across judges (statsmodels), and the ranks without the judge (scipy rankdata)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from test_report import QIDS, write_run

from wildtrace.report import render, sources
from wildtrace.report.assemble import build
from wildtrace.report.family import HOW_TO

JUDGE_FAMILY = {"a": "qwen", "b": "claude", "c": "gemini"}
#: model → (family, per judge its 8 task scores); judge a adds 0.15 to the qwen contestants.
RNG = np.random.default_rng(4)
BASE = {m: RNG.uniform(0.1, 0.7, len(QIDS)) for m in ("qwen-x", "qwen-y", "gpt-z", "gemini-w")}
FAMILY = {"qwen-x": "qwen", "qwen-y": "qwen", "gpt-z": "gpt", "gemini-w": "gemini"}


def scores_of(model: str) -> dict[str, list[float | None]]:
    base = BASE[model]
    noise = {k: RNG.normal(0, 0.05, len(QIDS)) for k in "abc"}
    out: dict[str, list[float | None]] = {
        k: list(np.clip(base + noise[k] + (0.15 if k == "a" and FAMILY[model] == "qwen" else 0.0), 0, 1))
        for k in "abc"}
    if model == "gpt-z":
        out["b"][2] = None  # an unavailable verdict: the others' mean is c alone there
    return out


def write(root: Path, families: bool = True) -> dict[str, dict[str, list[float | None]]]:
    written = {}
    for model in BASE:
        written[model] = scores_of(model)
        out = write_run(root, model, model, written[model])
        config = json.loads((out / "config.json").read_text())
        if families:
            config["model"]["family"] = FAMILY[model]
            for key, spec in config["judge_panel"]["judges"].items():
                spec["family"] = JUDGE_FAMILY[key]
        (out / "config.json").write_text(json.dumps(config))
    return written


def by_hand(written: dict, judge: str) -> np.ndarray:
    """Per task: judge's offset (its score − the other judges' mean) on its family's contestants,
    averaged, minus the same on the others."""
    def offset(model: str) -> np.ndarray:
        own = np.array([np.nan if v is None else v for v in written[model][judge]], dtype=float)
        others = np.array([[np.nan if v is None else v for v in written[model][k]] for k in "abc" if k != judge])
        return own - np.nanmean(others, axis=0)
    same = [offset(m) for m in BASE if FAMILY[m] == JUDGE_FAMILY[judge]]
    other = [offset(m) for m in BASE if FAMILY[m] != JUDGE_FAMILY[judge]]
    return np.mean(same, axis=0) - np.mean(other, axis=0)


def test_family_bias_is_the_judges_offset_on_its_family_against_the_others(tmp_path):
    written = write(tmp_path)
    report = build(sources.from_run_dirs([str(tmp_path / "*")]))
    table = report.family.set_index("judge")
    assert list(table.index) == ["a", "b", "c"]
    raw = []
    for judge in ("a", "c"):
        d = by_hand(written, judge)
        test = sps.ttest_1samp(d, 0.0)
        ci = test.confidence_interval(0.95)
        row = table.loc[judge]
        assert row["family_bias_pp"] == pytest.approx(100 * d.mean())
        assert (row["ci_low_pp"], row["ci_high_pp"]) == (pytest.approx(100 * ci.low), pytest.approx(100 * ci.high))
        assert row["p_value"] == pytest.approx(test.pvalue)
        assert row["n_tasks"] == len(QIDS) and bool(row["small_n"])
        raw.append(test.pvalue)
    reject, holm_p, _, _ = multipletests(raw, alpha=0.05, method="holm")
    assert [table.loc["a", "p_holm"], table.loc["c", "p_holm"]] == pytest.approx(list(holm_p))
    assert [table.loc["a", "distinguishable"], table.loc["c", "distinguishable"]] == list(reject)
    # judge a's +15 pp on its family; c's reading moves too: a is among c's "other judges" on the qwen pair
    assert table.loc["a", "family_bias_pp"] == pytest.approx(15, abs=5) and bool(table.loc["a", "distinguishable"])
    assert table.loc["c", "family_bias_pp"] < table.loc["a", "family_bias_pp"]
    assert table.loc["a", "same_family_models"] == "qwen-x,qwen-y" and table.loc["a", "n_other_models"] == 2
    assert pd.isna(table.loc["b", "family_bias_pp"]) and table.loc["b", "n_same_family_models"] == 0  # no claude


def test_ranks_without_a_judge_are_the_panel_mean_of_the_others(tmp_path):
    written = write(tmp_path)
    report = build(sources.from_run_dirs([str(tmp_path / "*")]))
    board = report.baseline.set_index("model")

    def overall(model: str, judges: str) -> float:
        m = np.array([[np.nan if v is None else v for v in written[model][k]] for k in judges], dtype=float)
        return float(np.nanmean(m, axis=0).mean())

    models = list(BASE)
    for model in models:  # the full panel's scores are the leaderboard's
        assert board.loc[model, "overall_pct"] == pytest.approx(round(100 * overall(model, "abc"), 1))
    full = sps.rankdata([-overall(m, "abc") for m in models], method="min").astype(int)
    for judge in "abc":
        rest = "".join(k for k in "abc" if k != judge)
        without = sps.rankdata([-overall(m, rest) for m in models], method="min").astype(int)
        order = sorted(range(len(models)), key=lambda i: (full[i], models[i]))
        moved = [f"{models[i]}: {full[i]}→{without[i]}" for i in order if full[i] != without[i]]
        row = report.family.set_index("judge").loc[judge]
        assert row["rank_changes_without_judge"] == "; ".join(moved) and row["n_models_moved"] == len(moved)
        assert row["tau_without_judge"] == pytest.approx(sps.kendalltau(full, without).statistic)
    assert report.family.set_index("judge").loc["a", "n_models_moved"] > 0  # judge a lifted the qwen pair


def test_without_families_the_page_says_how_to_enable_the_check(tmp_path):
    write(tmp_path, families=False)
    report = build(sources.from_run_dirs([str(tmp_path / "*")]))
    assert report.family.empty
    out = tmp_path / "report"
    render.write(report, out)
    page = (out / "report.html").read_text()
    section = page[page.index('<section id="judge-family">'):page.index('<section id="judge-splits">')]
    assert "no same-family exclusion — we verified family judges show no measurable bias" in section
    assert HOW_TO.split(":")[0] in section and "<table" not in section
    assert (out / "family.csv").read_text().startswith("judge,judge_family,same_family_models,")


def test_with_families_the_page_shows_the_table_beside_the_claim(tmp_path):
    write(tmp_path)
    out = tmp_path / "report"
    render.write(build(sources.from_run_dirs([str(tmp_path / "*")])), out)
    page = (out / "report.html").read_text()
    section = page[page.index('<section id="judge-family">'):page.index('<section id="judge-splits">')]
    assert "we verified family judges show no measurable bias" in section and "<table" in section
    assert "family_bias_pp" in section or "family bias" in section
