"""A sweep's parent run: its children as an MLflow table, the sweep's result, and its closing.

The parent holds what the sweep found, not an empty row: a metric per point and kind
(``<swept key>/<value>/overall_pct``, the chart section being the swept key), and, once the
sweep is closed and each job's per-task scores can be read from its folder, each point
against the sweep's first point: the paired difference of the per-task scores in pp with
its 95 % paired-t interval (``<point>/diff_pp``, ``diff_ci_low_pp``, ``diff_ci_high_pp``),
its p-value Holm-adjusted across the sweep's comparisons (``<point>/p_holm``), as the report
reads a sweep, and a verdict tag ``verdict/<point>`` saying what was tested. The table
``points.json`` holds the same rows. The sweep's prompt cache is there too: each child's
``prompt_cache/…`` metrics summed, the hit rate of the sums.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wildtrace.tracking import readable
from wildtrace.tracking.store import replace_table

if TYPE_CHECKING:  # imported where a table is made: the run's process reads a sweep's parent without pandas
    import pandas as pd

CHILD_COLUMNS = ("overall_pct", "scored_pct", "n_scored", "n_total")
CHILDREN_TABLE = "children.json"
POINTS_TABLE = "points.json"
#: A sweep: ``wildtrace.sweep`` is ``parent`` or ``child``; the parent's swept keys, comma-joined;
#: each child's value of a swept key under ``sweep.<key>``.
SWEEP_TAG, SWEEP_KEYS_TAG, SWEPT_PREFIX = "wildtrace.sweep", "wildtrace.sweep.keys", "sweep."
#: The paired interval's level.
LEVEL = 0.95
#: The prompt cache's metrics (``rundir.prompt_cache_metrics``): what the parent sums over the sweep.
PROMPT_CACHE = "prompt_cache/"


def swept_keys(client: Any, parent_run_id: str | None) -> list[str]:
    """The keys a sweep's parent run says it sweeps ([] without a parent, or a parent that does not say)."""
    if not parent_run_id:
        return []
    return keys_of(client.get_run(parent_run_id).data.tags)


def keys_of(tags: Mapping[str, str]) -> list[str]:
    """The swept keys a parent's tags hold."""
    return [k for k in tags.get(SWEEP_KEYS_TAG, "").split(",") if k]


def point_of(tags: Mapping[str, str], keys: Sequence[str]) -> str:
    """A child's point as a metric key's first parts: ``decoding.temperature/0.4`` (each swept key, its value)."""
    return "/".join(f"{k}/{tags.get(SWEPT_PREFIX + k, '')}".replace("=", "_").replace(",", "_") for k in keys)


def children_of(client: Any, parent: Any) -> list:
    """The parent's child runs (logged or still running)."""
    return client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                              max_results=5000)


def children_frame(parent: Any, children: Sequence[Any]) -> pd.DataFrame:
    """A row per child run (logged or still running): id, name, status, point, overrides, headline."""
    import pandas as pd

    keys = keys_of(parent.data.tags)
    rows = [{"run_id": c.info.run_id, "run_name": c.info.run_name, "status": c.info.status,
             "point": point_of(c.data.tags, keys) if keys else None,
             "overrides": c.data.tags.get("hydra.overrides", ""),
             **{k: c.data.metrics.get(k) for k in CHILD_COLUMNS}} for c in children]
    columns = ["run_id", "run_name", "status", "point", "overrides", *CHILD_COLUMNS]
    return pd.DataFrame(rows, columns=columns).sort_values("overrides", kind="stable").reset_index(drop=True)


def point_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """``<point>/overall_pct`` and ``<point>/scored_pct`` of each finished child with a point."""
    out: dict[str, float] = {}
    for row in frame.to_dict("records"):
        for key in ("overall_pct", "scored_pct"):
            if row["point"] and row[key] is not None and not math.isnan(row[key]):
                out[f"{row['point']}/{key}"] = float(row[key])
    return out


def prompt_cache_totals(children: Sequence[Any]) -> dict[str, float]:
    """The sweep's prompt cache, from its children's ``prompt_cache/…`` metrics: per endpoint the tokens
    and the saving summed, the hit rate of the sums (``cached_input_tokens / input_tokens``), and the
    sweep's saving. The first job to reach a task sends its repeats too, so one job's figures are
    most of the sweep's and the others' nothing: the sum is what the sweep did. A saving some child
    does not know (its run_stats say null) leaves the sum unknown: no metric."""
    sums: dict[str, float] = {}
    unknown: set[str] = set()
    for child in children:
        metrics = child.data.metrics
        for key, value in metrics.items():
            if key.startswith(PROMPT_CACHE) and not key.endswith("/hit_rate"):
                sums[key] = sums.get(key, 0.0) + value
        for key in [k for k in metrics if k.startswith(PROMPT_CACHE) and k.endswith("/input_tokens")]:
            endpoint = key[:-len("input_tokens")]
            if endpoint + "saved_usd" not in metrics:
                unknown |= {endpoint + "saved_usd", PROMPT_CACHE + "saved_usd"}
    out = {k: readable.usd(v) if k.endswith("saved_usd") else v for k, v in sums.items() if k not in unknown}
    for key, total in sums.items():
        if key.endswith("/input_tokens") and total:
            out[key[:-len("input_tokens")] + "hit_rate"] = readable.fraction(
                sums.get(key[:-len("input_tokens")] + "cached_input_tokens", 0.0) / total)
    return out


