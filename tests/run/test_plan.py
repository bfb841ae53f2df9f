"""Plan first: caps and cache look-ups decide which endpoints have calls to make, and only
those need a key."""

from __future__ import annotations

import ast
import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat_stream
from wildtrace.runtime.run.execute import run
from wildtrace.runtime.net.secrets import MissingKeyError

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


# ---------------------------------------------------------------------- the plan built once

MARK = b"PLAN-MARK-"


def marked_release(tmp_path):
    """Four in-scope documents and one out of context, each holding a marker the counters look for."""
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", f"doc{i}.txt") for i in range(4)]
    tasks.append(make_task("q-long", "What failed? [q-long]", "long.txt"))
    docs = {f"doc{i}.txt": f"{MARK.decode()}{i} " + DOC for i in range(4)}
    docs["long.txt"] = f"{MARK.decode()}long " + "x" * 6000
    return write_release(tmp_path, tasks, docs)


class Counted:
    """Reads of each corpus file, and how often each byte string holding a document was hashed."""

    def __init__(self, monkeypatch, corpus) -> None:
        self.reads: Counter = Counter()
        self.hashes: Counter = Counter()
        read_bytes, sha256 = Path.read_bytes, hashlib.sha256

        def counting_read(path: Path) -> bytes:
            if path.parent == corpus:
                self.reads[path.name] += 1
            return read_bytes(path)

        def counting_sha256(data=b"", **kwargs):
            if MARK in bytes(data):
                self.hashes[sha256(bytes(data)).hexdigest()] += 1
            return sha256(data, **kwargs)

        monkeypatch.setattr(Path, "read_bytes", counting_read)
        monkeypatch.setattr(hashlib, "sha256", counting_sha256)
        self.raw = {p.name: sha256(read_bytes(p)).hexdigest() for p in corpus.iterdir()}

    def reset(self) -> None:
        self.reads.clear()
        self.hashes.clear()


def test_each_document_is_read_once_by_the_plan_and_a_cached_rerun_reads_it_no_more(tmp_path, test_key,
                                                                                    monkeypatch):
    tasks, corpus = marked_release(tmp_path)
    monkeypatch.setenv("KEY_JUDGE_A", "sk-a")
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, overrides(server, (tasks, corpus)), judges=panel(server, "judge-a"))
        counted = Counted(monkeypatch, corpus)
        first = run(cfg)
        fresh_reads, fresh_hashes = dict(counted.reads), dict(counted.hashes)
        counted.reset()
        again = run(cfg)
        sent = len(server.calls)
    assert sent == 4 + 4  # the rerun sent nothing
    # A fresh run: the plan's one read (measure, request, key), and the send's read of the bytes it sends.
    assert fresh_reads == {**{f"doc{i}.txt": 2 for i in range(4)}, "long.txt": 1}
    assert all(fresh_hashes[digest] == 1 for digest in counted.raw.values())  # each file's sha256: once
    # …and each prompt's sha256 once; only the request's bytes are hashed again, as sent (the cache
    # key must name the bytes sent): 4 + 1 file hashes and 4 prompt hashes once, 4 keys twice.
    assert sorted(Counter(fresh_hashes.values()).items()) == [(1, 4 + 1 + 4), (2, 4)]
    # The cached rerun: each document read once, and no byte string holding one hashed twice —
    # its file's sha256, its request's cache key and its prompt's sha256, once each.
    assert dict(counted.reads) == {**{f"doc{i}.txt": 1 for i in range(4)}, "long.txt": 1}
    assert max(counted.hashes.values()) == 1 and len(counted.hashes) == 4 * 3 + 1
    assert set(counted.raw.values()) <= set(counted.hashes)
    # …and records what the first run recorded, served from the cache.
    assert [r["cached"] for r in again.outcome.answers] == [True] * 4 + [False]
    keep = ("question_id", "status", "response", "prompt_sha256", "prompt_ref", "temperature_sent", "caps", "document")
    assert [{k: r.get(k) for k in keep} for r in again.outcome.answers] == \
           [{k: r.get(k) for k in keep} for r in first.outcome.answers]
    assert again.summary == first.summary


def test_the_estimate_reads_each_document_once_and_sends_nothing(tmp_path, test_key, monkeypatch):
    from wildtrace.estimate import estimate

    tasks, corpus = marked_release(tmp_path)
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, overrides(server, (tasks, corpus)), judges=panel(server, "judge-a"))
        counted = Counted(monkeypatch, corpus)
        est = estimate(cfg)
        assert server.calls == []
    assert dict(counted.reads) == {**{f"doc{i}.txt": 1 for i in range(4)}, "long.txt": 1}
    assert max(counted.hashes.values()) == 1
    assert est["plan"]["answers_to_request"] == 4 and est["plan"]["out_of_context"] == 1


def test_the_plan_makes_each_endpoint_spec_provider_and_caps_decision_once(tmp_path, test_key, monkeypatch):
    from wildtrace.providers import registry
    from wildtrace.runtime.run import plan as plan_module

    tasks, corpus = marked_release(tmp_path)
    made: list[str] = []
    decided: list[int] = []
    make_provider, decide = registry.make_provider, plan_module.decide

    def counting_provider(spec):
        made.append(spec.label)
        return make_provider(spec)

    def counting_decide(*args):
        decided.append(1)
        return decide(*args)

    monkeypatch.setattr(plan_module, "make_provider", counting_provider)
    monkeypatch.setattr(plan_module, "decide", counting_decide)
    monkeypatch.setenv("KEY_JUDGE_A", "sk-a")
    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path, overrides(server, (tasks, corpus)), judges=panel(server, "judge-a")))
    assert result.exit_code == 0 and made == ["model", "judge_a"]
    # Each document's decision once, while it is read; every task, the survey and the pipeline reuse it.
    assert len(decided) == 5


@pytest.mark.parametrize("values", [
    {"max_retries": 5, "backoff_base_s": 1.0, "backoff_max_s": 60.0, "retry_after_max_s": 300.0},  # the spec's
    {"max_retries": 0, "backoff_base_s": 0.0, "backoff_max_s": 0.0, "retry_after_max_s": 0.0},
    {"max_retries": 3, "backoff_base_s": 0.5, "backoff_max_s": 7.0, "retry_after_max_s": 42.0},
])
def test_the_retry_rule_is_its_config_field_for_field(values):
    from wildtrace.config import RetryConfig
    from wildtrace.runtime.run.plan import retry_policy

    policy = retry_policy(RetryConfig(**values))
    assert {name: getattr(policy, name) for name in values} == values


@pytest.mark.parametrize("constructor", ["RetryPolicy", "EndpointSpec", "Endpoint"])
def test_the_runtime_types_are_made_from_the_config_in_one_place(constructor):
    """Nothing but runtime/run/plan.py builds a retry rule, an endpoint spec or an endpoint (twin copies drift)."""
    package = Path(__file__).resolve().parents[2] / "wildtrace"

    def calls(path: Path) -> bool:
        return any(isinstance(node, ast.Call) and (getattr(node.func, "id", None) == constructor
                                                   or getattr(node.func, "attr", None) == constructor)
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))

    assert sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if calls(p)) == ["runtime/run/plan.py"]


def test_the_config_caps_are_the_cores_caps(tmp_path):
    from wildtrace.core.caps import Caps

    cfg = settings(tmp_path, ["model.caps.en=1234", "model.caps.cjk=56"])
    assert type(cfg.model.caps) is Caps and cfg.model.caps == Caps(en=1234, cjk=56)
