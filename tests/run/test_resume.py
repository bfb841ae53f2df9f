"""A run killed mid-way (kill -9) and started again sends no request whose outcome is stored,
and ends with the same files as an uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat

pytestmark = pytest.mark.slow
N_TASKS, STOP_AFTER = 8, 6
QID = re.compile(r"\[(q\d+)\]")


class Gate:
    """Lets the first STOP_AFTER requests through, then holds the rest until released."""

    def __init__(self) -> None:
        self.closed = True
        self.passed = 0
        self.held = 0
        self.release = threading.Event()
        self.lock = threading.Lock()

    def responder(self, call: Call) -> Reply:
        with self.lock:
            hold = self.closed and self.passed >= STOP_AFTER
            if hold:
                self.held += 1
            else:
                self.passed += 1
        if hold:
            self.release.wait(timeout=30)
        if call.route == "test-model":
            qid = QID.search(call.prompt).group(1)
            return chat(f"Answer for {qid}: the seal was worn.")
        return chat('{"points_awarded":[60],"total":60}')


def command(root: Path, url: str, tasks: Path, corpus: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "wildtrace", f"root={root}", "model=custom", "model.route=test-model",
            f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}", "model.max_concurrency=2",
            "judge_panel.judges.lexical.provider=openai", "judge_panel.judges.lexical.route=judge-a",
            f"judge_panel.judges.lexical.base_url={url}/v1", f"judge_panel.judges.lexical.api_key_env={TEST_KEY_ENV}",
            f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", f"cache.dir={cache}", "mlflow.enabled=false",
            "progress=false"]


def run_dir(stdout: str) -> Path:
    return Path(re.search(r"^run dir: (.+)$", stdout, re.M).group(1))


def without_latency(rows: list[dict]) -> list[dict]:
    """Two separate runs' calls differ only in when they happened, how long they took, and whether
    this run paid for them or read them from the cache (and so what they cost this run)."""
    return [{k: v for k, v in r.items() if k not in ("latency_s", "started_at", "cached", "original_latency_s",
                                                     "cost_usd", "original_cost_usd")} for r in rows]


def test_killed_run_resumes_without_paying_twice(tmp_path):
    tasks, corpus = write_release(tmp_path,
                                  [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(N_TASKS)],
                                  {"doc.txt": "The seal was worn. The pump failed at 03:14. " * 30})
    env = {**os.environ, TEST_KEY_ENV: "sk-test-resume"}
    cache = tmp_path / "cache"
    gate = Gate()
    with LoopbackServer(gate.responder) as server:
        cmd = command(tmp_path / "out", server.url, tasks, corpus, cache)
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while gate.held == 0 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert gate.held > 0, first.communicate()
        time.sleep(0.5)  # let the client store what it already received
        first.kill()  # SIGKILL: no cleanup runs
        first.wait()
        completed_first = {c.raw for c in server.completed}
        sent_first = len(server.calls)
        gate.release.set()
        gate.closed = False

        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        calls_second = server.calls[sent_first:]

        fresh = subprocess.run(command(tmp_path / "fresh", server.url, tasks, corpus, tmp_path / "cache2"), env=env,
                               capture_output=True, text=True, timeout=120)
        assert fresh.returncode == 0, fresh.stderr

    assert len(completed_first) == STOP_AFTER
    resent = [c for c in calls_second if c.raw in completed_first]
    assert resent == [], "a request whose outcome was already received was sent again"
    # Everything not completed before the kill was asked for exactly once in the second run.
    assert len(calls_second) == len({c.raw for c in calls_second}) == 2 * N_TASKS - STOP_AFTER

    resumed, clean = run_dir(second.stdout), run_dir(fresh.stdout)
    assert without_latency(json.loads((resumed / "responses.json").read_text())) == \
        without_latency(json.loads((clean / "responses.json").read_text()))
    assert json.loads((resumed / "scores.json").read_text()) == json.loads((clean / "scores.json").read_text())
    assert json.loads((resumed / "scores.json").read_text())["n_scored"] == N_TASKS
