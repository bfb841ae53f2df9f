"""The views of ``core.views`` as DataFrame functions, for the report and the MLflow metrics.

Long format in, small frames out; every number is computed by ``core.views`` (so a frame's
view is the run's headline, bit for bit). The run's own process never imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from wildtrace.core import views
from wildtrace.core.records import JudgmentStatus, TaskStatus
from wildtrace.core.views import JUDGE, QID, REASON, SCORE, STATUS, TOTAL


def judgments_frame(rows: Iterable[Mapping]) -> pd.DataFrame:
    """One row per (task, judge) call, with at least question_id, judge, status, score."""
    frame = pd.DataFrame(list(rows), columns=None)
    if frame.empty:
        frame = pd.DataFrame(columns=[QID, JUDGE, STATUS, SCORE, TOTAL, REASON])
    return frame


def records(frame: pd.DataFrame) -> list[dict]:
    """A frame's rows as the mappings ``core.views`` reads."""
    return frame.to_dict("records") if len(frame) else []


def task_scores(answer_status: Mapping[str, str | None], judgments: pd.DataFrame) -> pd.DataFrame:
    """Per task: status and score, as ``views.task_rows`` gives them."""
    return pd.DataFrame(views.task_rows(answer_status, records(judgments)), columns=[QID, STATUS, SCORE])


def judge_means(judgments: pd.DataFrame) -> dict[str, dict]:
    """``views.judge_means`` of a judgments frame."""
    return views.judge_means(records(judgments))


def breakdown(tasks: pd.DataFrame, meta: pd.DataFrame, by: str) -> pd.DataFrame:
    """Both views per value of a task attribute (paradigm, context_tier)."""
    merged = tasks.merge(meta[[QID, by]], on=QID, how="left")
    rows = []
    for value, group in merged.groupby(by, dropna=False, sort=True):
        scored, n_scored = views.scored_view(records(group))
        rows.append({by: value, "all": views.all_view(records(group)), "scored": scored, "n": len(group),
                     "n_scored": n_scored})
    return pd.DataFrame(rows, columns=[by, "all", "scored", "n", "n_scored"])


def matched_panel(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Robustness check (spec §5): each model's mean over the tasks *every* model scored.

    ``runs`` maps a model label to its task_scores frame. Not the headline denominator:
    it drops exactly the long-context access failures the All view is meant to count.
    """
    if not runs:
        return pd.DataFrame(columns=["model", "matched", "n"])
    scored_sets = [set(f.loc[f[STATUS] == TaskStatus.SCORED, QID]) for f in runs.values()]
    common = set.intersection(*scored_sets)
    rows = []
    for label, frame in runs.items():
        subset = frame[frame[QID].isin(common)]
        rows.append({"model": label, "matched": float(subset[SCORE].astype(float).mean()) if len(subset) else None,
                     "n": len(subset)})
    return pd.DataFrame(rows, columns=["model", "matched", "n"])


def agreement(judgments: pd.DataFrame) -> dict[str, dict]:
    """Pairwise judge agreement over tasks both judges scored: mean |a − b|, Pearson r, n.

    Keyed ``"a~b"`` (sorted). r is None with fewer than two shared tasks or no variance.
    """
    scored = judgments[judgments[STATUS] == JudgmentStatus.SCORED] if len(judgments) else judgments
    if not len(scored):
        return {}
    table = scored.pivot_table(index=QID, columns=JUDGE, values=SCORE, aggfunc="mean")
    judges = sorted(map(str, judgments[JUDGE].unique()))
    out: dict[str, dict] = {}
    for i, a in enumerate(judges):
        for b in judges[i + 1:]:
            if a not in table or b not in table:
                out[f"{a}~{b}"] = {"mad": None, "corr": None, "n": 0}
                continue
            both = table[[a, b]].dropna()
            corr = None
            # A column of equal floats has a std of ~1e-17, not 0: test the range instead.
            if len(both) >= 2 and both[a].max() > both[a].min() and both[b].max() > both[b].min():
                corr = float(both[a].corr(both[b]))
            out[f"{a}~{b}"] = {"mad": float((both[a] - both[b]).abs().mean()) if len(both) else None,
                               "corr": corr, "n": len(both)}
    return out
