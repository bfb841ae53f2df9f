"""run_stats.json's git_commit: the harness's checkout, "unknown" when git cannot say."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_KEY_ENV, make_task, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace.runtime.run import execute as run_module
from wildtrace.runtime.run.execute import git_commit, run


def responder(call: Call) -> Reply:
    return chat("The seal was worn.")


@pytest.fixture
def fresh_lookup(monkeypatch):
    """A process that has not looked its commit up yet (the lookup is kept for the process)."""
    git_commit.cache_clear()
    yield
    git_commit.cache_clear()


def answer_run(tmp_path, server, tasks, corpus):
    return run(settings(tmp_path, ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                                   f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}",
                                   f"dataset.corpus={corpus}", "stage=answer", "cache.enabled=false"]))


@pytest.mark.usefixtures("fresh_lookup")
def test_every_run_names_the_commit_git_gives(tmp_path, test_key, monkeypatch):
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(3)],
                                  {"doc.txt": "The seal was worn. " * 50})
    monkeypatch.setattr(run_module, "_ask_git", lambda: "0123abcd" * 5)
    with LoopbackServer(responder) as server:
        first = answer_run(tmp_path / "a", server, tasks, corpus)
        second = answer_run(tmp_path / "b", server, tasks, corpus)
    assert len(server.calls) == 6
    for result in (first, second):
        stats = json.loads((result.out_dir / "run_stats.json").read_text())
        assert stats["git_commit"] == "0123abcd" * 5 == result.stats["git_commit"]


@pytest.mark.parametrize("failure", [OSError("no git"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
                                     RuntimeError("anything")])
@pytest.mark.usefixtures("fresh_lookup")
def test_a_lookup_that_raises_is_unknown(monkeypatch, failure):
    def ask_git() -> str:
        raise failure

    monkeypatch.setattr(run_module, "_ask_git", ask_git)
    assert git_commit() == "unknown"


@pytest.mark.usefixtures("fresh_lookup")
def test_the_real_lookup_names_this_checkout():
    commit = git_commit()
    if commit == "unknown":  # an installed copy outside a checkout (the install test's venv)
        pytest.skip("not run from a git checkout")
    head = commit.removesuffix("-dirty")
    assert len(head) == 40 and all(c in "0123456789abcdef" for c in head)
