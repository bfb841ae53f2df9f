"""The report's pure statistics against values computed independently (scipy, hand formulas)."""

from __future__ import annotations

import itertools
import math

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from wildtrace.report.statistics import stats
from wildtrace.report.statistics.stats import Bootstrap


def alpha_interval_by_hand(data: list[list[float | None]]) -> float:
    """Krippendorff's alpha, interval metric, from its definition: pairable values within units
    (coincidences weighted 1/(m_u − 1)) against all pairs of pairable values."""
    units = [[v for v in col if v is not None] for col in zip(*data, strict=True)]
    units = [u for u in units if len(u) >= 2]
    n = sum(len(u) for u in units)
    d_o = sum(sum((a - b) ** 2 for a, b in itertools.permutations(u, 2)) / (len(u) - 1) for u in units) / n
    values = [v for u in units for v in u]
    d_e = sum((a - b) ** 2 for a, b in itertools.permutations(values, 2)) / (n * (n - 1))
    return 1.0 - d_o / d_e


@pytest.mark.parametrize("data", [
    [[0.1, 0.5, 0.9, 0.3], [0.2, 0.4, 1.0, 0.3], [0.0, 0.6, 0.8, None]],
    [[1.0, 0.0, 0.5], [0.5, 0.5, 0.5]],
    [[0.3, None, 0.7, 0.2, 0.9], [0.4, 0.8, 0.6, None, 1.0], [None, 0.7, 0.5, 0.1, None]],
], ids=["three-judges-one-gap", "two-judges", "sparse"])
def test_krippendorff_alpha_matches_the_definition_and_the_krippendorff_package(data):
    import krippendorff

    array = np.array([[np.nan if v is None else v for v in row] for row in data])
    assert stats.krippendorff_interval(array) == pytest.approx(alpha_interval_by_hand(data), abs=1e-9)
    package = krippendorff.alpha(reliability_data=array, level_of_measurement="interval")
    assert stats.krippendorff_interval(array) == pytest.approx(package, abs=1e-9)


def test_krippendorff_alpha_against_the_package_on_judge_like_scores():
    import krippendorff

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 21, size=300) * 5  # totals in steps of 5 points
    data = np.clip(truth + rng.normal(0, 12, size=(3, 300)).round(0), 0, 100) / 100
    data[rng.random((3, 300)) < 0.1] = np.nan  # unavailable judges
    package = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
    assert stats.krippendorff_interval(data) == pytest.approx(package, abs=1e-9)


def test_krippendorff_alpha_holds_a_release_worth_of_continuous_scores():
    rng = np.random.default_rng(0)
    data = rng.random((3, 481 * 24))  # 24 runs of 481 tasks, all values distinct
    alpha = stats.krippendorff_interval(data)
    assert alpha == pytest.approx(0.0, abs=0.02)  # independent judges: no agreement beyond chance


@pytest.mark.parametrize("data", [[[0.5, 0.5], [0.5, 0.5]], [[0.1, np.nan], [np.nan, 0.2]], [[0.3, 0.4]]],
                         ids=["no-variance", "nothing-pairable", "one-judge"])
def test_krippendorff_alpha_undefined_is_none(data):
    assert stats.krippendorff_interval(np.array(data, dtype=float)) is None


def test_correlations_and_mad_against_scipy():
    rng = np.random.default_rng(7)
    a = rng.random(40)
    b = 0.6 * a + 0.4 * rng.random(40)
    b[3] = b[5]  # a tie for the rank correlation
    assert stats.pearson(a, b) == pytest.approx(sps.pearsonr(a, b).statistic, abs=1e-12)
    assert stats.spearman(a, b) == pytest.approx(sps.spearmanr(a, b).statistic, abs=1e-12)
    assert stats.mean_abs_diff(a, b) == pytest.approx(sum(abs(x - y) for x, y in zip(a, b, strict=True)) / 40)


@pytest.mark.parametrize("a,b", [([0.5], [0.2]), ([0.1, 0.1, 0.1], [0.2, 0.3, 0.4]), ([], [])])
def test_correlation_undefined_is_none(a, b):
    assert stats.pearson(a, b) is None
    assert stats.spearman(a, b) is None


def test_all_view_bootstrap_matches_scipy_percentile_interval():
    rng = np.random.default_rng(1)
    scores = rng.beta(2, 5, size=300)
    lo, hi = stats.all_interval(scores[:, None], Bootstrap(resamples=4000, seed=3))
    ref = sps.bootstrap((scores,), np.mean, n_resamples=4000, method="percentile", random_state=11).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.004)
    assert hi == pytest.approx(ref.high, abs=0.004)
    se = scores.std(ddof=1) / math.sqrt(len(scores))  # and the normal approximation
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_scored_interval_ignores_unscored_tasks_and_all_counts_them_zero():
    scores = np.array([0.2, 0.4, np.nan, 0.6, np.nan, 0.8] * 30)
    assert stats.scored_value(scores[:, None]) == pytest.approx(0.5)
    assert stats.all_value(scores[:, None]) == pytest.approx(2.0 / 6)
    lo, hi = stats.scored_interval(scores[:, None], Bootstrap(resamples=3000, seed=0))
    finite = scores[np.isfinite(scores)]
    ref = sps.bootstrap((finite,), np.mean, n_resamples=3000, method="percentile", random_state=0).confidence_interval
    assert lo < 0.5 < hi
    # resampling all tasks (the number scored varies) is close to resampling the scored ones
    assert (hi - lo) == pytest.approx(ref.high - ref.low, rel=0.15)


