"""Panel reduction and both denominator views against hand-computed numbers."""

import random

import pandas as pd
import pytest

from wildtrace.core import frames, views
from wildtrace.core.records import AnswerStatus

ANSWERED, FAILED, MISSING = AnswerStatus.ANSWERED, AnswerStatus.FAILED, AnswerStatus.MISSING
OUT_OF_CONTEXT = AnswerStatus.OUT_OF_CONTEXT

# Five tasks: t1 three judges, t2 one judge unavailable, t3 all judges unavailable,
# t4 out of context, t5 failed answer.
JUDGMENT_ROWS = [
    {"question_id": "t1", "judge": "a", "status": "scored", "score": 0.9},
    {"question_id": "t1", "judge": "b", "status": "scored", "score": 0.6},
    {"question_id": "t1", "judge": "c", "status": "scored", "score": 0.3},
    {"question_id": "t2", "judge": "a", "status": "scored", "score": 1.0},
    {"question_id": "t2", "judge": "b", "status": "unavailable", "score": None},
    {"question_id": "t2", "judge": "c", "status": "scored", "score": 0.5},
    {"question_id": "t3", "judge": "a", "status": "unavailable", "score": None},
    {"question_id": "t3", "judge": "b", "status": "unavailable", "score": None},
    {"question_id": "t3", "judge": "c", "status": "unavailable", "score": None},
]
JUDGMENTS = frames.judgments_frame(JUDGMENT_ROWS)
STATUS = {"t1": ANSWERED, "t2": ANSWERED, "t3": ANSWERED, "t4": OUT_OF_CONTEXT, "t5": FAILED}


def test_task_scores():
    tasks = frames.task_scores(STATUS, JUDGMENTS).set_index("question_id")
    assert tasks.loc["t1", "score"] == pytest.approx(0.6)  # (0.9 + 0.6 + 0.3) / 3
    assert tasks.loc["t2", "score"] == pytest.approx(0.75)  # (1.0 + 0.5) / 2: the unavailable judge is not a 0
    assert list(tasks["status"]) == ["scored", "scored", "unscored", OUT_OF_CONTEXT, FAILED]
    assert tasks.loc[["t3", "t4", "t5"], "score"].isna().all()


def test_views_hand_computed():
    tasks = views.task_rows(STATUS, JUDGMENT_ROWS)
    scored, n = views.scored_view(tasks)
    assert (scored, n) == (pytest.approx((0.6 + 0.75) / 2), 2)
    assert views.all_view(tasks) == pytest.approx((0.6 + 0.75) / 5)
    # The release's 481 denominator zero-fills tasks absent from the rows.
    assert views.all_view(tasks, n_total=481) == pytest.approx(1.35 / 481)


def test_summarize_counts_and_judges():
    summary = views.summarize(views.task_rows(STATUS, JUDGMENT_ROWS), JUDGMENT_ROWS)
    assert summary["overall"] == pytest.approx(27.0)
    assert summary["scored"] == pytest.approx(67.5)
    counts = ("n_total", "n_scored", "n_out_of_context", "n_failed", "n_unscored", "n_missing")
    assert {k: summary[k] for k in counts} == {
        "n_total": 5, "n_scored": 2, "n_out_of_context": 1, "n_failed": 1, "n_unscored": 1, "n_missing": 0}
    assert summary["judges"]["a"] == {"mean": pytest.approx(0.95), "n": 2, "n_unavailable": 1,
                                      "unavailable_rate": pytest.approx(1 / 3)}
    assert summary["judges"]["b"]["mean"] == pytest.approx(0.6)
    assert summary["judges"]["b"]["n_unavailable"] == 2
    assert frames.judge_means(JUDGMENTS) == summary["judges"]  # the report's, from the frame


def test_missing_rows_are_zero_filled():
    tasks = views.task_rows({"t1": ANSWERED, "t9": MISSING}, JUDGMENT_ROWS)
    summary = views.summarize(tasks, JUDGMENT_ROWS)
    assert summary["n_missing"] == 1
    assert summary["overall"] == pytest.approx(30.0)
    assert summary["scored"] == pytest.approx(60.0)


def test_no_scored_task_gives_none_not_zero():
    tasks = views.task_rows({"t4": OUT_OF_CONTEXT}, [])
    assert views.scored_view(tasks) == (None, 0)
    assert views.all_view(tasks) == 0.0
    assert views.summarize(tasks, [])["scored"] is None


