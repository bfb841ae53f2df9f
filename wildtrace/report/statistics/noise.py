"""Judge noise, measured: each judge against itself, where a row's spread comes from, which gaps are real.

Pure statistics like ``stats``: frames and arrays in, numbers out, no I/O. Scores are 0–1
task scores; the callers turn them into percentage points. The method is written out in
docs/experiments/report-noise.md; in short:

* **Intra-rater reliability.** A unit is one answer (the same answer bytes) graded by one
  judge with the same settings; its coders are the judge replicates
  (``judge_panel.replicate``). Krippendorff's interval alpha is taken over units × replicates.
* **Variance decomposition.** A row's runs form a nested design: tasks, answer sets
  (``decoding.replicate``) within tasks, gradings (``judge_panel.replicate``) within answer
  sets. Judge variance is the pooled within-answer-set variance; answer variance the
  variance between answer sets less the judge share; the task share is the bootstrap
  variance over tasks less both. Each is the variance of the row's overall score.
* **Gaps against noise.** A paired bootstrap over tasks that also resamples the replicates
  (answer sets, then gradings within each) of both rows; a difference whose interval holds 0
  is within noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from wildtrace.report.statistics import stats
from wildtrace.report.statistics.stats import DEFAULT_BOOTSTRAP, Bootstrap

#: Scores closer than this are the same score (totals are hundredths; floats are not exact).
EPS = 1e-9
#: Long-frame columns the callers build.
UNIT, JUDGE, REPLICATE, SCORE, ITEM, POINTS, QID = "unit", "judge", "replicate", "score", "item", "points", \
    "question_id"


# --------------------------------------------------------------------------- intra-rater


def _pairwise_abs(values: np.ndarray) -> np.ndarray:
    """Per unit (row), the mean |a − b| over pairs of its available replicates (NaN = missing)."""
    total = np.zeros(values.shape[0])
    count = np.zeros(values.shape[0])
    for i, j in combinations(range(values.shape[1]), 2):
        both = np.isfinite(values[:, i]) & np.isfinite(values[:, j])
        total += np.where(both, np.abs(values[:, i] - values[:, j]), 0.0)
        count += both
    return total / np.maximum(count, 1)


def _pairable(part: pd.DataFrame, index: str | list[str], value: str) -> pd.DataFrame:
    """units × replicates of one judge, only the units with at least two replicate values."""
    keys = [index] if isinstance(index, str) else list(index)
    table = part.groupby([*keys, REPLICATE], sort=True)[value].first().unstack(REPLICATE)
    return table[table.notna().sum(axis=1) >= 2]


def intra_rater(long: pd.DataFrame, boot: Bootstrap = DEFAULT_BOOTSTRAP) -> dict[str, dict]:
    """Per judge, how it agrees with itself over replicates of the same answers.

    ``long`` has a row per (unit, judge, replicate) with the judge's score (NaN when it was
    unavailable). Units with fewer than two replicate scores cannot show a change and are left
    out (as alpha leaves them out); a judge with no such unit has no entry.
    """
    out: dict[str, dict] = {}
    if not len(long):
        return out
    for judge, part in long.groupby(JUDGE, sort=True):
        table = _pairable(part, UNIT, SCORE)
        if not len(table):
            continue
        values = table.to_numpy(dtype=float)
        ranges = np.nanmax(values, axis=1) - np.nanmin(values, axis=1)
        alpha = stats.krippendorff_interval(values.T)
        low, high = stats.krippendorff_bootstrap(values.T, boot) if alpha is not None else (None, None)
        out[str(judge)] = {
            "krippendorff_alpha_interval": alpha, "alpha_ci_low": low, "alpha_ci_high": high,
            # read from the interval's lower bound: 10 units cannot show "reliable" with 0.40–1.00
            "reading": interpretation(low),
            "n_units": len(table),
            "n_replicates": int(table.notna().any(axis=0).sum()),
            "changed_rate": float((ranges > EPS).mean()),
            "mean_abs_change": float(_pairwise_abs(values).mean()),
            "max_abs_change": float(ranges.max()),
        }
    return out


def interpretation(alpha: float | None) -> str:
    """Krippendorff's own reading of alpha: ≥ 0.8 reliable, ≥ 0.667 tentative, below that not."""
    if alpha is None or alpha != alpha:
        return "undefined (no variation to agree on)"
    if alpha >= 0.8:
        return "reliable (≥ 0.8)"
    if alpha >= 0.667:
        return "tentative (≥ 0.667, < 0.8)"
    return "unreliable (< 0.667)"


def item_flips(items: pd.DataFrame, criteria: dict[str, list[str]]) -> tuple[dict[str, dict], pd.DataFrame]:
    """How often each rubric item's points flip between replicates of the same answer.

    ``items`` has a row per (unit, judge, replicate, question_id, item) with the points the
    judge gave that item. Returns per judge {flip_rate, n_item_units} and a row per
    (judge, task, item): the criterion, how many answers were graded twice or more, and the
    share of them whose points for that item changed.
    """
    columns = ["judge", QID, ITEM, "criterion", "n_answers", "flip_rate"]
    if not len(items):
        return {}, pd.DataFrame(columns=columns)
    per_judge, rows = {}, []
    for judge, part in items.groupby(JUDGE, sort=True):
        table = _pairable(part, [UNIT, QID, ITEM], POINTS)
        if not len(table):
            continue
        values = table.to_numpy(dtype=float)
        flipped = pd.Series(np.nanmax(values, axis=1) - np.nanmin(values, axis=1) > EPS, index=table.index)
        per_judge[str(judge)] = {"flip_rate": float(flipped.mean()), "n_item_units": len(flipped)}
        by_item = flipped.groupby(level=[QID, ITEM]).agg(["size", "mean"])
        for (qid, item), row in by_item.iterrows():
            crit = criteria.get(str(qid), [])
            rows.append({"judge": str(judge), QID: qid, ITEM: int(item),
                         "criterion": crit[int(item) - 1] if 0 < int(item) <= len(crit) else None,
                         "n_answers": int(row["size"]), "flip_rate": float(row["mean"])})
    frame = pd.DataFrame(rows, columns=columns)
    return per_judge, frame.sort_values(["flip_rate", "n_answers"], ascending=False, kind="stable") \
        .reset_index(drop=True)


