"""Tracking's pure parts, table-driven: names, params, tags, token usage, span times, upload plans."""

from __future__ import annotations

import pytest

from wildtrace.core.records import AnswerRecord
from wildtrace.tracking.rundir import run_name, short_time, temperature_sent, warning_tags
from wildtrace.tracking.runs.sweep import summary_text
from wildtrace.tracking.traces import cap_text, chat_out, token_usage, window
from wildtrace.upload import plan


def config(send: bool = True, t: float = 0.1, reps: tuple[int, int] = (0, 0)) -> dict:
    return {"model": {"name": "gpt-5.4", "send_temperature": send, "caps": {"en": 1000, "cjk": 500}},
            "judge_panel": {"name": "paper", "replicate": reps[1]},
            "decoding": {"temperature": t, "max_tokens": None, "replicate": reps[0]}}


@pytest.mark.parametrize(("cfg", "stats", "date", "expected"), [
    (config(), {"effective_max_tokens": 32768}, "2026-12-01T10:00:05+00:00", "gpt-5.4 · paper · 12-01 10:00:05"),
    (config(t=0.3), {"effective_max_tokens": 32768, "overrides": ["model=gpt-5.4", "decoding.temperature=0.3"]},
     "2026-12-01T10:00:05+00:00", "t=0.3 · gpt-5.4 · paper · 12-01 10:00:05"),
    (config(send=False, t=0.3), {"overrides": ["decoding.temperature=0.3"]}, "2026-12-01T10:00:05+00:00",
     "t=— · gpt-5.4 · paper · 12-01 10:00:05"),  # not sent: a sweep must not look like 3 settings
    (config(t=0.3), {"temperature_dropped": ["model"], "overrides": ["decoding.temperature=0.3"]}, None,
     "t=— · gpt-5.4 · paper"),  # dropped by the run; no time stamp
    (config(reps=(1, 2)), {"overrides": ["root=/x", "judge_panel.replicate=2", "decoding.replicate=1"]}, "garbage",
     "judge replicate 2 answer replicate 1 · gpt-5.4 · paper"),
    (config(), {"overrides": ["decoding.max_tokens=64"], "effective_max_tokens": 64}, None, "mt=64 · gpt-5.4 · paper"),
    (config(), {"overrides": ["model.caps.en=1000", "mlflow.experiment=x"]}, None, "en=1000 · gpt-5.4 · paper"),
])
def test_run_names(cfg, stats, date, expected):
    assert run_name(cfg, stats, date) == expected


def test_a_sweep_childs_name_starts_with_its_swept_key_and_its_tags_say_it():
    from wildtrace.tracking.rundir import swept_tags

    stats = {"overrides": ["judge_panel.replicate=1", "decoding.temperature=0.7"]}
    assert run_name(config(t=0.7, reps=(0, 1)), stats, None, ["decoding.temperature"]) == \
        "t=0.7 judge replicate 1 · gpt-5.4 · paper"
    assert swept_tags(config(t=0.7), stats, ["decoding.temperature"]) == {
        "sweep.decoding.temperature": "0.7", "wildtrace.sweep.keys": "decoding.temperature"}


def test_mlflow_run_type_tag_is_mlflows_own():
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_TYPE, MLFLOW_RUN_TYPE_GENAI_EVALUATE

    from wildtrace.tracking.rundir import RUN_TYPE, RUN_TYPE_TAG

    assert (RUN_TYPE_TAG, RUN_TYPE) == (MLFLOW_RUN_TYPE, MLFLOW_RUN_TYPE_GENAI_EVALUATE)


@pytest.mark.parametrize(("judges", "overrides", "expected"), [
    (["balanced", "lenient", "strict"], ["judge_panel=offline_panel"], "extractive · offline_panel"),
    (["balanced", "lenient"], ["judge_panel=offline_panel", "~judge_panel.judges.strict"],
     "judges=balanced,lenient · extractive · offline_panel"),
    (["balanced", "lenient", "strict", "x"], ["+judge_panel.judges.x={name: x}"],
     "judges=balanced,lenient,strict,x · extractive · offline_panel"),
    (["balanced", "lenient", "strict"], ["judge_panel.judges.strict.route=other"],  # a setting, not membership
     "extractive · offline_panel"),
])
def test_run_names_name_an_ablations_members(judges, overrides, expected):
    cfg = {"model": {"name": "extractive", "send_temperature": True},
           "judge_panel": {"name": "offline_panel", "replicate": 1, "judges": {k: {} for k in judges}},
           "decoding": {"temperature": 0.1, "max_tokens": None, "replicate": 0}}
    assert run_name(cfg, {"effective_max_tokens": 8192, "overrides": overrides}, None) == expected


@pytest.mark.parametrize(("send", "dropped", "expected"), [
    (True, [], True), (False, [], False), (True, ["model"], False), (True, ["claude"], True)])
def test_temperature_sent(send, dropped, expected):
    assert temperature_sent(config(send), {"temperature_dropped": dropped}) is expected


def test_short_time_of_a_bad_date_is_empty():
    assert short_time(None) == short_time("yesterday") == ""