def test_bootstrap_is_seeded_and_level_is_honoured():
    scores = np.linspace(0, 1, 50)[:, None]
    assert stats.all_interval(scores, Bootstrap(500, 9)) == stats.all_interval(scores, Bootstrap(500, 9))
    lo90, hi90 = stats.all_interval(scores, Bootstrap(2000, 0, 0.90))
    lo99, hi99 = stats.all_interval(scores, Bootstrap(2000, 0, 0.99))
    assert lo99 < lo90 < 0.5 < hi90 < hi99


def test_replicate_matrix_all_view_is_the_mean_of_the_runs():
    m = np.array([[0.2, 0.4], [np.nan, 0.6], [1.0, np.nan]])
    assert stats.all_value(m) == pytest.approx(((0.2 + 0 + 1.0) / 3 + (0.4 + 0.6 + 0) / 3) / 2)
    assert stats.scored_value(m) == pytest.approx((0.6 + 0.5) / 2)


@pytest.mark.parametrize("values,expected", [
    ([20.0, 30.0, 40.0], {"n": 3, "mean": 30.0, "sd": 10.0, "min": 20.0, "max": 40.0, "range": 20.0}),
    ([5.0], {"n": 1, "mean": 5.0, "sd": None, "min": 5.0, "max": 5.0, "range": 0.0}),
    ([], {"n": 0, "mean": None, "sd": None, "min": None, "max": None, "range": None}),
    ([1.0, None, float("nan"), 3.0], {"n": 2, "mean": 2.0, "sd": math.sqrt(2), "min": 1.0, "max": 3.0, "range": 2.0}),
])
def test_spread(values, expected):
    assert stats.spread(values) == pytest.approx(expected)


def test_paired_difference_interval():
    rng = np.random.default_rng(5)
    a = rng.random(200)
    b = a + 0.1 + rng.normal(0, 0.05, 200)
    d = stats.paired_difference(a, b, Bootstrap(3000, 1))
    assert d["n"] == 200
    assert d["mean_diff"] == pytest.approx(float(np.mean(b - a)))
    ref = sps.bootstrap((b - a,), np.mean, n_resamples=3000, method="percentile", random_state=2).confidence_interval
    assert d["ci_low"] == pytest.approx(ref.low, abs=0.002)
    assert d["ci_high"] == pytest.approx(ref.high, abs=0.002)
    assert stats.paired_difference([], []) == {"n": 0, "mean_diff": None, "ci_low": None, "ci_high": None}


def test_a_flat_sequence_is_one_run_and_chunks_do_not_change_the_draws(monkeypatch):
    scores = np.linspace(0, 1, 31)
    assert stats.all_value(scores) == stats.all_value(scores[:, None]) == pytest.approx(0.5)
    whole = stats.all_interval(scores, Bootstrap(1000, 4))
    monkeypatch.setattr(stats, "CHUNK", 7)
    assert stats.all_interval(scores, Bootstrap(1000, 4)) == whole


# --------------------------------------------------------------------------- paired tests, Holm, power, components


def test_paired_t_matches_scipy_and_reads_small_n():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0, 1, 25), rng.uniform(0, 1, 25)
    ours = stats.paired_t(b - a)
    expected = sps.ttest_rel(b, a)
    assert ours["p_value"] == pytest.approx(expected.pvalue)
    assert (ours["ci_low"], ours["ci_high"]) == pytest.approx(tuple(expected.confidence_interval(0.95)))
    assert ours["small_n"] and not stats.paired_t(rng.uniform(0, 1, 30))["small_n"]


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = [0.01, 0.04, 0.03, 0.2, 0.001, None]
    expected = multipletests([x for x in p if x is not None], method="holm")[1]
    ours = stats.holm(p)
    assert ours[:5] == pytest.approx(list(expected)) and ours[5] is None


def test_power_table_matches_statsmodels():
    from statsmodels.stats.power import TTestPower

    sd, n = 0.2, 481
    gap = stats.detectable_gap(n, sd)
    power = TTestPower().power(effect_size=gap / sd, nobs=n, alpha=0.05, alternative="two-sided")
    assert power == pytest.approx(0.8, abs=0.005)
    needed = stats.tasks_needed(0.02, sd)
    exact = TTestPower().solve_power(effect_size=0.02 / sd, power=0.8, alpha=0.05, alternative="two-sided")
    assert abs(needed - exact) <= 2


