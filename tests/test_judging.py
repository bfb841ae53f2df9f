"""Judge replies: the last JSON object with a numeric total, in every shape judges use."""

import pytest

from wildtrace.core.judging import panel_mean, parse_judge_reply


@pytest.mark.parametrize(
    "reply, total, score",
    [
        ('{"points_awarded":[30,20],"total":50}', 50.0, 0.5),
        ('```json\n{"points_awarded": [40], "total": 40}\n```', 40.0, 0.4),
        ('Looking at the rubric, P1 is met.\n{"points_awarded":[30],"total":30}\nThat is my grade.', 30.0, 0.3),
        ('{"total": 10} on reflection: {"points_awarded":[20],"total":20}', 20.0, 0.2),  # the last object wins
        ('{"total": 150}', 150.0, 1.0),  # above 100 caps at 1.0
        ('{"total": -20}', -20.0, 0.0),  # never below 0
        ('{"total": 0}', 0.0, 0.0),
        ('{"total": 100}', 100.0, 1.0),
        ('{"total": 12.5}', 12.5, 0.125),
        ('{"grade": {"points_awarded":[5], "total": 5}}', 5.0, 0.05),  # nested object with the total
        ('{"total": 60, "note": "x"} trailing {"not": "a grade"}', 60.0, 0.6),  # later object lacks total
        ('{"total": "80"} {"total": 70}', 70.0, 0.7),  # a string total is not numeric
    ],
)
def test_reads_total(reply, total, score):
    verdict = parse_judge_reply(reply)
    assert verdict.available
    assert verdict.total == total
    assert verdict.score == pytest.approx(score)
    assert verdict.reason is None


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("", "empty_reply"),
        ("   \n", "empty_reply"),
        (None, "empty_reply"),
        ("I award 50 points.", "no_numeric_total"),
        ('{"points_awarded":[30,20]}', "no_numeric_total"),
        ('{"total": "50"}', "no_numeric_total"),
        ('{"total": true}', "no_numeric_total"),
        ('{"total": null}', "no_numeric_total"),
        ('{"total": NaN}', "no_numeric_total"),
        ('{"total": 50', "no_numeric_total"),  # truncated JSON
    ],
)
def test_unavailable_never_zero(reply, reason):
    verdict = parse_judge_reply(reply)
    assert not verdict.available
    assert verdict.score is None
    assert verdict.reason == reason


@pytest.mark.parametrize(
    "scores, mean",
    [([0.5, 0.7, 0.9], 0.7), ([0.5, None, 0.9], 0.7), ([None, None, 0.2], 0.2), ([None, None], None), ([], None)],
)
def test_panel_mean_uses_available_judges(scores, mean):
    result = panel_mean(scores)
    assert (result is None and mean is None) or result == pytest.approx(mean)
