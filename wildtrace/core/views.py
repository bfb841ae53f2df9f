"""Panel reduction and the two denominator views (spec §5), over plain rows.

Rows in (mappings with question_id, judge, status, score), small lists and dicts out;
column names are defined once here. No pandas: the run's own process computes its
headline with these and never imports it (about 90 MB of its peak memory at full scale).
``core.frames`` holds the same views as DataFrame functions for the report and the
MLflow metrics, computed by these.

Means are summed as numpy (and so pandas) sums a float column, bit for bit (``mean``), so
a headline is the number earlier releases wrote and the report recomputes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wildtrace.core.judging import panel_mean
from wildtrace.core.records import AnswerStatus, JudgmentRecord, JudgmentStatus, TaskStatus

# Column names, defined once.
QID, JUDGE, STATUS, SCORE, TOTAL, REASON = "question_id", "judge", "status", "score", "total", "reason"
PARADIGM, TIER = "paradigm", "context_tier"
#: numpy's pairwise summation: blocks up to this size are summed with eight accumulators.
_PAIRWISE_BLOCK = 128


def _pairwise_sum(values: Sequence[float], lo: int, n: int) -> float:
    """numpy's pairwise sum of ``values[lo:lo + n]`` (umath's pairwise_sum: the same additions, in the same order)."""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += values[i]
        return total
    if n <= _PAIRWISE_BLOCK:
        r = list(values[lo:lo + 8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[lo + i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(i, n):
            total += values[lo + k]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, lo, half) + _pairwise_sum(values, lo + half, n - half)


def sum_as_numpy(values: Iterable[float]) -> float:
    """The sum numpy (and pandas' ``Series.sum``) gives for these floats, in this order."""
    floats = [float(v) for v in values]
    return _pairwise_sum(floats, 0, len(floats)) if floats else 0.0


def mean(values: Iterable[float]) -> float | None:
    """Their mean as pandas' ``Series.mean`` gives it (None for no values)."""
    floats = [float(v) for v in values]
    return sum_as_numpy(floats) / len(floats) if floats else None


def _score(row: Mapping[str, Any]) -> float | None:
    """A row's score as a float, None when it has none (None or NaN: a row read back from a file
    that says scored without a score counts as no score, never as a crash or a NaN mean)."""
    value = row.get(SCORE)
    if value is None:
        return None
    value = float(value)
    return None if value != value else value


def task_rows(answer_status: Mapping[str, str | None], judgments: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Per task: question_id, status and score (the mean of the available judges).

    ``answer_status`` maps every task of the run to its answer status (answered, failed,
    out_of_context_scope, missing). Answered tasks with no available judge are
    ``unscored``; only ``scored`` tasks carry a score.
    """
    by_task: dict[str, list[float]] = {}
    held: set[str] = set()
    for j in judgments:
        if j.get(STATUS) == JudgmentStatus.SCORED and (score := _score(j)) is not None:
            by_task.setdefault(j[QID], []).append(score)
        elif j.get(STATUS) == JudgmentStatus.BUDGET_EXHAUSTED:
            held.add(j[QID])
    rows = []
    for qid, status in answer_status.items():
        score = panel_mean(by_task.get(qid, [])) if status == AnswerStatus.ANSWERED else None
        if status == AnswerStatus.ANSWERED and qid in held:
            status, score = TaskStatus.BUDGET_EXHAUSTED, None  # a judge the cap held back: the panel is incomplete
        elif status == AnswerStatus.ANSWERED:
            status = TaskStatus.UNSCORED if score is None else TaskStatus.SCORED
        rows.append({QID: qid, STATUS: status, SCORE: score})
    return rows


def task_outcome(answer_status: str, judgments: Iterable[JudgmentRecord]) -> tuple[TaskStatus, float | None]:
    """One task's status and score from its answer status and judgment records (as task_rows does)."""
    if answer_status != AnswerStatus.ANSWERED:
        return TaskStatus(answer_status), None
    judgments = list(judgments)
    if any(j.status == JudgmentStatus.BUDGET_EXHAUSTED for j in judgments):
        return TaskStatus.BUDGET_EXHAUSTED, None
    score = panel_mean(j.score for j in judgments if j.status == JudgmentStatus.SCORED)
    return (TaskStatus.UNSCORED, None) if score is None else (TaskStatus.SCORED, score)


def scored_view(tasks: Iterable[Mapping[str, Any]]) -> tuple[float | None, int]:
    """Scored: mean over valid scored responses, and their number n."""
    scored = [s for t in tasks if t.get(STATUS) == TaskStatus.SCORED and (s := _score(t)) is not None]
    return mean(scored), len(scored)


def all_view(tasks: Sequence[Mapping[str, Any]], n_total: int | None = None) -> float | None:
    """All (All481 on the full release): every attempted task is the denominator.

    Missing, failed, unscored and out-of-context rows count as 0, and so do budget_exhausted
    ones (calls a spend cap held back), as the spec counts a missing answer. ``n_total`` defaults
    to the number of rows; pass the release size to zero-fill tasks absent from ``tasks``.
    """
    denominator = len(tasks) if n_total is None else n_total
    if denominator == 0:
        return None
    return sum_as_numpy(_score(t) or 0.0 for t in tasks) / denominator


def judge_means(judgments: Iterable[Mapping[str, Any]]) -> dict[str, dict]:
    """Per judge: mean score over its available judgments, n, and the unavailable rate."""
    by_judge: dict[str, list[Mapping[str, Any]]] = {}
    for j in judgments:
        if j.get(JUDGE) is None:
            continue
        group = by_judge.setdefault(str(j[JUDGE]), [])
        if j.get(STATUS) != JudgmentStatus.BUDGET_EXHAUSTED:  # never sent: not the judge's failure
            group.append(j)
    out: dict[str, dict] = {}
    for judge in sorted(by_judge):
        group = by_judge[judge]
        ok = [s for j in group if j.get(STATUS) == JudgmentStatus.SCORED and (s := _score(j)) is not None]
        out[judge] = {"mean": mean(ok), "n": len(ok), "n_unavailable": len(group) - len(ok),
                      "unavailable_rate": (len(group) - len(ok)) / len(group) if group else None}
    return out


def percent(value: float | None) -> float | None:
    """0–1 → %, rounded for the headline (None stays None)."""
    return None if value is None else round(100.0 * value, 4)


def summarize(tasks: Sequence[Mapping[str, Any]], judgments: Iterable[Mapping[str, Any]],
              n_total: int | None = None) -> dict:
    """The headline block of scores.json: both views and the counts."""
    scored, n_scored = scored_view(tasks)
    overall = all_view(tasks, n_total)
    counts = Counter(t.get(STATUS) for t in tasks)
    return {
        "overall": percent(overall),
        "scored": percent(scored),
        "n_total": int(n_total if n_total is not None else len(tasks)),
        "n_scored": n_scored,
        "n_out_of_context": counts[TaskStatus.OUT_OF_CONTEXT],
        "n_failed": counts[TaskStatus.FAILED],
        "n_unscored": counts[TaskStatus.UNSCORED],
        "n_missing": counts[TaskStatus.MISSING],
        "n_budget_exhausted": counts[TaskStatus.BUDGET_EXHAUSTED],
        "judges": judge_means(judgments),
    }


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
