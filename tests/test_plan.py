"""Plan first: caps and cache look-ups decide which endpoints have calls to make, and only
those need a key (issue 9, item 3)."""

from __future__ import annotations

import json
import logging

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from loopback import Call, LoopbackServer, Reply, chat_stream
from wildtrace.runtime.run import run
from wildtrace.runtime.secrets import MissingKeyError

DOC = "The pump failed at 03:14 because the seal was worn. " * 10


def responder(call: Call) -> Reply:
    return chat_stream("Worn seal." if call.route == "test-model" else '{"points_awarded":[50],"total":50}')


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(4)]
    tasks.append(make_task("q-long", "What failed? [q-long]", "long.txt"))
    return write_release(tmp_path, tasks, {"doc.txt": DOC, "long.txt": "x" * 6000})


def overrides(server, release, *extra):
    tasks, corpus = release
    return ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
            f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
            "model.caps.en=5000", *extra]


def panel(server, *routes):
    return {r.replace("-", "_"): {**openai_judge(server.url, r), "api_key_env": f"KEY_{r.upper().replace('-', '_')}"}
            for r in routes}


def test_a_cached_ablation_runs_with_its_judges_keys_unset_and_sends_nothing(tmp_path, release, monkeypatch, caplog):
    with LoopbackServer(responder) as server:
        for route in ("judge-a", "judge-b"):
            monkeypatch.setenv(f"KEY_{route.upper().replace('-', '_')}", "sk-judge-" + route)
        full = run(settings(tmp_path, overrides(server, release), judges=panel(server, "judge-a", "judge-b")))
        paid = len(server.calls)
        for name in (TEST_KEY_ENV, "KEY_JUDGE_A", "KEY_JUDGE_B"):
            monkeypatch.delenv(name)
        with caplog.at_level(logging.INFO, logger="wildtrace"):
            ablation = run(settings(tmp_path, overrides(server, release), judges=panel(server, "judge-a")))
        assert len(server.calls) == paid == 4 + 4 * 2  # four in-scope answers, each judged twice
    assert ablation.exit_code == 0 and ablation.stats["requests"] == {"model": 0, "judge_a": 0}
    assert ablation.summary["overall"] == pytest.approx(40.0) and full.summary["overall"] == pytest.approx(40.0)
    plan = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("plan:"))
    assert plan == ("plan: answers: 0 to request, 4 from the cache, 1 out of context; "
                    "judge calls: 0 to make, 4 from the cache")


def test_a_new_judge_without_its_key_is_reported_even_when_the_answers_are_cached(tmp_path, release, monkeypatch):
    with LoopbackServer(responder) as server:
        monkeypatch.setenv("KEY_JUDGE_A", "sk-a")
        run(settings(tmp_path, overrides(server, release), judges=panel(server, "judge-a")))
        sent = len(server.calls)
        monkeypatch.delenv(TEST_KEY_ENV)  # the answers are cached: the model needs no key
        with pytest.raises(MissingKeyError) as info:
            run(settings(tmp_path, overrides(server, release), judges=panel(server, "judge-a", "judge-b")))
        assert len(server.calls) == sent
    assert str(info.value) == ("judge_panel.judges.judge_b.api_key_env: environment variable KEY_JUDGE_B is not set "
                               "(it must hold the API key for judge-b)")


def test_the_plan_counts_pending_judge_calls_for_answers_not_yet_known(tmp_path, release, monkeypatch, caplog):
    monkeypatch.setenv("KEY_JUDGE_A", "sk-a")
    with LoopbackServer(responder) as server, caplog.at_level(logging.INFO, logger="wildtrace"):
        run(settings(tmp_path, overrides(server, release), judges=panel(server, "judge-a")))
    plan = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("plan:"))
    assert plan == ("plan: answers: 4 to request, 0 from the cache, 1 out of context; "
                    "judge calls: 0 to make (+ up to 4 for new answers), 0 from the cache")
    rows = json.loads((tmp_path / "run" / "responses.json").read_text())
    assert [r["cached"] for r in rows] == [False] * 5


def test_off_a_terminal_the_run_logs_progress_lines_with_each_endpoints_limit(tmp_path, release, monkeypatch, caplog):
    monkeypatch.setenv("KEY_JUDGE_A", "sk-a")
    with LoopbackServer(responder) as server, caplog.at_level(logging.INFO, logger="wildtrace"):
        cfg = settings(tmp_path, overrides(server, release, "progress_every_s=0.01"), judges=panel(server, "judge-a"),
                       progress=True)
        run(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert lines and lines[-1].startswith("progress: 5/5 tasks (")
    assert "ok 4 · failed 0 · ooc 1 · judged 4 · unavailable 0 · retries 0 · limits model=16 judge_a=16" in lines[-1]
