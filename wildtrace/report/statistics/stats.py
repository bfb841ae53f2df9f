"""Pure statistics for the report: bootstrap intervals, correlations, spreads, alpha.

Arrays and frames in, numbers out; no I/O. Task scores are 0–1; a task matrix has a row
per task and a column per replicate run, NaN where that run did not score the task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: The report's defaults: resamples, seed and level of every bootstrap interval.
RESAMPLES, SEED, LEVEL = 2000, 0, 0.95


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: percentile bootstrap over tasks."""

    resamples: int = RESAMPLES  #: number of resamples of the tasks (with replacement)
    seed: int = SEED  #: numpy Generator seed, so a report is reproducible
    level: float = LEVEL  #: two-sided coverage, 0.95 → the 2.5th and 97.5th percentiles
    #: resample documents (every task of a document together) for a score's interval, with its design effect
    by_document: bool = False
    #: a score's interval below SMALL_N tasks: "t" (a t interval) or "bca" (scipy's BCa bootstrap)
    small_n: str = "t"


#: The default of every ``boot`` parameter (frozen, so one shared instance is safe).
DEFAULT_BOOTSTRAP = Bootstrap()


#: Resamples gathered at once: bounds memory to CHUNK × tasks × runs floats.
CHUNK = 250


def as_matrix(matrix: np.ndarray | Sequence[float]) -> np.ndarray:
    """Tasks × runs as floats; a 1-D sequence is one run's column."""
    m = np.asarray(matrix, dtype=float)
    return m[:, None] if m.ndim == 1 else m


def all_value(matrix: np.ndarray) -> float | None:
    """All view of a task matrix: unscored cells count 0, mean over tasks, then over runs."""
    m = as_matrix(matrix)
    if m.shape[0] == 0:
        return None
    return float(np.nan_to_num(m, nan=0.0).mean(axis=0).mean())


def scored_value(matrix: np.ndarray) -> float | None:
    """Scored view of a task matrix: each run's mean over the tasks it scored, then the mean over runs."""
    per_run = [float(np.nanmean(col)) for col in as_matrix(matrix).T if np.isfinite(col).any()]
    return float(np.mean(per_run)) if per_run else None


def _all_of_draws(draws: np.ndarray) -> np.ndarray:
    """(chunk, tasks, runs) → the All view of each draw."""
    return np.nan_to_num(draws, nan=0.0).mean(axis=1).mean(axis=1)


def _scored_of_draws(draws: np.ndarray) -> np.ndarray:
    """(chunk, tasks, runs) → the Scored view of each draw (NaN when a draw scored nothing)."""
    counts = np.isfinite(draws).sum(axis=1)  # (chunk, runs): scored tasks in each draw
    per_run = np.where(counts > 0, np.nansum(draws, axis=1) / np.maximum(counts, 1), np.nan)
    scored_runs = np.isfinite(per_run).sum(axis=1)
    return np.where(scored_runs > 0, np.nansum(per_run, axis=1) / np.maximum(scored_runs, 1), np.nan)


