"""End to end against a real scripted HTTP server on 127.0.0.1.

One run of eleven tasks covers the retry rule, refusals, empty answers, out-of-context
tasks, odd judge replies, the exact bytes on the wire and both views.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, error
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.tasks import RubricItem
from wildtrace.runtime.net.attempt import encode_body
from wildtrace.runtime.run.execute import run

MARK = re.compile(r"\[(t-[a-z0-9]+)\]")
EN_CAP, CJK_CAP = 5000, 300
DOC = "The pump failed at 03:14 because the seal was worn. " * 20  # 1040 chars
LONG_DOC = "x" * (EN_CAP + 1)  # one over the en cap
DOC_AT_CAP = "y" * EN_CAP  # exactly the cap: in scope
CJK21 = "一" * 21 + "a" * (CJK_CAP + 10)  # CJK, over the cjk cap, under the en cap
CJK20 = "一" * 20 + "a" * (CJK_CAP + 10)  # 20 ideographs: English cap, in scope

DEFAULT_TOTALS = {"judge-a": 60, "judge-b": 80, "judge-c": 70}


def responder(call: Call) -> Reply:
    marker = MARK.search(call.prompt).group(1)
    route = call.route
    if route == "test-model":
        script = {
            "t-429": [error(429, "slow down", {"Retry-After": "0"}), chat("Answer after 429.")],
            "t-500": [error(500, "boom"), chat("Answer after 500.")],
            "t-503": [error(503, "unavailable")],
            "t-400": [error(400, "bad request: unsupported parameter")],
            "t-refusal": [chat(None, refusal="I can't help with that.")],
            "t-empty": [chat("  \n ")],
        }.get(marker, [chat(f"The seal was worn; it failed at 03:14. [{marker}]")])
        return script[min(call.seen, len(script) - 1)]
    if marker == "t-oddjudge":
        return {
            "judge-a": chat('Grading.\n```json\n{"points_awarded":[20,0],"total":20}\n```'),
            "judge-b": chat("P1 is present, P2 is not. I award sixty points."),
            "judge-c": chat('{"points_awarded":[60,60],"total":120}'),
        }[route]
    if marker == "t-atcap" and route == "judge-c":
        return error(400, "judge rejects this")
    return chat(json.dumps({"points_awarded": [DEFAULT_TOTALS[route]], "total": DEFAULT_TOTALS[route]}))


TASKS = [
    ("t-ok", "doc.txt"), ("t-429", "doc.txt"), ("t-500", "doc.txt"), ("t-503", "doc.txt"), ("t-400", "doc.txt"),
    ("t-refusal", "doc.txt"), ("t-empty", "doc.txt"), ("t-ooc", "long.txt"), ("t-oddjudge", "doc.txt"),
    ("t-cjk21", "cjk21.txt"), ("t-cjk20", "cjk20.txt"), ("t-atcap", "atcap.txt"),
]
DOCS = {"doc.txt": DOC, "long.txt": LONG_DOC, "cjk21.txt": CJK21, "cjk20.txt": CJK20, "atcap.txt": DOC_AT_CAP}


def question(marker: str) -> str:
    return f"Why did the pump fail and when? [{marker}]"


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    key = "sk-canary-e2e-" + "9d" * 10
    mp = pytest.MonkeyPatch()
    mp.setenv(TEST_KEY_ENV, key)
    tasks_path, corpus = write_release(tmp, [make_task(m, question(m), f) for m, f in TASKS], DOCS)
    with LoopbackServer(responder) as server:
        cfg = settings(tmp, [
            "model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
            f"model.api_key_env={TEST_KEY_ENV}", f"model.caps.en={EN_CAP}", f"model.caps.cjk={CJK_CAP}",
            f"dataset.tasks={tasks_path}", f"dataset.corpus={corpus}",
            "retry.backoff_base_s=0.001", "retry.backoff_max_s=0.005",
        ], judges={r.replace("-", "_"): openai_judge(server.url, r) for r in DEFAULT_TOTALS})
        result = run(cfg)
    mp.undo()
    rows = {r["question_id"]: r for r in json.loads((result.out_dir / "responses.json").read_text())}
    scores = json.loads((result.out_dir / "scores.json").read_text())
    return {"server": server, "rows": rows, "scores": scores, "result": result, "key": key, "tmp": tmp}


def model_calls(server, marker):
    return [c for c in server.calls if c.route == "test-model" and f"[{marker}]" in c.prompt]


def judge_calls(server, marker):
    return [c for c in server.calls if c.route != "test-model" and f"[{marker}]" in c.prompt]


@pytest.mark.parametrize(
    "marker, status, reason, attempts",
    [
        ("t-ok", "answered", None, 1),
        ("t-429", "answered", None, 2),
        ("t-500", "answered", None, 2),
        ("t-503", "failed", "retries_exhausted", 6),
        ("t-400", "failed", "http_error", 1),
        ("t-refusal", "failed", "refusal", 1),
        ("t-empty", "failed", "empty_output", 1),
        ("t-cjk20", "answered", None, 1),
        ("t-atcap", "answered", None, 1),
    ],
)
def test_answer_outcomes_and_attempts(scripted_run, marker, status, reason, attempts):
    row = scripted_run["rows"][marker]
    assert (row["status"], row["reason"], row["attempts"]) == (status, reason, attempts)
    assert len(model_calls(scripted_run["server"], marker)) == attempts


def test_failures_keep_the_providers_words(scripted_run):
    rows = scripted_run["rows"]
    assert "HTTP 503: unavailable" in rows["t-503"]["error"]
    assert "bad request: unsupported parameter" in rows["t-400"]["error"]
    assert rows["t-refusal"]["error"] == "I can't help with that."
    assert rows["t-empty"]["response"] == "  \n "  # the raw text is kept, not substituted


@pytest.mark.parametrize("marker, kind", [("t-ooc", "en"), ("t-cjk21", "cjk")])
def test_out_of_context_is_never_sent_nor_judged(scripted_run, marker, kind):
    row = scripted_run["rows"][marker]
    assert row["status"] == "out_of_context_scope"
    assert row["caps"]["cap_kind"] == kind and row["caps"]["scope"] == "out_of_context_scope"
    assert row["caps"]["doc_chars"] == len(DOCS[dict(TASKS)[marker]])
    assert model_calls(scripted_run["server"], marker) == []
    assert judge_calls(scripted_run["server"], marker) == []


def test_caps_decision_recorded_for_every_task(scripted_run):
    rows = scripted_run["rows"]
    assert rows["t-cjk20"]["caps"] == {"doc_chars": len(CJK20), "ideographs": 20, "cap_kind": "en", "cap": EN_CAP,
                                       "scope": "in_scope"}
    assert rows["t-atcap"]["caps"]["doc_chars"] == EN_CAP and rows["t-atcap"]["caps"]["scope"] == "in_scope"
    assert all(set(r["caps"]) == {"doc_chars", "ideographs", "cap_kind", "cap", "scope"} for r in rows.values())


@pytest.mark.parametrize("marker", ["t-503", "t-400", "t-refusal", "t-empty"])
def test_failed_answers_are_never_judged(scripted_run, marker):
    assert judge_calls(scripted_run["server"], marker) == []


def test_exact_bytes_of_the_answer_request(scripted_run):
    (call,) = model_calls(scripted_run["server"], "t-ok")
    expected = {"model": "test-model", "messages": [{"role": "user", "content": answer_prompt(question("t-ok"), DOC)}],
                "max_tokens": 8192, "temperature": 0.1, "stream": True, "stream_options": {"include_usage": True}}
    assert call.raw == encode_body(expected)  # streamed by default (the loopback server answers plain JSON)
    assert call.path == "/v1/chat/completions"
    assert call.headers["authorization"] == f"Bearer {scripted_run['key']}"


def test_exact_bytes_of_a_judge_request(scripted_run):
    calls = [c for c in judge_calls(scripted_run["server"], "t-ok") if c.route == "judge-b"]
    rubric = [RubricItem(60, "names the cause"), RubricItem(40, "gives the time")]
    answer = "The seal was worn; it failed at 03:14. [t-ok]"
    expected = {"model": "judge-b",
                "messages": [{"role": "user", "content": judge_prompt(question("t-ok"), rubric, answer)}],
                "max_tokens": 16384, "temperature": 0.1, "stream": True, "stream_options": {"include_usage": True}}
    assert [c.raw for c in calls] == [encode_body(expected)]


def test_every_answered_task_is_judged_once_by_each_judge(scripted_run):
    server = scripted_run["server"]
    for marker in ("t-ok", "t-429", "t-500", "t-oddjudge", "t-cjk20", "t-atcap"):
        assert sorted(c.route for c in judge_calls(server, marker)) == ["judge-a", "judge-b", "judge-c"]


def test_odd_judge_replies(scripted_run):
    task = {t["question_id"]: t for t in scripted_run["scores"]["tasks"]}["t-oddjudge"]
    judges = task["judges"]
    assert judges["judge_a"] == {"status": "scored", "total": 20.0, "score": 0.2, "reason": None}
    assert judges["judge_b"]["status"] == "unavailable" and judges["judge_b"]["reason"] == "no_numeric_total"
    assert judges["judge_c"]["score"] == 1.0 and judges["judge_c"]["total"] == 120.0
    assert task["score"] == pytest.approx(0.6)  # (0.2 + 1.0) / 2: the unavailable judge is not a 0
    judgments = json.loads((scripted_run["result"].out_dir / "judgments.json").read_text())
    raw_b = next(j for j in judgments if j["question_id"] == "t-oddjudge" and j["judge"] == "judge_b")
    assert raw_b["reply"] == "P1 is present, P2 is not. I award sixty points."


def test_judge_http_error_is_unavailable(scripted_run):
    task = {t["question_id"]: t for t in scripted_run["scores"]["tasks"]}["t-atcap"]
    assert task["judges"]["judge_c"] == {"status": "unavailable", "total": None, "score": None, "reason": "http_error"}
    assert task["score"] == pytest.approx(0.7)  # (0.6 + 0.8) / 2


def test_final_views(scripted_run):
    s = scripted_run["scores"]
    # Scored tasks: t-ok, t-429, t-500, t-cjk20 at (0.6+0.8+0.7)/3 = 0.7; t-oddjudge 0.6; t-atcap 0.7.
    assert s["n_total"] == 12
    assert s["n_scored"] == 6
    assert s["scored"] == pytest.approx(100 * (0.7 * 5 + 0.6) / 6, abs=1e-3)
    assert s["overall"] == pytest.approx(100 * (0.7 * 5 + 0.6) / 12, abs=1e-3)
    assert (s["n_failed"], s["n_out_of_context"], s["n_unscored"], s["n_missing"]) == (4, 2, 0, 0)
    assert s["judges"]["judge_b"]["n_unavailable"] == 1
    assert s["judges"]["judge_a"]["mean"] == pytest.approx((0.6 * 5 + 0.2) / 6)


def test_key_never_written(scripted_run):
    for path in scripted_run["tmp"].rglob("*"):
        if path.is_file():
            assert scripted_run["key"].encode() not in path.read_bytes(), path
