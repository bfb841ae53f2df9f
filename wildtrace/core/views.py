"""Panel reduction and the two denominator views (spec §5), as DataFrame functions.

Long format in, small frames and dicts out. Column names are defined once here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from wildtrace.core.records import AnswerStatus, JudgmentRecord, JudgmentStatus, TaskStatus
from wildtrace.core.judging import panel_mean

# Column names, defined once.
QID, JUDGE, STATUS, SCORE, TOTAL, REASON = "question_id", "judge", "status", "score", "total", "reason"
PARADIGM, TIER = "paradigm", "context_tier"


def judgments_frame(rows: Iterable[Mapping]) -> pd.DataFrame:
    """One row per (task, judge) call, with at least question_id, judge, status, score."""
    frame = pd.DataFrame(list(rows), columns=None)
    if frame.empty:
        frame = pd.DataFrame(columns=[QID, JUDGE, STATUS, SCORE, TOTAL, REASON])
    return frame


def task_scores(answer_status: Mapping[str, str | None], judgments: pd.DataFrame) -> pd.DataFrame:
    """Per task: status and score (the mean of the available judges).

    ``answer_status`` maps every task of the run to its answer status (answered, failed,
    out_of_context_scope, missing). Answered tasks with no available judge are
    ``unscored``; only ``scored`` tasks carry a score.
    """
    available = judgments[judgments[STATUS] == JudgmentStatus.SCORED] if len(judgments) else judgments
    by_task = {qid: list(group[SCORE].astype(float)) for qid, group in available.groupby(QID)} if len(available) else {}
    held = set(judgments.loc[judgments[STATUS] == JudgmentStatus.BUDGET_EXHAUSTED, QID]) if len(judgments) else set()
    rows = []
    for qid, status in answer_status.items():
        score = panel_mean(by_task.get(qid, [])) if status == AnswerStatus.ANSWERED else None
        if status == AnswerStatus.ANSWERED and qid in held:
            status, score = TaskStatus.BUDGET_EXHAUSTED, None  # a judge the cap held back: the panel is incomplete
        elif status == AnswerStatus.ANSWERED:
            status = TaskStatus.UNSCORED if score is None else TaskStatus.SCORED
        rows.append({QID: qid, STATUS: status, SCORE: score})
    return pd.DataFrame(rows, columns=[QID, STATUS, SCORE])


def task_outcome(answer_status: str, judgments: Iterable[JudgmentRecord]) -> tuple[TaskStatus, float | None]:
    """One task's status and score from its answer status and judgment records (as task_scores does)."""
    if answer_status != AnswerStatus.ANSWERED:
        return TaskStatus(answer_status), None
    judgments = list(judgments)
    if any(j.status == JudgmentStatus.BUDGET_EXHAUSTED for j in judgments):
        return TaskStatus.BUDGET_EXHAUSTED, None
    score = panel_mean(j.score for j in judgments if j.status == JudgmentStatus.SCORED)
    return (TaskStatus.UNSCORED, None) if score is None else (TaskStatus.SCORED, score)


def scored_view(tasks: pd.DataFrame) -> tuple[float | None, int]:
    """Scored: mean over valid scored responses, and their number n."""
    scored = tasks.loc[tasks[STATUS] == TaskStatus.SCORED, SCORE].astype(float)
    return (float(scored.mean()) if len(scored) else None), len(scored)


def all_view(tasks: pd.DataFrame, n_total: int | None = None) -> float | None:
    """All (All481 on the full release): every attempted task is the denominator.

    Missing, failed, unscored and out-of-context rows count as 0, and so do budget_exhausted
    ones (calls a spend cap held back), as the spec counts a missing answer. ``n_total`` defaults
    to the number of rows; pass the release size to zero-fill tasks absent from ``tasks``.
    """
    denominator = len(tasks) if n_total is None else n_total
    if denominator == 0:
        return None
    return float(tasks[SCORE].astype(float).fillna(0.0).sum()) / denominator


def judge_means(judgments: pd.DataFrame) -> dict[str, dict]:
    """Per judge: mean score over its available judgments, n, and the unavailable rate."""
    out: dict[str, dict] = {}
    for judge, group in judgments.groupby(JUDGE, sort=True):
        group = group[group[STATUS] != JudgmentStatus.BUDGET_EXHAUSTED]  # never sent: not the judge's failure
        ok = group[group[STATUS] == JudgmentStatus.SCORED]
        out[str(judge)] = {
            "mean": float(ok[SCORE].astype(float).mean()) if len(ok) else None,
            "n": len(ok),
            "n_unavailable": int(len(group) - len(ok)),
            "unavailable_rate": float((len(group) - len(ok)) / len(group)) if len(group) else None,
        }
    return out


def percent(value: float | None) -> float | None:
    """0–1 → %, rounded for the headline (None stays None)."""
    return None if value is None else round(100.0 * value, 4)


def summarize(tasks: pd.DataFrame, judgments: pd.DataFrame, n_total: int | None = None) -> dict:
    """The headline block of scores.json: both views and the counts."""
    scored, n_scored = scored_view(tasks)
    overall = all_view(tasks, n_total)
    counts = tasks[STATUS].value_counts()
    return {
        "overall": percent(overall),
        "scored": percent(scored),
        "n_total": int(n_total if n_total is not None else len(tasks)),
        "n_scored": n_scored,
        "n_out_of_context": int(counts.get(TaskStatus.OUT_OF_CONTEXT, 0)),
        "n_failed": int(counts.get(TaskStatus.FAILED, 0)),
        "n_unscored": int(counts.get(TaskStatus.UNSCORED, 0)),
        "n_missing": int(counts.get(TaskStatus.MISSING, 0)),
        "n_budget_exhausted": int(counts.get(TaskStatus.BUDGET_EXHAUSTED, 0)),
        "judges": judge_means(judgments),
    }


def breakdown(tasks: pd.DataFrame, meta: pd.DataFrame, by: str) -> pd.DataFrame:
    """Both views per value of a task attribute (paradigm, context_tier)."""
    merged = tasks.merge(meta[[QID, by]], on=QID, how="left")
    rows = []
    for value, group in merged.groupby(by, dropna=False, sort=True):
        scored, n_scored = scored_view(group)
        rows.append({by: value, "all": all_view(group), "scored": scored, "n": len(group), "n_scored": n_scored})
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


def token_totals(rows: Iterable[Mapping], by: str | None = None) -> dict[str, dict[str, int]]:
    """Sum prompt / completion / reasoning tokens over call rows, per ``by`` value (or "all")."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        usage = row.get("usage") or {}
        bucket = out.setdefault(str(row.get(by)) if by else "all", {"prompt": 0, "completion": 0, "reasoning": 0})
        for key, field in (("prompt", "prompt_tokens"), ("completion", "completion_tokens"),
                           ("reasoning", "reasoning_tokens")):
            if isinstance(usage.get(field), int):
                bucket[key] += usage[field]
    return out