def test_warning_served_and_temperature_tags():
    stats = {"warnings": [{"code": "reasoning_budget", "message": "under 32768"}, {"code": "judge on panel",
                                                                                  "message": "x" * 9000}, "junk"],
             "served_models": {"model": ["gpt-5.4-2026", "gpt-5.4-2027"], "claude": ["claude-x"]},
             "temperature_dropped": ["model", "qwen"], "budget_lowered": {"model": 2048}}
    tags = warning_tags(stats)
    assert tags == {"wildtrace.warning.reasoning_budget": "under 32768",
                    "wildtrace.warning.judge_on_panel": "x" * 5000,
                    "model.served": "gpt-5.4-2026,gpt-5.4-2027", "judge.claude.served": "claude-x",
                    "temperature.sent.model": "false", "temperature.sent.qwen": "false",
                    "budget.lowered.model": "2048"}
    assert warning_tags({}) == {}
    assert warning_tags({"budget_lowered": ["junk"]}) == {}  # a hand-edited run_stats.json never raises


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 500, "completion_tokens": 40, "reasoning_tokens": 12},
     {"input_tokens": 500, "output_tokens": 40, "total_tokens": 540}),
    ({"prompt_tokens": 500, "completion_tokens": None}, {"input_tokens": 500, "output_tokens": 0, "total_tokens": 500}),
    ({"prompt_tokens": None, "completion_tokens": None}, None),
    ({"prompt_tokens": True, "completion_tokens": "7"}, None),  # not counts
    ({}, None), (None, None), ("500", None),
])
def test_token_usage_in_mlflows_shape(usage, expected):
    assert token_usage(usage) == expected


@pytest.mark.parametrize(("row", "expected"), [
    ({"started_at": 10.5, "latency_s": 0.25}, (10_500_000_000, 10_750_000_000)),
    ({"started_at": 10, "latency_s": None}, (10_000_000_000, 10_000_000_000)),
    ({"started_at": None, "latency_s": 1.0}, None),
    ({"started_at": True}, None), ({}, None),
])
def test_span_window_from_a_row(row, expected):
    assert window(AnswerRecord.from_row({"question_id": "q1", "status": "answered", **row})) == expected


def test_long_texts_are_cut_and_say_so():
    assert cap_text("a" * 20_005) == "a" * 20_000 + "… [5 more characters]"
    assert cap_text("short") == "short" and cap_text(None) is None


def test_chat_output_keeps_reasoning_apart_from_the_answer():
    assert chat_out("Paris.", "stop", reasoning="think", error=None) == {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "reasoning": "think"}


@pytest.mark.parametrize(("marker", "uri", "force", "expected"), [
    ({}, "sqlite:///a.db", False, ("new", None)),
    ({"status": "logged", "run_id": "r1", "tracking_uri": "sqlite:///a.db"}, "sqlite:///a.db", False, ("skip", "r1")),
    ({"status": "logged", "run_id": "r1", "tracking_uri": "sqlite:///a.db"}, "sqlite:///a.db", True, ("new", None)),
    ({"status": "logged", "run_id": "r1", "tracking_uri": "sqlite:///a.db"}, "http://team:5000", False, ("new", None)),
    ({"status": "logged", "run_id": "r1"}, "sqlite:///a.db", False, ("skip", "r1")),  # older marker: no uri kept
    ({"status": "running", "run_id": "r1", "tracking_uri": "sqlite:///a.db"}, "sqlite:///a.db", False,
     ("resume", "r1")),
    ({"status": "partial", "run_id": "r1"}, "sqlite:///a.db", False, ("resume", "r1")),
    ({"status": "not_logged", "run_id": "r1"}, "sqlite:///a.db", False, ("resume", "r1")),
    ({"status": "not_logged", "run_id": None}, "sqlite:///a.db", False, ("new", None)),  # MLflow never answered
])
def test_upload_plans(marker, uri, force, expected):
    assert plan(marker, uri, force) == expected


def test_multirun_summary_golden():
    rows = [{"job": 0, "status": "finished", "overall": 28.25, "scored": 30.0, "run_id": "abc", "overrides": "t=0.0"},
            {"job": 1, "status": "failed", "overall": None, "scored": None, "run_id": None, "overrides": "t=0.3"}]
    assert summary_text(rows, "parent1") == (
        "multirun: 2 jobs\n"
        "job  status    overall   scored  run id / overrides\n"
        "  0  finished   28.25%   30.00%  abc  t=0.0\n"
        "  1  failed          —        —  (not logged)  t=0.3\n"
        "mlflow parent run: parent1")


def test_sweep_names_put_the_swept_overrides_first_leave_places_out_and_fit_mlflow():
    from wildtrace.tracking.runs.sweep import NAME_CHARS, sweep_keys, sweep_name

    assert sweep_name(["root=/a/b", "judge_panel=offline_panel", "judge_panel.replicate=0,1,2"]) == \
        "sweep · judge_panel.replicate=0,1,2 judge_panel=offline_panel"
    assert sweep_keys(["decoding.max_tokens=range(64,129,64)", "model=extractive", "decoding.temperature=0.1,0.4"]) \
        == ["decoding.max_tokens", "decoding.temperature"]
    long = sweep_name(["model.extra_body.x=" + "x" * 400, "decoding.temperature=0.1,0.4"])
    assert len(long) == NAME_CHARS and long.startswith("sweep · decoding.temperature=0.1,0.4 ") and long[-1] == "…"
