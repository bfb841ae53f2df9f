"""Nothing lost, nothing paid twice, under each fault — on loopback.

Non-finite numbers in bodies, oversized bodies, unwritable and full storage, SIGINT and
SIGTERM, and two processes sharing one cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, chat_stream
from wildtrace.core import records as R
from wildtrace.runtime.store.cache import StorageError
from wildtrace.runtime.run.execute import run

DOC = "The pump failed at 03:14 because the seal was worn. " * 10
JUDGE_OK = '{"points_awarded":[60,40],"total":100}'
ROOT = Path(__file__).resolve().parents[2]


def release_of(tmp_path: Path, n: int = 3) -> tuple[Path, Path]:
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(n)]
    return write_release(tmp_path / "data", tasks, {"doc.txt": DOC})


def overrides_for(server: LoopbackServer, release: tuple[Path, Path], *extra: str) -> list[str]:
    tasks, corpus = release
    return ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
            f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
            "retry.backoff_base_s=0.001", "retry.backoff_max_s=0.005", *extra]


# ---------------------------------------------------------------------- hostile bytes


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_bare_nan_in_a_body_is_nulled_recorded_and_the_rerun_reads_it_from_the_cache(tmp_path, test_key, stream):
    body = (b'{"choices":[{"message":{"content":"Worn seal."},"finish_reason":"stop"}],'
            b'"usage":{"prompt_tokens":NaN,"completion_tokens":Infinity,"x":-Infinity,"big":1e999}}')

    def responder(call: Call) -> Reply:
        if stream:
            return Reply(200, chunks=[b'data: {"choices":[{"delta":{"content":"Worn seal."},'
                                      b'"finish_reason":"stop"}]}\n\n',
                                      b'data: {"choices":[],'
                                      b'"usage":{"prompt_tokens":NaN,"completion_tokens":1e999}}\n\n',
                                      b"data: [DONE]\n\n"], content_type="text/event-stream")
        return Reply(200, body)

    release = release_of(tmp_path)
    with LoopbackServer(responder) as server:
        overrides = overrides_for(server, release, "stage=answer", f"model.stream={stream}")
        first = run(settings(tmp_path, overrides))
        second = run(settings(tmp_path, overrides))
        assert len(server.calls) == 3
    for result in (first, second):
        rows = json.loads((result.out_dir / "responses.json").read_text())  # strict JSON: no NaN in the file
        assert [r["status"] for r in rows] == [R.AnswerStatus.ANSWERED] * 3
        assert rows[0]["usage"]["prompt_tokens"] is None
        assert any("non-finite numbers replaced by null" in n for n in rows[0]["notes"])
        assert "NaN" not in (result.out_dir / "responses.json").read_text()


def test_a_body_past_max_response_mb_fails_with_its_own_reason_and_is_not_kept(tmp_path, test_key):
    huge = b'{"choices":[{"message":{"content":"' + b"A" * (3 << 20) + b'"},"finish_reason":"stop"}]}'
    release = release_of(tmp_path, 1)
    with LoopbackServer(lambda call: Reply(200, huge)) as server:
        result = run(settings(tmp_path, overrides_for(server, release, "stage=answer", "max_response_mb=1",
                                                      "model.stream=false")))
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["status"] == R.AnswerStatus.FAILED and row["reason"] == R.FailReason.RESPONSE_TOO_LARGE
    assert row["attempts"] == 1
    assert (result.out_dir / "responses.json").stat().st_size < 100_000


def test_a_streamed_body_past_the_bound_fails_too(tmp_path, test_key):
    piece = b'data: {"choices":[{"delta":{"content":"' + b"B" * 65536 + b'"}}]}\n\n'
    release = release_of(tmp_path, 1)
    with LoopbackServer(lambda call: Reply(200, chunks=[piece] * 40, content_type="text/event-stream")) as server:
        result = run(settings(tmp_path, overrides_for(server, release, "stage=answer", "max_response_mb=1")))
    (row,) = json.loads((result.out_dir / "responses.json").read_text())
    assert row["reason"] == R.FailReason.RESPONSE_TOO_LARGE


def test_hostile_judge_replies_make_that_judge_unavailable_not_the_run_crash(tmp_path, test_key):
    hostile = {
        "judge-a": "{" * 200_000,
        "judge-b": '{"total": 1' + "0" * 5000 + "}",
        "judge-c": '{"total": 1e999}',
        "judge-d": "[" * 50_000 + "]" * 50_000,
    }

    def responder(call: Call) -> Reply:
        if call.route == "test-model":
            return chat("Worn seal at 03:14.")
        return chat(hostile[call.route])

    release = release_of(tmp_path, 1)
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, overrides_for(server, release),
                       judges={r.replace("-", "_"): openai_judge(server.url, r) for r in hostile})
        result = run(cfg)
    judged = json.loads((result.out_dir / "judgments.json").read_text())
    assert [j["status"] for j in judged] == [R.JudgmentStatus.UNAVAILABLE] * 4
    assert all(j["reason"] for j in judged)
    assert result.summary["n_unscored"] == 1


# ---------------------------------------------------------------------- storage


def test_an_unwritable_cache_fails_before_any_request_naming_the_path(tmp_path, test_key):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    release = release_of(tmp_path)
    with LoopbackServer(lambda call: chat("x")) as server:
        with pytest.raises(StorageError) as info:
            run(settings(tmp_path, overrides_for(server, release, f"cache.dir={blocker}/cache")))
        assert server.calls == []
    assert f"{blocker}/cache" in str(info.value)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs: a real disk that fills up."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_disk_that_fills_up_stops_new_requests_names_the_path_and_keeps_what_was_stored(
        tmp_path, test_key, tiny_disk):
    answer = "Worn seal. " * 20_000  # ~220 kB a cached outcome: the 1 MiB disk holds four

    def responder(call: Call) -> Reply:
        time.sleep(0.05)
        return chat(answer)

    release = release_of(tmp_path, 12)
    with LoopbackServer(responder) as server:
        overrides = overrides_for(server, release, "stage=answer", f"cache.dir={tiny_disk}/cache",
                                  "model.max_concurrency=1", "model.stream=false")
        result = run(settings(tmp_path, overrides))
        sent = len(server.calls)
    assert result.exit_code == 1
    assert result.outcome.stopped.startswith("storage failure")
    assert str(tiny_disk) in result.outcome.stopped
    assert sent < 12  # it stopped sending at once
    stored = [p for p in (tiny_disk / "cache").rglob("*.json") if "pacing" not in p.parts]
    assert 1 <= len(stored) < sent + 1
    # Every answer received is in the run files (they live on another disk), marked partial.
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert len(rows) == sent and all(r["status"] == R.AnswerStatus.ANSWERED for r in rows)
    assert json.loads((result.out_dir / "run_stats.json").read_text())["status"] == "partial"


# ---------------------------------------------------------------------- signals


def _start_run(tmp_path: Path, server: LoopbackServer, release, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), TEST_KEY_ENV: os.environ[TEST_KEY_ENV]}
    args = [sys.executable, "-m", "wildtrace", f"root={tmp_path / 'outputs'}", *overrides_for(server, release, *extra)]
    return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_sending_keeps_every_outcome_marks_the_run_partial_and_the_rerun_resumes(
        tmp_path, test_key, signum, code):
    def responder(call: Call) -> Reply:
        time.sleep(0.3)
        return chat_stream("Worn seal.")

    release = release_of(tmp_path, 12)
    extra = ("stage=answer", "model.max_concurrency=2", "stop_grace_s=5", "mlflow.enabled=true")
    with LoopbackServer(responder) as server:
        proc = _start_run(tmp_path, server, release, *extra)
        deadline = time.monotonic() + 60
        while len(server.completed) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        paid = len(server.completed)
        assert proc.returncode == code, err
        assert paid < 12
        assert "STOPPED" in out and "resume with: python -m wildtrace" in out
        assert "Traceback" not in err
        run_dir = Path(next(line for line in out.splitlines() if line.startswith("run dir: "))[9:])
        stats = json.loads((run_dir / "run_stats.json").read_text())
        assert stats["status"] == "partial" and stats["stopped"] == signal.Signals(signum).name
        rows = json.loads((run_dir / "responses.json").read_text())
        assert len(rows) >= 4 and all(r["status"] == R.AnswerStatus.ANSWERED for r in rows)
        # The resume: the same command, nothing paid twice.
        again = _start_run(tmp_path, server, release, *extra)
        out2, err2 = again.communicate(timeout=120)
        assert again.returncode == 0, err2
        prompts = [c.prompt for c in server.completed]
        assert len(prompts) == len(set(prompts)) == 12  # every answer paid for exactly once
        assert "from the cache" in out2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    statuses = sorted(r.info.status for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()]))
    assert "RUNNING" not in statuses


# ---------------------------------------------------------------------- shared cache


@pytest.mark.slow
def test_two_processes_on_one_cache_pay_each_call_once(tmp_path, test_key):
    def responder(call: Call) -> Reply:
        time.sleep(0.4)
        return chat_stream("Worn seal.")

    release = release_of(tmp_path, 6)
    with LoopbackServer(responder) as server:
        procs = [_start_run(tmp_path, server, release, "stage=answer", "model.max_concurrency=3",
                            "mlflow.enabled=false")
                 for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
    prompts = [c.prompt for c in server.calls]
    assert len(prompts) == 6 == len(set(prompts))