def _bootstrap(matrix: np.ndarray, boot: Bootstrap, statistic: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The statistic over ``boot.resamples`` draws of whole tasks (rows) with replacement."""
    m = as_matrix(matrix)
    idx = np.random.default_rng(boot.seed).integers(0, m.shape[0], size=(boot.resamples, m.shape[0]))
    return np.concatenate([statistic(m[idx[i:i + CHUNK]]) for i in range(0, boot.resamples, CHUNK)])


def percentile_interval(values: np.ndarray, level: float) -> tuple[float | None, float | None]:
    """The two-sided percentile interval of some bootstrap draws (non-finite draws left out)."""
    return _percentiles(values, level)


def _percentiles(values: np.ndarray, level: float) -> tuple[float | None, float | None]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None, None
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return float(lo), float(hi)


def all_interval(matrix: np.ndarray, boot: Bootstrap = Bootstrap()) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the All view, resampling tasks."""
    if as_matrix(matrix).shape[0] == 0:
        return None, None
    return _percentiles(_bootstrap(matrix, boot, _all_of_draws), boot.level)


def scored_interval(matrix: np.ndarray, boot: Bootstrap = Bootstrap()) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the Scored view, resampling tasks (a draw with no
    scored task has no value and is left out)."""
    if as_matrix(matrix).shape[0] == 0:
        return None, None
    return _percentiles(_bootstrap(matrix, boot, _scored_of_draws), boot.level)


def cluster_interval(values: np.ndarray | Sequence[float], clusters: Sequence[str], boot: Bootstrap = DEFAULT_BOOTSTRAP
                     ) -> dict[str, float | int | None]:
    """The mean of per-task values with a percentile bootstrap that resamples clusters (tasks sharing
    a document; drawn by index in order of first appearance) with replacement, each draw's mean over
    the tasks it drew; and the design effect, the variance of those draws over the variance of draws
    of single tasks (same resamples and seed)."""
    v = np.asarray(values, dtype=float)
    import pandas as pd

    # in order of appearance, so a document per task draws exactly the task bootstrap's resamples
    index, labels = pd.factorize(np.asarray(clusters, dtype=str))
    out: dict[str, float | int | None] = {"ci_low": None, "ci_high": None, "design_effect": None,
                                          "n_clusters": len(labels)}
    if len(labels) < 2:
        return out
    sums, sizes = np.bincount(index, weights=v), np.bincount(index).astype(float)
    idx = np.random.default_rng(boot.seed).integers(0, len(labels), size=(boot.resamples, len(labels)))
    draws = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    out["ci_low"], out["ci_high"] = _percentiles(draws, boot.level)
    iid = _bootstrap(v, boot, _all_of_draws)
    out["design_effect"] = float(draws.var() / iid.var()) if iid.var() > 0 else None
    return out


def pearson(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Pearson r; None with fewer than two pairs or a constant side."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:  # ptp: std of equal floats is not exactly 0
        return None
    return float(np.corrcoef(x, y)[0, 1])


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman rho (Pearson r of average ranks); None where Pearson would be."""
    from scipy.stats import rankdata

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2:
        return None
    return pearson(rankdata(x), rankdata(y))


def mean_abs_diff(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Mean absolute difference of paired values (None when there is no pair)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.mean(np.abs(x - y))) if len(x) else None


def spread(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """mean, sample sd (ddof=1; None for one value), min, max, range and n of some numbers."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return {"n": 0, "mean": None, "sd": None, "min": None, "max": None, "range": None}
    return {"n": len(v), "mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else None,
            "min": float(v.min()), "max": float(v.max()), "range": float(v.max() - v.min())}


def paired_difference(a: Sequence[float], b: Sequence[float], boot: Bootstrap = Bootstrap()) -> dict:
    """Mean of b − a over paired tasks with a percentile bootstrap interval (tasks resampled)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = y - x
    if not len(diff):
        return {"n": 0, "mean_diff": None, "ci_low": None, "ci_high": None}
    rng = np.random.default_rng(boot.seed)
    draws = diff[rng.integers(0, len(diff), size=(boot.resamples, len(diff)))].mean(axis=1)
    lo, hi = _percentiles(draws, boot.level)
    return {"n": len(diff), "mean_diff": float(diff.mean()), "ci_low": lo, "ci_high": hi}


def krippendorff_interval(reliability: np.ndarray) -> float | None:
    """Krippendorff's alpha, interval metric: 1 − D_o / D_e over pairable values.

    ``reliability`` is judges × units, NaN where a judge gave no value; units with fewer
    than two values drop out, as alpha defines. With δ² = (a − b)², the coincidence sums
    have a closed form: a unit's Σ over ordered pairs of δ² is 2·m·SS (SS its sum of
    squares about its mean), so D_o = Σ_u 2·m_u·SS_u/(m_u − 1) / n and D_e = 2·SS / (n − 1).
    It is O(values); the ``krippendorff`` package (which the tests check this against)
    builds a units × V × V array over the V distinct values and cannot hold a release's
    worth of scores. None when nothing is pairable or every value is the same.
    """
    data = np.asarray(reliability, dtype=float)
    if data.ndim != 2 or data.shape[0] < 2:
        return None
    counts = np.isfinite(data).sum(axis=0)
    units = data[:, counts >= 2]
    m = counts[counts >= 2]
    n = int(m.sum())
    if n < 2:
        return None
    unit_ss = np.nansum((units - np.nanmean(units, axis=0)) ** 2, axis=0)
    values = units[np.isfinite(units)]
    expected = 2.0 * float(((values - values.mean()) ** 2).sum()) / (n - 1)
    if expected == 0.0:
        return None
    observed = float((2.0 * m * unit_ss / (m - 1)).sum()) / n
    return 1.0 - observed / expected


# --------------------------------------------------------------------------- paired tests, Holm, power

#: Below this many tasks an interval is a t interval and carries the small-n flag.
SMALL_N = 30


def paired_t(diff: Sequence[float], level: float = LEVEL) -> dict:
    """Paired t on per-task differences (b − a) of replicate-averaged scores: mean, sd, t interval,
    two-sided p. One resampling unit only (tasks): the replicates are already averaged into each
    task's score, so judge and answer noise are counted once, inside the per-task differences."""
    from scipy import stats as st

    d = np.asarray(diff, dtype=float)
    n = len(d)
    out: dict = {"n": n, "mean_diff": float(d.mean()) if n else None, "sd_diff": None, "ci_low": None,
                 "ci_high": None, "p_value": None, "small_n": n < SMALL_N}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    out["sd_diff"] = sd
    if sd == 0.0:
        out.update(ci_low=out["mean_diff"], ci_high=out["mean_diff"], p_value=1.0 if out["mean_diff"] == 0 else 0.0)
        return out
    half = float(st.t.ppf(0.5 + level / 2.0, n - 1)) * sd / math.sqrt(n)
    t = out["mean_diff"] / (sd / math.sqrt(n))
    out.update(ci_low=out["mean_diff"] - half, ci_high=out["mean_diff"] + half,
               p_value=float(2.0 * st.t.sf(abs(t), n - 1)))
    return out


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None): a family's comparisons read at one level."""
    known = [(p, i) for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(known)
    for rank, (p, i) in enumerate(sorted(known)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float | None, float | None]:
    """t interval of a mean (None below two values)."""
    from scipy import stats as st

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return None, None
    half = float(st.t.ppf(0.5 + level / 2.0, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return float(v.mean()) - half, float(v.mean()) + half


#: The intervals a score below SMALL_N tasks can take (report.bootstrap.small_n).
SMALL_N_METHODS = ("t", "bca")


def bca_interval(values: np.ndarray | Sequence[float], boot: Bootstrap = DEFAULT_BOOTSTRAP
                 ) -> tuple[float | None, float | None]:
    """The bias-corrected and accelerated bootstrap interval of a mean (scipy.stats.bootstrap,
    method BCa, ``boot.resamples`` resamples from ``boot.seed``); the mean itself when every value
    is the same, None below two values."""
    from scipy.stats import bootstrap

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return None, None
    if np.ptp(v) == 0:
        return float(v[0]), float(v[0])
    found = bootstrap((v,), np.mean, n_resamples=boot.resamples, confidence_level=boot.level, method="BCa",
                      rng=np.random.default_rng(boot.seed), vectorized=True)
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def small_n_interval(values: np.ndarray | Sequence[float], boot: Bootstrap = DEFAULT_BOOTSTRAP
                     ) -> tuple[float | None, float | None]:
    """A mean's interval below SMALL_N tasks, as ``boot.small_n`` says: t, or BCa."""
    return bca_interval(values, boot) if boot.small_n == "bca" else mean_interval(list(values), boot.level)


def detectable_gap(n: int, sd: float, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest true mean difference a two-sided paired t at ``alpha`` finds with ``power``,
    given n tasks and the per-task difference sd (normal approximation with the t quantiles)."""
    from scipy import stats as st

    if n < 2 or not sd > 0:
        return None
    return float((st.t.ppf(1 - alpha / 2, n - 1) + st.t.ppf(power, n - 1)) * sd / math.sqrt(n))


def tasks_needed(gap: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int | None:
    """Tasks a paired t needs to detect ``gap`` with ``power`` (solved with the t quantiles)."""
    if not gap > 0 or not sd > 0:
        return None
    n = 2
    while n < 10_000_000:
        found = detectable_gap(n, sd, power, alpha)
        if found is not None and found <= gap:
            return n
        n = n + 1 if n < 1000 else int(n * 1.01) + 1
    return None


# --------------------------------------------------------------------------- variance components


#: Per-task sums a nested fit needs (task_summaries' columns).
_SSW, _SSA, _N, _B, _SUM, _SQ_OVER_N, _SQ = range(7)


def task_summaries(cells: Sequence[Sequence[Sequence[float]]]) -> np.ndarray:
    """tasks × 7 sums of a nested design (``cells[t][a]``: the gradings of answer a of task t):
    within-answer SS, between-answer SS, gradings, answers, Σ scores, Σ n_a²/n, Σ n_a². A fit
    over any resample of tasks is a sum of these rows."""
    rows = []
    for task in cells:
        groups = [np.asarray(g, dtype=float) for g in task if len(g)]
        if not groups:
            continue
        n_a = np.array([len(g) for g in groups], dtype=float)
        means = np.array([g.mean() for g in groups])
        n = float(n_a.sum())
        task_mean = float((n_a * means).sum()) / n
        rows.append([sum(float(((g - g.mean()) ** 2).sum()) for g in groups),
                     float((n_a * (means - task_mean) ** 2).sum()), n, float(len(groups)),
                     float((n_a * means).sum()), float((n_a ** 2).sum()) / n, float((n_a ** 2).sum())])
    return np.asarray(rows, dtype=float).reshape(-1, 7)


def components_of(summary: np.ndarray) -> dict[str, np.ndarray]:
    """Expected-mean-squares estimates from task_summaries rows; ``summary`` is (..., tasks, 7) so
    many resamples fit at once. NaN where the design cannot separate a component."""
    s = summary.sum(axis=-2)
    a = np.full(s.shape[:-1], summary.shape[-2], dtype=float)
    big_n, b = s[..., _N], s[..., _B]
    # SS between tasks: Σ n_t ȳ_t² − N ȳ², with Σ n_t ȳ_t² = Σ (Σ y)_t² / n_t
    ss_t = (summary[..., _SUM] ** 2 / summary[..., _N]).sum(axis=-1) - s[..., _SUM] ** 2 / big_n
    df_t, df_a, df_w = a - 1, b - a, big_n - b
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_w = np.where(df_w > 0, s[..., _SSW] / df_w, np.nan)
        ms_a = np.where(df_a > 0, s[..., _SSA] / df_a, np.nan)
        ms_t = ss_t / df_t
        n0_a = np.where(df_a > 0, (big_n - s[..., _SQ_OVER_N]) / df_a, np.nan)
        n0_ta = (s[..., _SQ_OVER_N] - s[..., _SQ] / big_n) / df_t
        n0_t = (big_n - (summary[..., _N] ** 2).sum(axis=-1) / big_n) / df_t
        var_j = ms_w
        var_a = (ms_a - np.nan_to_num(ms_w)) / n0_a
        var_t = (ms_t - np.nan_to_num(var_j) - n0_ta * np.nan_to_num(var_a)) / n0_t
    return {"tasks": var_t, "answers": var_a, "judges": var_j}


def nested_components(cells: Sequence[Sequence[Sequence[float]]]) -> dict:
    """Variance components of a nested random design by expected mean squares (unbalanced:
    Sokal & Rohlf's n0 coefficients): tasks, answers within a task, gradings within an answer.

    ``cells[t][a]`` holds the distinct gradings of answer a of task t. Returns var (0–1² per
    grading; a negative estimate is kept and listed in ``negative``); None for a component the
    design cannot separate (one task, no second answer, no second grading).
    """
    summary = task_summaries(cells)
    if summary.shape[0] < 2:
        return {"var": {"tasks": None, "answers": None, "judges": None}, "negative": []}
    fit = components_of(summary)
    var = {k: None if not np.isfinite(v) else float(v) for k, v in fit.items()}
    return {"var": var, "negative": [k for k, v in var.items() if v is not None and v < 0]}


def icc_consistency_average(ratings: np.ndarray) -> float | None:
    """ICC(3,k) of units × raters (complete rows only): the reliability of the raters' mean, a
    rater's constant offset not counted as disagreement: (MS_units − MS_error) / MS_units."""
    m = np.asarray(ratings, dtype=float)
    m = m[np.isfinite(m).all(axis=1)] if m.ndim == 2 else m
    if m.ndim != 2 or m.shape[0] < 2 or m.shape[1] < 2:
        return None
    n, k = m.shape
    grand = m.mean()
    ss_rows = k * float(((m.mean(axis=1) - grand) ** 2).sum())
    ss_cols = n * float(((m.mean(axis=0) - grand) ** 2).sum())
    ss_err = float(((m - grand) ** 2).sum()) - ss_rows - ss_cols
    ms_rows, ms_err = ss_rows / (n - 1), ss_err / ((n - 1) * (k - 1))
    return None if ms_rows == 0 else (ms_rows - ms_err) / ms_rows


def krippendorff_bootstrap(reliability: np.ndarray, boot: Bootstrap = DEFAULT_BOOTSTRAP
                           ) -> tuple[float | None, float | None]:
    """Percentile interval of krippendorff_interval over resamples of the units (columns), all
    draws at once: alpha is a function of per-unit sums (values, Σ, Σ², within-unit SS)."""
    data = np.asarray(reliability, dtype=float)
    if data.ndim != 2:
        return None, None
    counts = np.isfinite(data).sum(axis=0)
    units = data[:, counts >= 2]
    m = counts[counts >= 2].astype(float)
    if units.shape[1] < 2:
        return None, None
    s1, s2 = np.nansum(units, axis=0), np.nansum(units ** 2, axis=0)
    within = 2.0 * m * (s2 - s1 ** 2 / m) / (m - 1)  # a unit's Σ over ordered pairs of δ², over m − 1
    idx = np.random.default_rng(boot.seed).integers(0, units.shape[1], size=(boot.resamples, units.shape[1]))
    n = m[idx].sum(axis=1)
    ss = s2[idx].sum(axis=1) - s1[idx].sum(axis=1) ** 2 / n
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (within[idx].sum(axis=1) / n) / (2.0 * ss / (n - 1))
    return _percentiles(np.where(ss > 0, alpha, np.nan), boot.level)


def ranks(values: np.ndarray | Sequence[float]) -> np.ndarray:
    """1 = best; tied values share the better rank (the leaderboard's rank column)."""
    v = np.asarray(values, dtype=float)
    return 1 + (v[None, :] > v[:, None]).sum(axis=1)


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b of two score lists (None with fewer than two or a constant side)."""
    from scipy.stats import kendalltau

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(kendalltau(x, y).statistic)
