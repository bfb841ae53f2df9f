"""stage=answer / stage=judge, replicates, and the other wire formats end to end."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, sse
from wildtrace.core.tasks import DatasetError
from wildtrace.runtime.run.execute import run

DOC = "The seal was worn. The pump failed at 03:14. " * 10


def anthropic_events(text: str) -> Reply:
    """The Messages API's streamed events for one text answer, as the API sends them."""
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                              "model": "claude-opus-4-6", "stop_reason": None,
                                              "usage": {"input_tokens": 50, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:10]}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[10:]}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    return sse(*events, names=[e["type"] for e in events])


def responder(call: Call) -> Reply:
    if call.path.endswith("/v1/messages"):  # Anthropic, streamed by default
        return anthropic_events("Anthropic says the seal was worn.")
    if ":streamGenerateContent" in call.path:  # Gemini judge, streamed by default
        return sse({"candidates": [{"content": {"parts": [{"text": '{"points_awarded":[40],'}], "role": "model"}}]},
                   {"candidates": [{"content": {"parts": [{"text": '"total":40}'}], "role": "model"},
                                    "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 80},
                    "modelVersion": "gemini-2.5-flash"})
    if call.route == "test-model":
        return chat(f"The seal was worn (call {call.seen}).")
    return chat('{"points_awarded":[60],"total":60}')


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(3)]
    return write_release(tmp_path, tasks, {"doc.txt": DOC})


def model_overrides(server, tasks, corpus, *extra):
    return ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
            f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", *extra]


def test_answer_then_judge_stages(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(responder) as server:
        first = run(settings(tmp_path / "a", model_overrides(server, tasks, corpus, "stage=answer")))
        assert first.summary is None and not (first.out_dir / "scores.json").exists()
        assert {c.route for c in server.calls} == {"test-model"}
        judges = {"a": openai_judge(server.url, "judge-a")}
        second = run(settings(tmp_path / "b", [f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "stage=judge",
                                              f"responses={first.out_dir / 'responses.json'}"], judges=judges))
    assert [c.route for c in server.calls].count("test-model") == 3  # the judge stage answered nothing
    assert second.summary["n_scored"] == 3 and second.summary["overall"] == pytest.approx(60.0)


def test_judge_foreign_rows_with_missing_and_empty(tmp_path, release):
    tasks, corpus = release
    rows = tmp_path / "elsewhere.json"
    rows.write_text(json.dumps([{"question_id": "q0", "answer": "The seal was worn."},
                                {"question_id": "q1", "answer": " "}]))
    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path, [f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "stage=judge",
                                         f"responses={rows}"], judges={"a": openai_judge(server.url, "judge-a")}))
    assert len(server.calls) == 1  # only the non-empty answer is judged
    s = result.summary
    assert (s["n_scored"], s["n_failed"], s["n_missing"], s["n_total"]) == (1, 1, 1, 3)
    assert s["overall"] == pytest.approx(20.0) and s["scored"] == pytest.approx(60.0)


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"answer": "x"}], r"row #0: missing field 'question_id'"),
        ([{"question_id": "zzz", "answer": "x"}], r"row #0: question_id 'zzz' is not among"),
        ([{"question_id": "q0", "answer": "x"}, {"question_id": "q0", "answer": "y"}],
         r"row #1: duplicate question_id"),
        ([{"question_id": "q0", "status": "great"}], r"row #0: field 'status' must be one of"),
    ],
)
def test_bad_responses_file(tmp_path, release, rows, message):
    tasks, corpus = release
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=message):
        run(settings(tmp_path, [f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "stage=judge",
                                f"responses={path}"]))


def test_replicates_pay_only_for_what_they_ask(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(responder) as server:
        judges = {"a": openai_judge(server.url, "judge-a")}
        base = model_overrides(server, tasks, corpus)
        run(settings(tmp_path, base, judges=judges))
        assert len(server.calls) == 6
        run(settings(tmp_path, base, judges=judges))  # same config: all from the cache
        assert len(server.calls) == 6
        run(settings(tmp_path, [*base, "judge_panel.replicate=1"], judges=judges))  # fresh judge calls only
        assert [c.route for c in server.calls[6:]] == ["judge-a"] * 3
        # fresh answers (new text → new judging)
        run(settings(tmp_path, [*base, "decoding.replicate=1"], judges=judges))
        assert [c.route for c in server.calls[9:]].count("test-model") == 3


def test_anthropic_model_and_gemini_judge(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, ["model=claude-opus-4.6", f"model.base_url={server.url}",
                                  f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}",
                                  f"dataset.corpus={corpus}"],
                       judges={"gem": {"name": "g", "provider": "gemini", "route": "gemini-2.5-flash",
                                       "base_url": server.url, "api_key_env": TEST_KEY_ENV}})
        result = run(cfg)
    answers = [c for c in server.calls if c.path == "/v1/messages"]
    judge = [c for c in server.calls if c.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"]
    assert len(answers) == 3 and len(judge) == 3
    assert "temperature" not in answers[0].body and answers[0].body["max_tokens"] == 32768  # spec §2 for Opus 4.6
    assert answers[0].headers["x-api-key"] and answers[0].headers["anthropic-version"] == "2023-06-01"
    assert judge[0].body["generationConfig"] == {"maxOutputTokens": 16384, "temperature": 0.1}
    assert result.summary["overall"] == pytest.approx(40.0)
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert rows[0]["usage"] == {"prompt_tokens": 50, "completion_tokens": 9, "reasoning_tokens": None,
                                "cached_tokens": None, "cache_write_tokens": None, "cache_write_1h_tokens": None}
