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

from collections.abc import Hashable, Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from wildtrace.report import stats
from wildtrace.report.stats import DEFAULT_BOOTSTRAP, Bootstrap

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


def intra_rater(long: pd.DataFrame) -> dict[str, dict]:
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
        out[str(judge)] = {
            "krippendorff_alpha_interval": stats.krippendorff_interval(values.T),
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


def answer_sets(answer_ids: Sequence[Hashable]) -> list[list[int]]:
    """Column indices grouped by answer set (decoding replicate), in first-seen order."""
    sets: dict[Hashable, list[int]] = {}
    for i, a in enumerate(answer_ids):
        sets.setdefault(a, []).append(i)
    return list(sets.values())


def _task_bootstrap_var(per_task: np.ndarray, boot: Bootstrap) -> float:
    """Variance of the mean over tasks across ``boot.resamples`` resamples of the tasks."""
    rng = np.random.default_rng(boot.seed)
    draws = np.concatenate([per_task[rng.integers(0, len(per_task), size=(min(stats.CHUNK, boot.resamples - i),
                                                                            len(per_task)))].mean(axis=1)
                            for i in range(0, boot.resamples, stats.CHUNK)])
    return float(draws.var(ddof=1)) if len(draws) > 1 else 0.0


def decompose(matrix: np.ndarray, answer_ids: Sequence[Hashable], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> dict:
    """The variance of a row's overall score split into tasks, answers and judges (0–1² units).

    ``matrix`` is tasks × runs of All-view task scores (unscored = 0); ``answer_ids`` names
    each run's answer set (its decoding replicate). The row's overall is the mean over runs,
    so run k weighs 1/R and answer set d weighs R_d/R. Returns var (a None component is not
    estimable) and, for each None, why.
    """
    m = np.nan_to_num(stats.as_matrix(matrix), nan=0.0)
    n_tasks, n_runs = m.shape
    sets = answer_sets(answer_ids)
    sizes = np.array([len(s) for s in sets], dtype=float)
    var: dict[str, float | None] = {"tasks": None, "answers": None, "judges": None}
    notes: dict[str, str] = {}
    if n_tasks == 0:
        return {"var": var, "notes": {"tasks": "no task"}, "n_answer_replicates": len(sets),
                "n_judge_replicates": int(sizes.max()) if len(sizes) else 0}
    judge_within = None  # σ²_J: the variance of one grading about its answer set's mean
    graded_again = [s for s in sets if len(s) >= 2]
    if graded_again:
        ss = sum(float(((m[:, s] - m[:, s].mean(axis=1, keepdims=True)) ** 2).sum()) for s in graded_again)
        judge_within = ss / (n_tasks * sum(len(s) - 1 for s in graded_again))
        var["judges"] = judge_within / (n_runs * n_tasks)
    else:
        notes["judges"] = ("each answer was graded once (no judge replicate): judge noise is inside the "
                           "answers' share" if len(sets) > 1 else "no judge replicate")
    if len(sets) >= 2:
        set_means = np.column_stack([m[:, s].mean(axis=1) for s in sets])
        between = float(set_means.var(axis=1, ddof=1).mean())  # E = σ²_A + σ²_J · mean(1/R_d)
        answer_var = max(0.0, between - (judge_within or 0.0) * float(np.mean(1.0 / sizes)))
        var["answers"] = answer_var * float(((sizes / n_runs) ** 2).sum()) / n_tasks
    else:
        notes["answers"] = ("one answer set (no decoding replicate): answer sampling cannot be told apart from "
                            "task sampling and is inside the tasks' share")
    total = _task_bootstrap_var(m.mean(axis=1), boot)
    var["tasks"] = max(0.0, total - (var["answers"] or 0.0) - (var["judges"] or 0.0))
    return {"var": var, "notes": notes, "n_answer_replicates": len(sets),
            "n_judge_replicates": int(sizes.max())}


def sd_pp(var: dict[str, float | None]) -> dict[str, float | None]:
    """Variances on the 0–1 scale → standard deviations in percentage points."""
    return {k: None if v is None else 100.0 * float(np.sqrt(v)) for k, v in var.items()}


# --------------------------------------------------------------------------- gaps against noise


def replicate_weights(sets: Sequence[Sequence[int]], n_runs: int, rng: np.random.Generator,
                      size: int) -> np.ndarray:
    """size × runs weights from a nested resample: answer sets with replacement, then each chosen
    set's gradings with replacement (as many as it has); a run's weight is its share of the draws."""
    weights = np.zeros((size, n_runs))
    chosen = rng.integers(0, len(sets), size=(size, len(sets)))
    for d, columns in enumerate(sets):
        times = (chosen == d).sum(axis=1)  # how often set d was drawn, per resample
        counts = rng.multinomial(times * len(columns), [1.0 / len(columns)] * len(columns))
        weights[:, list(columns)] += counts
    return weights / weights.sum(axis=1, keepdims=True)


def noisy_difference(a: np.ndarray, answers_a: Sequence[Hashable], b: np.ndarray, answers_b: Sequence[Hashable],
                     boot: Bootstrap = DEFAULT_BOOTSTRAP) -> dict:
    """Mean of b − a over paired tasks (rows of both matrices, tasks × runs, All view) with a
    percentile interval from resampling the tasks (paired) and each side's replicates.

    ``within_noise`` is True when the interval holds 0: the difference is no larger than what
    task sampling and the measured answer and judge noise produce. None without a task.
    """
    ma, mb = (np.nan_to_num(stats.as_matrix(x), nan=0.0) for x in (a, b))
    n = ma.shape[0]
    if n == 0:
        return {"n": 0, "mean_diff": None, "ci_low": None, "ci_high": None, "within_noise": None}
    rng = np.random.default_rng(boot.seed)
    idx = rng.integers(0, n, size=(boot.resamples, n))
    wa = replicate_weights(answer_sets(answers_a), ma.shape[1], rng, boot.resamples)
    wb = replicate_weights(answer_sets(answers_b), mb.shape[1], rng, boot.resamples)
    draws = np.concatenate([(mb[idx[i:i + stats.CHUNK]].mean(axis=1) * wb[i:i + stats.CHUNK]).sum(axis=1)
                            - (ma[idx[i:i + stats.CHUNK]].mean(axis=1) * wa[i:i + stats.CHUNK]).sum(axis=1)
                            for i in range(0, boot.resamples, stats.CHUNK)])
    lo, hi = stats.percentile_interval(draws, boot.level)
    within = None if lo is None or hi is None else bool(lo <= 0.0 <= hi)
    return {"n": int(n), "mean_diff": float((mb.mean(axis=1) - ma.mean(axis=1)).mean()), "ci_low": lo,
            "ci_high": hi, "within_noise": within}


def noise_words(within: bool | None, judge_replicated: bool, answer_replicated: bool) -> str:
    """The page's plain-words marker for a gap, naming the noise that was measured."""
    if within is None:
        return "no shared task"
    measured = " and ".join(n for n, present in (("answer", answer_replicated), ("judge", judge_replicated))
                            if present)
    if within:
        return f"within {measured} noise" if measured else "within task sampling (no replicate to measure " \
                                                           "judge noise)"
    return "beyond noise" if measured else "beyond task sampling (judge noise not measured)"


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