# --------------------------------------------------------------------------- decomposition

#: The sources of a row's variance, in the order tables show them.
SOURCES = ("tasks", "answers", "judges")


def _not_estimable(cells: Sequence[Sequence[Sequence[float]]]) -> dict[str, str]:
    notes = {}
    if not any(len(answer) >= 2 for task in cells for answer in task):
        notes["judges"] = ("no answer was graded twice (no judge replicate, or identical answers graded once "
                           "from the cache): judge noise is inside the answers' share")
    if not any(len(task) >= 2 for task in cells):
        notes["answers"] = ("one distinct answer per task (no decoding replicate, or replicates that came back "
                            "identical): answer sampling is inside the tasks' share")
    return notes


def split(cells: Sequence[Sequence[Sequence[float]]], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> dict:
    """Variance components (pp²) of one grading's task score by expected mean squares, each with
    a percentile interval from resampling tasks, and the sd (pp) of the row's score they imply.

    ``cells[t][a]`` holds the distinct gradings of answer a of task t (tables.gradings). A
    component the design cannot separate is None with its reason; a negative estimate (the
    mean squares of a small sample can order themselves so) is kept and listed in ``negative``.
    """
    fit = stats.nested_components(cells)
    notes = _not_estimable(cells)
    var = {k: None if k in notes or fit["var"][k] is None else 1e4 * fit["var"][k] for k in SOURCES}
    summary = stats.task_summaries(cells)
    ci: dict[str, tuple[float | None, float | None]] = {k: (None, None) for k in SOURCES}
    if summary.shape[0] >= 2:
        idx = np.random.default_rng(boot.seed).integers(0, summary.shape[0], (boot.resamples, summary.shape[0]))
        draws = stats.components_of(summary[idx])
        ci = {k: stats.percentile_interval(1e4 * draws[k], boot.level) if var[k] is not None else (None, None)
              for k in SOURCES}
    n_tasks = len(cells)
    answers = [len(task) for task in cells]
    grades = [sum(len(a) for a in task) for task in cells]
    row_var = None
    if n_tasks and var["tasks"] is not None:
        row_var = (var["tasks"] + (var["answers"] or 0.0) * float(np.mean([1 / a for a in answers]))
                   + (var["judges"] or 0.0) * float(np.mean([1 / n for n in grades]))) / n_tasks
    return {"var_pp2": var, "ci_pp2": ci, "negative": [k for k in fit["negative"] if var[k] is not None],
            "sd_pp": {k: None if v is None or v < 0 else float(np.sqrt(v)) for k, v in var.items()},
            "row_sd_pp": None if row_var is None or row_var < 0 else float(np.sqrt(row_var)),
            "n_tasks": n_tasks, "n_distinct_answers": int(sum(answers)), "n_distinct_gradings": int(sum(grades)),
            "not_estimable": notes}


# --------------------------------------------------------------------------- where judges split


def judge_splits(items: pd.DataFrame, criteria: dict[str, list[str]], top: int = 20) -> pd.DataFrame:
    """The rubric items the panel disagrees on most: per (task, item), over the answers every
    listed judge graded, the share where the judges' points differ and each judge's mean points.

    ``items`` has a row per (unit, judge, question_id, item) with points (one grading: the
    caller passes one replicate's rows). Sorted by that share, then by the mean spread.
    """
    if not len(items):
        return pd.DataFrame(columns=[QID, ITEM, "criterion", "n_answers", "split_rate", "mean_spread"])
    table = items.groupby([UNIT, QID, ITEM, JUDGE], sort=True)[POINTS].first().unstack(JUDGE)
    table = table[table.notna().sum(axis=1) >= 2]
    if not len(table):
        return pd.DataFrame(columns=[QID, ITEM, "criterion", "n_answers", "split_rate", "mean_spread"])
    spread = table.max(axis=1) - table.min(axis=1)
    grouped = pd.DataFrame({"split": spread > EPS, "spread": spread}).groupby(level=[QID, ITEM])
    out = grouped.agg(n_answers=("split", "size"), split_rate=("split", "mean"), mean_spread=("spread", "mean"))
    means = table.groupby(level=[QID, ITEM]).mean().add_prefix("points_")
    out = out.join(means).reset_index()
    out.insert(2, "criterion", [(criteria.get(str(q), []) + [None] * int(i))[int(i) - 1]
                                for q, i in zip(out[QID], out[ITEM], strict=True)])
    out = out[out["split_rate"] > 0]
    return out.sort_values(["split_rate", "mean_spread"], ascending=False, kind="stable").head(top) \
        .reset_index(drop=True)
