"""The judge-family check: does a judge score contestants of its own family higher than the other judges do?

Pure like ``stats``: arrays in, numbers out. A *cube* is one point's runs × tasks × judges of
0–1 judge scores, NaN where that judge gave no score (unavailable, or an answer never judged).

A judge's **offset** on a task is its score minus the mean of the other judges' scores on the
same answer (averaged over the point's runs). Its **family bias** is, per task, its mean offset
on the contestants of its own family minus its mean offset on the other contestants, averaged
over tasks, with a paired t interval over tasks (the tasks are the unit, as in every comparison
of the report). A judge that favours its own family has a positive bias; a judge that is simply
harsher or more lenient than the others moves both offsets alike and leaves it near 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from wildtrace.report.statistics import stats


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """np.nanmean without the all-NaN warning (an all-NaN slice is NaN, as wanted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def offsets(cube: np.ndarray, judge: int) -> np.ndarray:
    """Per task: the judge's score minus the other judges' mean on the same answer, averaged over
    the runs (NaN where the judge, or every other judge, gave no score)."""
    own = cube[..., judge]
    others = _nanmean(np.delete(cube, judge, axis=-1), axis=-1)
    return _nanmean(own - others, axis=0)


def family_bias(same: Sequence[np.ndarray], other: Sequence[np.ndarray], level: float = stats.LEVEL) -> dict:
    """The judge's offsets on same-family contestants (``same``, one per-task array each) against
    the others': per task the mean over each side, their difference, a paired t over the tasks
    where both sides have a value. 0–1 scale."""
    mine = _nanmean(np.vstack(same), axis=0)
    theirs = _nanmean(np.vstack(other), axis=0)
    keep = np.isfinite(mine) & np.isfinite(theirs)
    d = stats.paired_t(mine[keep] - theirs[keep], level)
    return {"same_offset": float(mine[keep].mean()) if keep.any() else None,
            "other_offset": float(theirs[keep].mean()) if keep.any() else None, **d}


def panel_scores(cube: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per task, the All view's score with only the ``keep`` judges (a boolean mask over the
    judges): the mean of their available scores, 0 where none scored, averaged over the runs."""
    sub = cube[..., keep]
    scored = np.isfinite(sub).any(axis=-1)
    return np.where(scored, _nanmean(sub, axis=-1), 0.0).mean(axis=0)
