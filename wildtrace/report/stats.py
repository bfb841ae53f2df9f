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
