"""Answer requests prepared ahead of the workers, against a real scripted server on 127.0.0.1.

The pipeline reads, encodes and hashes the next documents' requests while the calls before
them are in flight. What that must not change: every task is answered exactly once, with
the bytes it would have had; a temperature rejection seen after the next requests were made
still reaches every one of them; a document that cannot be read when its turn comes fails
the run as before, before its request; a stop leaves nothing being prepared.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, error
from wildtrace.core.prompts import answer_prompt
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.run import pipeline
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.attempt import encode_body
from wildtrace.runtime.run.plan import Plan, build_plan, model_spec, samplings
from wildtrace.runtime.net.retry import RetryPolicy
from wildtrace.runtime.run.execute import run

DOC = "The pump failed at 03:14 because the seal was worn. " * 20
N = 12


def release(tmp, n: int = N):
    tasks = [make_task(f"q{i:02d}", f"Why did pump {i} fail?", f"doc{i:02d}.txt") for i in range(n)]
    return write_release(tmp, tasks, {f"doc{i:02d}.txt": DOC + f" Pump {i}." for i in range(n)})


def config(tmp, server, tasks, corpus, *extra: str):
    return settings(tmp, ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                          f"model.api_key_env={TEST_KEY_ENV}", "model.max_concurrency=4", "model.stream=false",
                          f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "retry.backoff_base_s=0.001",
                          "retry.backoff_max_s=0.005", *extra],
                    judges={"judge_a": openai_judge(server.url, "judge-a")})


def grade(call: Call) -> Reply:
    return chat(json.dumps({"points_awarded": [70], "total": 70}))


def test_every_task_is_answered_once_with_the_bytes_it_would_have_had(tmp_path, test_key):
    def respond(call: Call) -> Reply:
        if call.route == "test-model":
            time.sleep(0.02)
            return chat("Worn seal.")
        return grade(call)

    tasks, corpus = release(tmp_path)
    with LoopbackServer(respond) as server:
        cfg = config(tmp_path, server, tasks, corpus)
        result = run(cfg)
    answers = [c for c in server.calls if c.route == "test-model"]
    assert sorted(c.prompt for c in answers) == sorted(
        answer_prompt(f"Why did pump {i} fail?", DOC + f" Pump {i}.") for i in range(N))
    provider = make_provider(model_spec(cfg))
    for c in answers:  # the prepared bytes are exactly what a request made on the spot encodes to
        assert c.raw == encode_body(provider.build_request(c.prompt, sampling(cfg)).body)
    assert [r["status"] for r in result.outcome.answers] == ["answered"] * N
    assert len({r["prompt_sha256"] for r in result.outcome.answers}) == N


def test_a_temperature_rejection_reaches_requests_prepared_before_it(tmp_path, test_key):
    def respond(call: Call) -> Reply:
        if call.route != "test-model":
            return grade(call)
        if "temperature" in call.body:
            time.sleep(0.05)  # the next requests are prepared (with temperature) meanwhile
            return error(400, "Unsupported value: 'temperature' does not support 0.1 with this model.")
        return chat("Worn seal.")

    tasks, corpus = release(tmp_path)
    with LoopbackServer(respond) as server:
        result = run(config(tmp_path, server, tasks, corpus))
    answers = [c for c in server.calls if c.route == "test-model"]
    with_temperature = [c for c in answers if "temperature" in c.body]
    assert 1 <= len(with_temperature) <= 4  # only the calls already in flight when the first was refused
    assert len(answers) - len(with_temperature) == N
    assert [r["status"] for r in result.outcome.answers] == ["answered"] * N
    assert all(r["temperature_sent"] is False for r in result.outcome.answers)


def test_a_document_unreadable_when_its_turn_comes_fails_before_its_request(tmp_path, test_key):
    tasks, corpus = release(tmp_path)
    gone = corpus / "doc07.txt"

    def respond(call: Call) -> Reply:
        if call.route == "test-model" and "pump 0 " in call.prompt:
            gone.write_bytes(b"\xff\xfe not UTF-8 any more")  # changed under the run, after it was measured
        return chat("Worn seal.") if call.route == "test-model" else grade(call)

    with LoopbackServer(respond) as server:
        cfg = config(tmp_path, server, tasks, corpus, "model.max_concurrency=1")
        with pytest.raises(BaseException) as caught:
            run(cfg)
    leaves = list(_leaves(caught.value))
    assert any(isinstance(e, UnicodeDecodeError) for e in leaves), leaves
    prompts = [c.prompt for c in server.calls if c.route == "test-model"]
    assert not any("pump 7 " in p for p in prompts)  # never sent


def test_a_stop_leaves_no_request_being_prepared(tmp_path, test_key, monkeypatch):
    prepared: list[str] = []
    original = pipeline._Run.prepare

    def prepare(self, task):
        prepared.append(task.question_id)
        return original(self, task)

    monkeypatch.setattr(pipeline._Run, "prepare", prepare)

    def respond(call: Call) -> Reply:
        time.sleep(0.05)
        return chat("Worn seal.") if call.route == "test-model" else grade(call)

    tasks, corpus = release(tmp_path, 40)
    with LoopbackServer(respond) as server:
        plan = connected_plan(config(tmp_path, server, tasks, corpus))

        async def main():
            stop = pipeline.Stop()
            asyncio.get_running_loop().call_later(0.3, stop.request, "SIGTERM")
            try:
                outcome = await pipeline.execute(plan, stop=stop)
                at_return = len(prepared)
                await asyncio.sleep(0.3)  # a preparer left running would go on reading documents
                return outcome, at_return
            finally:
                for e in [plan.model, *plan.judges]:
                    await e.aclose()

        outcome, at_return = asyncio.run(main())
    sent = sum(1 for c in server.calls if c.route == "test-model")
    assert outcome.stopped == "SIGTERM" and 0 < sent < 40
    assert len(prepared) == at_return
    workers, queued = 4, 1
    assert len(prepared) <= sent + workers + queued + 1  # taken but not sent, waiting, being made


# ---------------------------------------------------------------------- helpers


def _leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def sampling(cfg):
    return samplings(cfg)[0]


def connected_plan(cfg) -> Plan:
    """The plan run() would make, without run()'s signal handling (the test stops it itself)."""
    plan = build_plan(cfg)
    plan.retry, plan.grace_s = RetryPolicy(0, 0.001, 0.005, 1.0), 5.0
    return plan.connect({TEST_KEY_ENV: os.environ[TEST_KEY_ENV]}, Cache(Path(cfg.cache.dir), cfg.cache.enabled),
                        lambda label: None)


def test_one_worker_stores_every_outcome_and_a_rerun_pays_for_none_again(tmp_path, test_key):
    """One worker (concurrency 1): each task's request is sent once, its outcome stored; a rerun sends nothing."""
    tasks, corpus = release(tmp_path, 3)
    with LoopbackServer(lambda call: chat("Worn seal.") if call.route == "test-model" else grade(call)) as server:
        first = run(config(tmp_path, server, tasks, corpus, "model.max_concurrency=1", "stage=answer",
                           f"cache.dir={tmp_path / 'cache'}"))
        again = run(config(tmp_path / "again", server, tasks, corpus, "model.max_concurrency=1", "stage=answer",
                           f"cache.dir={tmp_path / 'cache'}"))
    assert [r["status"] for r in first.outcome.answers] == ["answered"] * 3
    assert first.stats["requests"] == {"model": 3}
    assert again.stats["requests"] == {"model": 0} and again.stats["cache_hits"] == 3
