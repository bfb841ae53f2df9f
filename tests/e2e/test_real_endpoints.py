"""Paid-run behaviour against loopback servers that behave as the real APIs and gateways do.

Streamed answers that trickle past ``timeout_s``, streams cut short and error events,
the temperature rule for any model, keys with white space, keys echoed in 401 bodies,
quota 429s, the exit status and headline, and the preflight check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, chat_stream, error, sse
from wildtrace.core import records as R
from wildtrace.runtime.run.execute import run
from wildtrace.runtime.net.secrets import MissingKeyError

DOC = "The pump failed at 03:14 because the seal was worn. " * 10
JUDGE_OK = '{"points_awarded":[60,40],"total":100}'
FAST = ["retry.backoff_base_s=0.001", "retry.backoff_max_s=0.005"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(3)]
    return write_release(tmp_path, tasks, {"doc.txt": DOC})


def model_overrides(server: LoopbackServer, release, *extra: str) -> list[str]:
    tasks, corpus = release
    return ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
            f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", *FAST, *extra]


def judges(server: LoopbackServer) -> dict:
    return {"judge_a": openai_judge(server.url, "judge-a")}


def run_files_text(root: Path) -> str:
    """Every byte under ``root`` (run files, cache, MLflow store), as text."""
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# ---------------------------------------------------------------------- streaming


def test_an_answer_that_trickles_for_3s_with_timeout_1s_is_answered_at_the_first_attempt(tmp_path, release):
    def responder(call: Call) -> Reply:
        assert call.body["stream"] is True and call.body["stream_options"] == {"include_usage": True}
        if call.route == "test-model":
            return chat_stream("The seal was worn and it failed at 03:14.", pieces=8, chunk_delay_s=0.4)
        return chat_stream(JUDGE_OK)

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "model.timeout_s=1", "dataset.limit=1"),
                       judges=judges(server))
        result = run(cfg)
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.ANSWERED and row["attempts"] == 1
    assert row["response"] == "The seal was worn and it failed at 03:14."
    assert row["latency_s"] > 2.5  # it really trickled past the 1 s timeout
    assert row["usage"]["prompt_tokens"] == 11
    assert result.summary["overall"] == pytest.approx(100.0)


def test_a_plain_call_with_the_same_trickle_times_out_and_is_retried(tmp_path, release):
    def responder(call: Call) -> Reply:
        return Reply(200, {"choices": [{"message": {"content": "late"}, "finish_reason": "stop"}]}, delay_s=1.5)

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "model.timeout_s=0.5", "model.stream=false",
                                                 "dataset.limit=1", "retry.max_retries=1", "stage=answer"))
        result = run(cfg)
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.FAILED and row["reason"] == R.FailReason.RETRIES_EXHAUSTED
    assert row["attempts"] == 2
    assert "timeout" in row["error"]


def test_a_stream_cut_short_is_retried_never_recorded_as_a_truncated_answer(tmp_path, release):
    def responder(call: Call) -> Reply:
        if call.route == "test-model" and call.seen == 0:
            return chat_stream("The seal was worn and it failed at 03:14.", pieces=4, cut=True)
        return chat_stream("The whole answer." if call.route == "test-model" else JUDGE_OK)

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "dataset.limit=1"), judges=judges(server))
        result = run(cfg)
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.ANSWERED and row["response"] == "The whole answer." and row["attempts"] == 2


def test_an_overloaded_error_event_mid_stream_counts_as_529_and_is_retried(tmp_path, release):
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                  "model": "claude-opus-4-6", "usage": {"input_tokens": 5}}}
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    good = [start, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Worn seal."}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
            {"type": "message_stop"}]

    def responder(call: Call) -> Reply:
        events = [start, overloaded] if call.seen == 0 else good
        return sse(*events, names=[e["type"] for e in events])

    tasks, corpus = release
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, ["model=claude-opus-4.6", f"model.base_url={server.url}",
                                  f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}",
                                  f"dataset.corpus={corpus}", "dataset.limit=1", "stage=answer", *FAST])
        result = run(cfg)
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.ANSWERED and row["response"] == "Worn seal." and row["attempts"] == 2
    assert row["served_model"] == "claude-opus-4-6"
    assert result.stats["retries"] == 1


def test_switching_stream_pays_nothing_twice(tmp_path, release):
    def responder(call: Call) -> Reply:
        return chat_stream("Worn seal.") if call.body.get("stream") else chat("Worn seal.")

    with LoopbackServer(responder) as server:
        overrides = model_overrides(server, release, "stage=answer")
        first = run(settings(tmp_path, overrides))
        sent = len(server.calls)
        second = run(settings(tmp_path, [*overrides, "model.stream=false"]))
    assert sent == 3 and len(server.calls) == 3
    assert [r["response"] for r in json.loads((second.out_dir / "responses.json").read_text())] == ["Worn seal."] * 3
    assert first.stats["requests"]["model"] == 3 and second.stats["cache_hits"] == 3


# ---------------------------------------------------------------------- temperature rule

OPENAI_TEMPERATURE_400 = {"error": {
    "message": "Unsupported value: 'temperature' does not support 0.1 with this model. Only the default (1) value "
               "is supported.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}
KIMI_TEMPERATURE_400 = {"error": {"message": "invalid temperature: only 1 is allowed for this model",
                                  "type": "invalid_request_error"}}


@pytest.mark.parametrize("rejection", [OPENAI_TEMPERATURE_400, KIMI_TEMPERATURE_400], ids=["openai", "kimi"])
def test_an_endpoint_that_rejects_temperature_gets_every_request_without_it(tmp_path, release, rejection, caplog):
    def responder(call: Call) -> Reply:
        if call.route == "test-model" and "temperature" in call.body:
            return Reply(400, rejection)
        return chat_stream("Worn seal." if call.route == "test-model" else JUDGE_OK)

    with LoopbackServer(responder) as server, caplog.at_level("WARNING"):
        cfg = settings(tmp_path, model_overrides(server, release), judges=judges(server))
        result = run(cfg)
    model_calls = [c for c in server.calls if c.route == "test-model"]
    with_temperature = [c for c in model_calls if "temperature" in c.body]
    assert len(with_temperature) >= 1 and len(model_calls) - len(with_temperature) == 3
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert [(r["status"], r["attempts"], r["temperature_sent"]) for r in rows] == [(R.AnswerStatus.ANSWERED, 1,
                                                                                  False)] * 3
    judged = json.loads((result.out_dir / "judgments.json").read_text())
    assert all(j["temperature_sent"] is True for j in judged)  # the judge accepted it
    assert result.stats["temperature_dropped"] == ["model"]
    assert result.summary["overall"] == pytest.approx(100.0)
    warnings = [r for r in caplog.records if "rejects temperature" in r.getMessage()]
    assert len(warnings) == 1


def test_a_rerun_of_a_temperature_rejecting_model_is_served_from_the_cache(tmp_path, release):
    def responder(call: Call) -> Reply:
        if "temperature" in call.body:
            return Reply(400, OPENAI_TEMPERATURE_400)
        return chat_stream("Worn seal.")

    with LoopbackServer(responder) as server:
        overrides = model_overrides(server, release, "stage=answer")
        run(settings(tmp_path, overrides))
        paid = len([c for c in server.calls if "temperature" not in c.body])
        again = run(settings(tmp_path, overrides))
    assert paid == 3
    assert len([c for c in server.calls if "temperature" not in c.body]) == 3  # nothing paid twice
    assert again.stats["cache_hits"] == 3


# ---------------------------------------------------------------------- keys


@pytest.mark.parametrize("bad", ["sk-key-with-newline\n", " sk-key", "sk-key with space", "sk-\x07bell"])
def test_a_key_holding_white_space_fails_before_any_request_naming_the_variable(tmp_path, release, monkeypatch, bad):
    monkeypatch.setenv(TEST_KEY_ENV, bad)
    with LoopbackServer(lambda call: chat("x")) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "stage=answer"))
        with pytest.raises(MissingKeyError) as info:
            run(cfg)
        assert server.calls == []
    message = str(info.value)
    assert f"model.api_key_env: environment variable {TEST_KEY_ENV}" in message
    assert bad.strip() not in message


def test_every_missing_key_is_reported_at_once(tmp_path, release, monkeypatch):
    monkeypatch.delenv(TEST_KEY_ENV)
    judge = {"name": "j", "provider": "openai", "route": "judge-a", "base_url": "http://127.0.0.1:9/v1",
             "api_key_env": "WILDTRACE_TEST_OTHER_KEY"}
    cfg = settings(tmp_path, model_overrides(LoopbackServer(lambda c: chat("x")), release),
                   judges={"judge_a": judge})
    with pytest.raises(MissingKeyError) as info:
        run(cfg)
    assert f"{TEST_KEY_ENV} is not set" in str(info.value)
    assert "judge_panel.judges.judge_a.api_key_env: environment variable WILDTRACE_TEST_OTHER_KEY is not set" in str(
        info.value)


def test_a_401_that_echoes_the_key_leaves_no_trace_of_it(tmp_path, release, test_key, capfd):
    masked = test_key[:12] + "****" + test_key[-4:]

    def responder(call: Call) -> Reply:
        return error(401, f"Incorrect API key provided: {call.headers['authorization'][7:]} (also {masked})")

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "mlflow.enabled=true"), judges=judges(server))
        result = tracked_run(cfg)
    assert result.exit_code == 1
    out, err = capfd.readouterr()
    for text in (run_files_text(tmp_path / "outputs"), run_files_text(result.out_dir), out, err):
        assert test_key not in text and test_key[:12] not in text
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert all(r["reason"] == R.FailReason.HTTP_ERROR and "[REDACTED]" in r["error"] for r in rows)
    # run() returns the headline redacted; the entry point prints it (tests/e2e/test_entry_points.py)
    assert "model: 3/3 calls failed (http_error 3): HTTP 401: Incorrect API key provided: [REDACTED]" in result.headline


# ---------------------------------------------------------------------- quota and retry hints


def test_a_quota_429_is_one_request_then_every_call_fails_at_once(tmp_path, release):
    def responder(call: Call) -> Reply:
        return Reply(429, {"error": {"message": "You exceeded your current quota, please check your plan and "
                                                "billing details.",
                                     "type": "insufficient_quota", "code": "insufficient_quota"}})

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "stage=answer", "model.max_concurrency=1"))
        result = run(cfg)
    assert len(server.calls) == 1
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert [r["reason"] for r in rows] == [R.FailReason.QUOTA_EXHAUSTED] * 3
    assert [r["attempts"] for r in rows] == [1, 0, 0]
    assert result.exit_code == 1
    assert "model: 3/3 calls failed (quota_exhausted 3)" in result.headline


def test_after_a_quota_top_up_the_rerun_sends_only_what_is_missing(tmp_path, release):
    state = {"quota": True}

    def responder(call: Call) -> Reply:
        if state["quota"] and "[q1]" in call.prompt:
            return Reply(429, {"error": {"message": "quota", "type": "insufficient_quota",
                                         "code": "insufficient_quota"}})
        return chat_stream("Worn seal.")

    with LoopbackServer(responder) as server:
        overrides = model_overrides(server, release, "stage=answer", "model.max_concurrency=1")
        first = run(settings(tmp_path, overrides))
        state["quota"] = False
        before = len(server.calls)
        second = run(settings(tmp_path, overrides))
    assert [r["status"] for r in first.outcome.answers] == [R.AnswerStatus.ANSWERED, R.AnswerStatus.FAILED,
                                                            R.AnswerStatus.FAILED]
    assert len(server.calls) - before == 2  # q1 and q2; q0 came from the cache
    assert second.exit_code == 0


@pytest.mark.parametrize("headers, body", [
    ({"retry-after-ms": "300"}, None),
    ({"retry-after": "0.3"}, None),
    ({"llm_provider-retry-after": "0.3"}, None),
    ({"llm_provider-retry-after-ms": "300"}, None),
    ({}, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "rate", "details": [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.3s"}]}}),
], ids=["retry-after-ms", "retry-after", "litellm-s", "litellm-ms", "gemini-retryinfo"])
def test_each_retry_hint_is_waited_for(tmp_path, release, headers, body):
    times: list[float] = []

    def responder(call: Call) -> Reply:
        import time

        times.append(time.monotonic())
        if len(times) == 1:
            return Reply(429, body or {"error": {"message": "rate limited"}}, headers)
        return chat_stream("Worn seal.")

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "stage=answer", "dataset.limit=1",
                                                 "retry.backoff_base_s=5", "retry.backoff_max_s=5"))
        result = run(cfg)
    assert result.exit_code == 0 and len(times) == 2
    assert 0.25 <= times[1] - times[0] < 2.0  # the hint (0.3 s), not the 5 s backoff


@pytest.mark.parametrize("status, headers, expected_requests", [
    (520, {}, 2),  # a CDN's 5xx is retried
    (503, {"x-should-retry": "false"}, 1),  # the server says not to
    (400, {"x-should-retry": "true"}, 2),  # the server says to
])
def test_retry_classes(tmp_path, release, status, headers, expected_requests):
    def responder(call: Call) -> Reply:
        return error(status, "odd", headers) if call.seen == 0 else chat_stream("Worn seal.")

    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, model_overrides(server, release, "stage=answer", "dataset.limit=1"))
        run(cfg)
    assert len(server.calls) == expected_requests


# ---------------------------------------------------------------------- exit status, gateway, preflight


def test_a_run_whose_every_model_call_fails_exits_non_zero_naming_the_dominant_error(tmp_path, release):
    with LoopbackServer(lambda call: error(404, "The model `test-model` does not exist")) as server:
        cfg = settings(tmp_path, model_overrides(server, release), judges=judges(server))
        result = run(cfg)
    assert result.exit_code == 1
    assert "model: 3/3 calls failed (http_error 3): HTTP 404: The model `test-model` does not exist" in result.headline


def _app(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_gateway_judge_without_its_variable_fails_before_any_request(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WILDTRACE_GATEWAY_BASE_URL"}
    proc = subprocess.run([sys.executable, "-m", "wildtrace", f"root={tmp_path}", "judge_panel=paper"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "judge_panel.judges.claude_sonnet.base_url is empty: set WILDTRACE_GATEWAY_BASE_URL" in proc.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_preflight_prints_a_table_and_exits_by_result(tmp_path, test_key):
    def responder(call: Call) -> Reply:
        if call.route == "broken-judge":
            return error(404, "The model `broken-judge` does not exist")
        if call.route == "test-model" and "temperature" in call.body:
            return Reply(400, OPENAI_TEMPERATURE_400)
        reply = chat_stream(JUDGE_OK if call.route != "test-model" else "The door was green.")
        return reply

    with LoopbackServer(responder) as server:
        base = ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                f"model.api_key_env={TEST_KEY_ENV}", "judge_panel=paper_only_qwen",
                f"judge_panel.judges.qwen.base_url={server.url}/v1",
                f"judge_panel.judges.qwen.api_key_env={TEST_KEY_ENV}"]
        good = _app(["wildtrace.check", f"root={tmp_path}", *base], {}, tmp_path)
        bad = _app(["wildtrace.check", f"root={tmp_path}", *base, "judge_panel.judges.qwen.route=broken-judge"], {},
                   tmp_path)
    assert good.returncode == 0, good.stderr
    lines = good.stdout.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("endpoint")):]
    assert lines[0].split() == ["endpoint", "route", "served", "by", "status", "http", "latency", "temperature",
                                "message"]
    model_line = next(line for line in lines if line.startswith("model"))
    assert "test-model" in model_line and "rejected (omitted)" in model_line and " ok " in model_line
    qwen_line = next(line for line in lines if line.startswith("qwen"))
    assert "accepted" in qwen_line and "total=100" in qwen_line
    # beside the table, the whole run's estimate (the custom model has no price: unknown, never $0)
    assert any(line.startswith("estimate: unknown – unknown for the calls still to send (20 calls") for line in lines)
    assert bad.returncode == 1
    assert "HTTP 404: The model `broken-judge` does not exist" in bad.stdout
    assert "1 of 2 endpoints failed: qwen" in bad.stderr
    assert test_key not in good.stdout + good.stderr + bad.stdout + bad.stderr
    # no document was sent
    assert all(len(c.raw) < 2000 for c in server.calls)


def test_a_model_served_under_another_name_is_recorded_and_warned(tmp_path, release):
    def responder(call: Call) -> Reply:
        reply = chat("Worn seal.")
        reply.body["model"] = "test-model-2026-03-05" if call.seen == 0 and "[q0]" in call.prompt else "other-model"
        return reply

    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path, model_overrides(server, release, "stage=answer", "model.stream=false")))
    assert result.stats["served_models"] == {"model": ["other-model", "test-model-2026-03-05"]}
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert [r["served_model"] for r in rows] == ["test-model-2026-03-05", "other-model", "other-model"]
    warnings = [w for w in result.stats["warnings"] if w["code"] == "served_model"]
    assert [w["message"] for w in warnings] == ["model: asked for route 'test-model', the responses name 'other-model'"]
    assert "warning: model: asked for route 'test-model'" in result.headline  # a dated suffix is no warning


def test_max_call_s_bounds_an_attempt_that_keeps_trickling(tmp_path, release):
    def responder(call: Call) -> Reply:
        if call.seen == 0:  # bytes every 0.3 s (never silent for timeout_s), for 6 s in all
            return chat_stream("x" * 20, pieces=20, chunk_delay_s=0.3)
        return chat_stream("Worn seal.")

    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path, model_overrides(server, release, "stage=answer", "dataset.limit=1",
                                                        "model.timeout_s=1", "model.max_call_s=1.5")))
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.ANSWERED and row["response"] == "Worn seal." and row["attempts"] == 2


@pytest.mark.slow
def test_preflight_refuses_a_typo_as_the_run_does(tmp_path):
    proc = _app(["wildtrace.check", f"root={tmp_path}", "+decoding.temprature=0.3"], {}, tmp_path)
    assert proc.returncode == 2
    assert "unknown config key: decoding.temprature (did you mean decoding.temperature?)" in proc.stderr
