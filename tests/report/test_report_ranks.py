"""The baseline leaderboard's rank intervals and P(rank 1), recomputed independently: a direct
bootstrap written here (scipy's rankdata for the ranks), and a constructed case whose P(rank 1)
is known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from wildtrace.report.experiments import rank_intervals
from wildtrace.report.statistics.stats import Bootstrap
from wildtrace.report.tables import Group, RunData


def point(name: str, scores: np.ndarray) -> Group:
    """A point of one run whose single judge gave these task scores (0–1)."""
    tasks = [{"question_id": f"q{i:03d}", "status": "scored", "score": float(s),
              "judges": {"a": {"status": "scored", "score": float(s), "total": 100 * float(s), "reason": None}}}
             for i, s in enumerate(scores)]
    run = RunData(run_id=name, source="run_dir", config={}, stats={"dataset": {"n_tasks": len(scores)}},
                  scores={"tasks": tasks})
    return Group(key=name, runs=[run], label=name)


def direct_ranks(m: np.ndarray, boot: Bootstrap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column: the 2.5th/97.5th percentile of its bootstrap rank (1 = best, ties the better rank)
    and the share of draws where it ranks 1, drawing tasks as the report documents (numpy Generator
    seeded with boot.seed, one integers(0, n, (resamples, n)) call)."""
    idx = np.random.default_rng(boot.seed).integers(0, m.shape[0], size=(boot.resamples, m.shape[0]))
    ranks = np.array([sps.rankdata(-m[i].mean(axis=0), method="min") for i in idx])
    tail = 100 * (1 - boot.level) / 2
    return (np.percentile(ranks, tail, axis=0, method="lower"), np.percentile(ranks, 100 - tail, axis=0,
                                                                                method="higher"),
            100 * (ranks == 1).mean(axis=0))


def test_rank_intervals_equal_a_direct_bootstrap_of_the_ranks():
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 1, 60)
    m = np.clip(np.column_stack([base + 0.03, base + 0.02 + rng.normal(0, 0.1, 60), base,
                                 base - 0.2 + rng.normal(0, 0.05, 60)]), 0, 1)
    boot = Bootstrap(resamples=500, seed=11)
    found = rank_intervals([point(f"m{j}", m[:, j]) for j in range(m.shape[1])], boot)
    low, high, p1 = direct_ranks(m, boot)
    assert list(found["rank"]) == list(sps.rankdata(-m.mean(axis=0), method="min").astype(int))
    assert list(found["rank_ci_low"]) == list(low) and list(found["rank_ci_high"]) == list(high)
    assert np.allclose(found["p_rank1_pct"], p1)
    assert found["p_rank1_pct"].iloc[3] == 0.0 and found["rank_ci_low"].iloc[3] == 4  # 20 pp behind: always last


def test_p_rank1_of_two_models_is_the_normal_probability_of_a_positive_mean_difference():
    """Two models whose per-task differences have mean d and sd s over n tasks: the bootstrap mean
    difference is about normal with sd s·√((n−1)/n)/√n, so P(rank 1) of the better ≈ Φ(d√n / (s·√((n−1)/n)))."""
    n, d, s = 400, 0.005, 0.1
    e = np.random.default_rng(5).normal(size=n)
    diff = d + s * (e - e.mean()) / e.std(ddof=1)
    other = np.full(n, 0.5)
    boot = Bootstrap(resamples=4000, seed=2)
    found = rank_intervals([point("better", other + diff), point("other", other)], boot)
    expected = 100 * sps.norm.cdf(d * np.sqrt(n) / (s * np.sqrt((n - 1) / n)))  # 84.2 %
    assert found["p_rank1_pct"].iloc[0] == pytest.approx(expected, abs=2.5)  # Monte Carlo sd 0.6 pp
    assert found["p_rank1_pct"].iloc[1] == pytest.approx(100 - expected, abs=2.5)
    assert (found["rank_ci_low"].tolist(), found["rank_ci_high"].tolist()) == ([1, 1], [2, 2])


def test_a_clear_leader_ranks_first_in_every_draw_and_ties_share_the_better_rank():
    base = np.linspace(0.1, 0.6, 40)
    found = rank_intervals([point("top", base + 0.3), point("tie1", base), point("tie2", base)],
                           Bootstrap(resamples=300, seed=0))
    assert found[["rank", "rank_ci_low", "rank_ci_high", "p_rank1_pct"]].values.tolist() == [
        [1, 1, 1, 100.0], [2, 2, 2, 0.0], [2, 2, 2, 0.0]]


def test_an_ablation_of_one_model_says_why_tau_is_not_shown(tmp_path):
    from test_report import A1, B, write_run

    from wildtrace.report import render, sources
    from wildtrace.report.assemble import build

    write_run(tmp_path / "one", "a", "alpha", A1)
    write_run(tmp_path / "one", "a-only-a", "alpha", {"a": A1["a"]}, panel="trio_only_a")
    report = build(sources.from_run_dirs([str(tmp_path / "one" / "*")]), Bootstrap(resamples=100))
    row = report.ablations.iloc[0]
    assert row["tau"] is None and row["n_models"] == 1
    assert row["tau_not_shown"] == "fewer than 2 models ablated this way (1): τ compares the models' rankings"
    render.write(report, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    ablations = page[page.index('<section id="ablations">'):page.index('<section id="reruns">')]
    assert "<b>Kendall τ is not shown:</b> fewer than 2 models ablated this way (1)" in ablations

    for name, scores in (("a", A1), ("b", B)):  # two models, the same judge dropped: τ is shown
        write_run(tmp_path / "two", name, name, scores)
        write_run(tmp_path / "two", f"{name}-only-a", name, {"a": scores["a"]}, panel="trio_only_a")
    report = build(sources.from_run_dirs([str(tmp_path / "two" / "*")]), Bootstrap(resamples=100))
    full = [np.mean(np.nanmean(np.array(s, dtype=float), axis=0)) for s in
            ([[np.nan if v is None else v for v in A1[k]] for k in "abc"],
             [[np.nan if v is None else v for v in B[k]] for k in "abc"])]
    only = [np.mean(A1["a"]), np.mean(B["a"])]
    assert list(report.ablations["tau_not_shown"]) == ["", ""]
    assert report.ablations["tau"].iloc[0] == pytest.approx(round(sps.kendalltau(full, only).statistic, 4))