def test_balanced_nested_components_are_the_textbook_expected_mean_squares():
    """tasks × answers × gradings, balanced: σ²_J = MS_W, σ²_A = (MS_A − MS_W)/n, σ²_T = (MS_T − MS_A)/(b n)."""
    rng = np.random.default_rng(5)
    t, b, n = 40, 3, 2
    y = (rng.normal(0, 0.3, (t, 1, 1)) + rng.normal(0, 0.1, (t, b, 1)) + rng.normal(0, 0.05, (t, b, n)))
    ms_w = ((y - y.mean(axis=2, keepdims=True)) ** 2).sum() / (t * b * (n - 1))
    ms_a = n * ((y.mean(axis=2) - y.mean(axis=(1, 2))[:, None]) ** 2).sum() / (t * (b - 1))
    ms_t = b * n * ((y.mean(axis=(1, 2)) - y.mean()) ** 2).sum() / (t - 1)
    ours = stats.nested_components(y.tolist())["var"]
    assert ours["judges"] == pytest.approx(ms_w)
    assert ours["answers"] == pytest.approx((ms_a - ms_w) / n)
    assert ours["tasks"] == pytest.approx((ms_t - ms_a) / (b * n))


def test_nested_components_match_statsmodels_reml_on_a_balanced_design():
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(6)
    t, b, n = 30, 2, 2
    y = rng.normal(0, 0.3, (t, 1, 1)) + rng.normal(0, 0.15, (t, b, 1)) + rng.normal(0, 0.1, (t, b, n))
    rows = [{"task": i, "answer": f"{i}-{j}", "y": y[i, j, k]} for i in range(t) for j in range(b) for k in range(n)]
    fit = smf.mixedlm("y ~ 1", pd.DataFrame(rows), groups="task", vc_formula={"answer": "0 + C(answer)"},
                      re_formula="1").fit(reml=True)
    ours = stats.nested_components(y.tolist())["var"]
    assert ours["judges"] == pytest.approx(fit.scale, rel=1e-3)
    assert ours["answers"] == pytest.approx(float(fit.vcomp[0]), rel=1e-3)
    assert ours["tasks"] == pytest.approx(float(fit.cov_re.iloc[0, 0]), rel=1e-3)


def test_a_negative_component_is_kept_and_flagged():
    # answers of one task agree more than gradings of one answer: MS_A < MS_W, σ²_A < 0
    cells = [[[0.0, 1.0], [1.0, 0.0]], [[0.2, 0.8], [0.8, 0.2]], [[0.5, 0.6], [0.6, 0.5]]]
    fit = stats.nested_components(cells)
    assert fit["var"]["answers"] < 0 and fit["negative"] == ["answers"]


def test_alpha_bootstrap_equals_resampling_the_package():
    rng = np.random.default_rng(8)
    data = rng.uniform(0, 1, (3, 40))
    data[1, 3] = np.nan
    boot = stats.Bootstrap(resamples=300, seed=4)
    low, high = stats.krippendorff_bootstrap(data, boot)
    idx = np.random.default_rng(4).integers(0, 40, size=(300, 40))
    draws = [krippendorff.alpha(reliability_data=data[:, i], level_of_measurement="interval") for i in idx]
    assert (low, high) == pytest.approx(tuple(np.percentile(draws, [2.5, 97.5])))


def test_kendall_tau_is_scipys_tau_b():
    a, b = [0.3, 0.1, 0.5, 0.2], [0.25, 0.2, 0.4, 0.1]
    assert stats.kendall_tau(a, b) == pytest.approx(sps.kendalltau(a, b).statistic)
    assert stats.kendall_tau([0.1], [0.2]) is None


def test_how_a_sweep_job_schedules_its_repeats_is_not_a_setting():
    """Each job of a sweep lists the sweep's other points (sweep_decodings) to send while the provider holds a
    prompt: two jobs that differ only in the budget are one sweep of decoding.max_tokens, not two settings apart."""
    from wildtrace.report.experiments import settings_of
    from wildtrace.report.tables import RunData, config_signature

    def job(max_tokens: int, others: list[int]) -> RunData:
        config = {"model": {"name": "m", "route": "r"}, "judge_panel": {"name": "p", "judges": {"a": {}}},
                  "decoding": {"temperature": 0.1, "max_tokens": max_tokens, "replicate": 0},
                  "prompt_repeats": 1 + len(others),
                  "sweep_decodings": [{"temperature": 0.1, "max_tokens": o, "replicate": 0} for o in others]}
        return RunData(run_id=str(max_tokens), source="run_dir", config=config,
                       stats={"effective_max_tokens": max_tokens}, scores={})

    a, b = job(64, [256]), job(256, [64])
    sa, sb = settings_of(a), settings_of(b)
    differ = {k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)}
    assert differ == {"decoding.max_tokens"}
    assert config_signature(job(64, [256])) == config_signature(job(64, []))