def task_scores(job_dir: Path) -> dict[str, float] | None:
    """question_id → the task's score in the All view (0 without one) from a job folder's scores.json."""
    try:
        scores = json.loads((job_dir / "scores.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {t["question_id"]: float(t.get("score") or 0.0) for t in scores.get("tasks", [])}


def paired(base: Mapping[str, float], other: Mapping[str, float]) -> dict[str, Any] | None:
    """The paired difference other − base over their common tasks, in pp: the report's paired t
    (``report.statistics.stats.paired_t``) with its interval and two-sided p."""
    from wildtrace.report.statistics import stats

    common = sorted(set(base) & set(other))
    if len(common) < 2:
        return None
    d = stats.paired_t([100.0 * (other[q] - base[q]) for q in common], LEVEL)
    return {"diff_pp": d["mean_diff"], "diff_ci_low_pp": d["ci_low"], "diff_ci_high_pp": d["ci_high"],
            "p_value": d["p_value"], "n_tasks": d["n"]}


def verdicts(frame: pd.DataFrame, job_dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Each point against the first job's point (paired over tasks), from the job folders' scores;
    the p-values Holm-adjusted across the sweep's comparisons (``stats.holm``, as the report's)."""
    from wildtrace.report.statistics import stats

    by_run = {}
    for job in sorted(job_dirs, key=lambda p: int(p.name) if p.name.isdigit() else 0):
        try:
            run_id = json.loads((job / "mlflow.json").read_text(encoding="utf-8")).get("run_id")
        except (OSError, ValueError):
            continue
        scores = task_scores(job)
        if run_id and scores is not None:
            by_run[run_id] = scores
    points = {r["run_id"]: r["point"] for r in frame.to_dict("records") if r["point"] and r["run_id"] in by_run}
    if len(points) < 2:
        return []
    base_run = next(r for r in by_run if r in points)
    tested = [(points[run_id], result) for run_id in points if run_id != base_run
              if (result := paired(by_run[base_run], by_run[run_id])) is not None]
    adjusted = stats.holm([result["p_value"] for _, result in tested])
    rows = []
    for (point, result), p_holm in zip(tested, adjusted, strict=True):
        apart = p_holm is not None and p_holm < 1.0 - LEVEL
        words = (f"{'distinguishable from' if apart else 'within noise of'} {points[base_run]}: "
                 f"{result['diff_pp']:+.2f} pp [{result['diff_ci_low_pp']:+.2f}, {result['diff_ci_high_pp']:+.2f}] "
                 f"(paired t over {result['n_tasks']} tasks, {LEVEL:.0%} interval; Holm-adjusted p = "
                 f"{_p(p_holm)} across the sweep's {len(tested)} comparison{'s' * (len(tested) != 1)})")
        rows.append({"point": point, "baseline": points[base_run],
                     **{k: _pp(v) if k.endswith("_pp") else v for k, v in result.items()},
                     "p_holm": p_holm, "distinguishable": apart, "verdict": words})
    return rows


def _pp(value: float | None) -> float | None:
    """A difference in pp to 0.01."""
    return None if value is None else round(value, 2)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def refresh_parent(client: Any, parent_run_id: str, close: str | None = None,
                   job_dirs: Sequence[Path] = ()) -> pd.DataFrame:
    """Rebuild the parent's children table and per-point metrics from the store; ``job_dirs``: the
    sweep's job folders, for the paired verdicts; ``close``: terminate it with that status."""
    from mlflow.entities import Metric, RunTag

    import pandas as pd

    parent = client.get_run(parent_run_id)
    children = children_of(client, parent)
    frame = children_frame(parent, children)
    replace_table(client, parent_run_id, frame, CHILDREN_TABLE)
    metrics = {**point_metrics(frame), **prompt_cache_totals(children)}
    rows = verdicts(frame, job_dirs) if job_dirs else []
    tags = []
    for row in rows:
        metrics.update({f"{row['point']}/{k}": float(row[k]) for k in ("diff_pp", "diff_ci_low_pp", "diff_ci_high_pp",
                                                                       "p_holm") if row[k] is not None})
        tags.append(RunTag(f"verdict/{row['point']}", row["verdict"]))
    if metrics or tags:
        client.log_batch(parent_run_id, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()], tags=tags)
    if rows:
        replace_table(client, parent_run_id, pd.DataFrame(rows), POINTS_TABLE)
    if close:
        client.set_terminated(parent_run_id, close)
    return frame