def test_breakdown_per_paradigm():
    tasks = frames.task_scores(STATUS, JUDGMENTS)
    meta = pd.DataFrame({"question_id": list(STATUS),
                         "paradigm": ["causal", "causal", "temporal", "temporal", "causal"]})
    table = frames.breakdown(tasks, meta, "paradigm").set_index("paradigm")
    assert table.loc["causal", "all"] == pytest.approx((0.6 + 0.75) / 3)
    assert table.loc["causal", "scored"] == pytest.approx(0.675)
    assert table.loc["temporal", "all"] == 0.0
    assert table.loc["temporal", "scored"] is None or pd.isna(table.loc["temporal", "scored"])
    assert int(table.loc["causal", "n"]) == 3


def test_matched_panel_uses_only_tasks_every_model_scored():
    def frame(scores):
        return pd.DataFrame([{"question_id": q, "status": "scored" if s is not None else OUT_OF_CONTEXT, "score": s}
                             for q, s in scores.items()])

    runs = {"long": frame({"q1": 0.8, "q2": 0.6, "q3": 0.4}), "short": frame({"q1": 0.2, "q2": None, "q3": 0.6})}
    table = frames.matched_panel(runs).set_index("model")
    assert table.loc["long", "matched"] == pytest.approx(0.6)  # q1, q3
    assert table.loc["short", "matched"] == pytest.approx(0.4)
    assert set(table["n"]) == {2}
    assert frames.matched_panel({}).empty


def test_agreement_hand_computed():
    pairs = frames.agreement(JUDGMENTS)
    # Tasks both scored: a~b → t1 only; a~c → t1, t2; b~c → t1.
    assert pairs["a~b"] == {"mad": pytest.approx(0.3), "corr": None, "n": 1}
    assert pairs["a~c"]["mad"] == pytest.approx((0.6 + 0.5) / 2) and pairs["a~c"]["n"] == 2
    assert pairs["a~c"]["corr"] == pytest.approx(1.0)  # (0.9, 0.3) and (1.0, 0.5) move together
    assert frames.agreement(frames.judgments_frame([])) == {}


def test_token_totals():
    rows = [{"judge": "a", "usage": {"prompt_tokens": 10, "completion_tokens": 2, "reasoning_tokens": None}},
            {"judge": "a", "usage": {"prompt_tokens": 5, "completion_tokens": None}},
            {"judge": "b", "usage": {}}]
    assert views.token_totals(rows, "judge") == {"a": {"prompt": 15, "completion": 2, "reasoning": 0},
                                                 "b": {"prompt": 0, "completion": 0, "reasoning": 0}}
    assert views.token_totals(rows)["all"]["prompt"] == 15


@pytest.mark.parametrize("n", [*range(0, 140), 255, 256, 257, 481, 1000, 1443, 4097, 9000])
def test_means_and_sums_are_pandas_own_bit_for_bit(n):
    # Scores as judges give them (k/40, tenths) and arbitrary floats, where summation order shows.
    rng = random.Random(n)
    values = [rng.choice([rng.random(), rng.randint(0, 40) / 40, rng.randint(0, 10) / 10]) for _ in range(n)]
    series = pd.Series(values, dtype=float)
    assert views.sum_as_numpy(values) == float(series.sum())
    assert views.mean(values) == (float(series.mean()) if n else None)


def test_the_views_of_rows_and_of_frames_agree():
    rows = [{"question_id": f"t{i}", "judge": j, "status": "scored" if (i + k) % 7 else "unavailable",
             "score": ((i * 7 + k * 3) % 41) / 40 if (i + k) % 7 else None}
            for i in range(300) for k, j in enumerate("abc")]
    status = {f"t{i}": ANSWERED if i % 5 else OUT_OF_CONTEXT for i in range(300)}
    tasks = views.task_rows(status, rows)
    frame = frames.task_scores(status, frames.judgments_frame(rows))
    assert views.summarize(tasks, rows) == views.summarize(frames.records(frame), rows)
    # The headline is pandas' own arithmetic over the same columns.
    scored = frame.loc[frame["status"] == "scored", "score"].astype(float)
    assert views.scored_view(tasks) == (float(scored.mean()), len(scored))
    assert views.all_view(tasks) == float(frame["score"].astype(float).fillna(0.0).sum()) / len(frame)


def test_a_scored_row_without_a_score_counts_as_no_score():
    # Rows read back from a file that says scored and has no score (or NaN): not a crash, not a NaN mean.
    rows = [{"question_id": "t1", "judge": "a", "status": "scored", "score": None},
            {"question_id": "t1", "judge": "b", "status": "scored", "score": float("nan")},
            {"question_id": "t1", "judge": "c", "status": "scored", "score": 0.5}]
    tasks = views.task_rows({"t1": ANSWERED}, rows)
    assert tasks == [{"question_id": "t1", "status": "scored", "score": 0.5}]
    assert views.judge_means(rows)["a"] == {"mean": None, "n": 0, "n_unavailable": 1, "unavailable_rate": 1.0}
    assert views.scored_view([{"question_id": "t1", "status": "scored", "score": None}]) == (None, 0)
