"""The judge-family check beside the spec's claim (§4: "no same-family exclusion — we verified
family judges show no measurable bias on this set"), over the baseline leaderboard's points.

Families come from the runs' configs (``family`` in each model and judge file); a model or judge
without one is left out. The method is ``statistics.family``'s; this module feeds it the runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from wildtrace.core import views
from wildtrace.core.records import JudgmentStatus
from wildtrace.report.statistics import family, stats
from wildtrace.report.tables import Group, _pct, judgments_of, universe

#: family.csv's columns (units in the names: pp of the 0–100 score scale).
COLUMNS = ["judge", "judge_family", "same_family_models", "n_same_family_models", "n_other_models", "n_tasks",
           "same_family_offset_pp", "other_offset_pp", "family_bias_pp", "ci_low_pp", "ci_high_pp", "p_value",
           "p_holm", "distinguishable", "small_n", "rank_changes_without_judge", "n_models_moved", "tau_without_judge"]
#: What the page says where no judge shares a family with a contestant, or none is known.
HOW_TO = ("Judge-family check not shown: set family in the model and judge files (conf/model/*.yaml, "
          "conf/judge/*.yaml, e.g. family: qwen; or model.family=qwen on the command line); it needs a "
          "contestant of a judge's family and one of another.")


def model_family(g: Group) -> str | None:
    return (g.runs[0].config.get("model") or {}).get("family")


def judge_families(points: Sequence[Group]) -> dict[str, str]:
    """judge key → its family, as the first point that has the judge says (judges without one left out)."""
    out: dict[str, str] = {}
    for g in points:
        for key, spec in ((g.runs[0].config.get("judge_panel") or {}).get("judges") or {}).items():
            if isinstance(spec, dict) and spec.get("family"):
                out.setdefault(key, str(spec["family"]))
    return out


def cube(g: Group, tasks: Sequence[str], judges: Sequence[str]) -> np.ndarray:
    """runs × tasks × judges: each judge's 0–1 score of each task's answer, NaN where it gave none."""
    layers = []
    for run in g.runs:
        long = judgments_of(run)
        long = long[long[views.STATUS] == JudgmentStatus.SCORED]
        table = long.pivot_table(index=views.QID, columns=views.JUDGE, values=views.SCORE, aggfunc="mean")
        layers.append(table.reindex(index=list(tasks), columns=list(judges)).to_numpy(dtype=float))
    return np.stack(layers)


def family_frame(points: Sequence[Group], level: float = stats.LEVEL) -> pd.DataFrame:
    """family.csv: a row per judge with a known family: its offset against the other judges on
    same-family contestants and on the others, their difference with a paired t interval over
    tasks (Holm-adjusted across the judges), and how the leaderboard's ranks move without it."""
    judged = judge_families(points)
    models = {str(g.runs[0].config["model"]["name"]): g for g in points}
    if not judged or not any(model_family(g) for g in points):
        return pd.DataFrame(columns=COLUMNS)
    judges = sorted({k for g in points for k in (g.runs[0].config.get("judge_panel") or {}).get("judges") or {}})
    tasks = universe([r for g in points for r in g.runs])
    cubes = {m: cube(g, tasks, judges) for m, g in models.items()}
    everyone = np.ones(len(judges), dtype=bool)
    full = {m: float(family.panel_scores(c, everyone).mean()) for m, c in cubes.items()}
    full_rank = dict(zip(full, stats.ranks(list(full.values())), strict=True))
    rows: list[dict[str, Any]] = []
    for judge, fam in sorted(judged.items()):
        j = judges.index(judge)
        graded = [m for m, c in cubes.items() if np.isfinite(c[..., j]).any() and model_family(models[m])]
        same = [m for m in graded if model_family(models[m]) == fam]
        other = [m for m in graded if model_family(models[m]) != fam]
        bias = family.family_bias([family.offsets(cubes[m], j) for m in same],
                                  [family.offsets(cubes[m], j) for m in other], level) if same and other else None
        without = {m: float(family.panel_scores(c, everyone & (np.arange(len(judges)) != j)).mean())
                   for m, c in cubes.items()}
        rank = dict(zip(without, stats.ranks(list(without.values())), strict=True))
        moved = [f"{m}: {full_rank[m]}→{rank[m]}" for m in sorted(full, key=lambda m: (full_rank[m], m))
                 if rank[m] != full_rank[m]]
        rows.append({"judge": judge, "judge_family": fam, "same_family_models": ",".join(sorted(same)),
                     "n_same_family_models": len(same), "n_other_models": len(other),
                     "n_tasks": None if bias is None else bias["n"],
                     "same_family_offset_pp": None if bias is None else _pct(bias["same_offset"]),
                     "other_offset_pp": None if bias is None else _pct(bias["other_offset"]),
                     "family_bias_pp": None if bias is None else _pct(bias["mean_diff"]),
                     "ci_low_pp": None if bias is None else _pct(bias["ci_low"]),
                     "ci_high_pp": None if bias is None else _pct(bias["ci_high"]),
                     "p_value": None if bias is None else bias["p_value"],
                     "small_n": None if bias is None else bias["small_n"],
                     "rank_changes_without_judge": "; ".join(moved), "n_models_moved": len(moved),
                     "tau_without_judge": stats.kendall_tau(list(full.values()), list(without.values()))})
    for row, p in zip(rows, stats.holm([r["p_value"] for r in rows]), strict=True):
        row["p_holm"] = p
        row["distinguishable"] = None if p is None else bool(p < 1.0 - level)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["n_tasks"] = pd.Series([r["n_tasks"] for r in rows], index=frame.index, dtype=object)  # whole, or None
    return frame


def shown(frame: pd.DataFrame) -> bool:
    """Whether the check has a number to show: some judge with contestants of its family and of others."""
    return bool(len(frame)) and frame["family_bias_pp"].notna().any()
