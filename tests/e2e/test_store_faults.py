"""The MLflow store's faults, each reproduced with real processes.

- Several first runs started at the same moment on a fresh ``outputs/`` raced MLflow's schema
  migrations on the new SQLite store: runs went unlogged, ``_alembic_tmp_*`` tables were left
  that broke every later run and ``upload``, and the exit status stayed 0.
- A store that cannot be opened (its path a folder, a file where its folder should be, a file
  that is no database, a store left half-migrated) stalled a run for about 100 s in MLflow's
  engine retries, or failed at the end with exit status 0.
- ``upload`` of a run killed by SIGKILL (the folder holds only ``app.log`` and ``mlflow.json``)
  said "not a wildtrace run directory" instead of what finishes that run.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace.tracking import store
from wildtrace.tracking.runs.mlflow_logger import read_marker

pytestmark = [pytest.mark.slow, pytest.mark.mlflow]  # real runs, each a few seconds
HEADLINE_RUN = re.compile(r"^mlflow: run ([0-9a-f]{32}) at ", re.M)
#: Runs a real ``python -m wildtrace`` once every process is ready and the go file exists:
#: the processes start their runs (and their logging processes) together.
BARRIER = """
import os, sys, time
import wildtrace.app as app
ready, go = sys.argv[1], sys.argv[2]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
sys.argv = ["wildtrace", *sys.argv[3:]]
app.main()
"""


def wildtrace(root: Path, *overrides: str) -> list[str]:
    """The default offline run (no key, no server) under ``root``."""
    return [sys.executable, "-m", "wildtrace", f"root={root}", "progress=false", *overrides]


def alembic_leftovers(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                           "AND name LIKE '\\_alembic\\_tmp\\_%' ESCAPE '\\'")]


def run_dir(stdout: str) -> Path:
    return Path(re.search(r"^run dir: (.+)$", stdout, re.M).group(1))


def wait_for(predicate, timeout: float = 120.0, what: str = "the event"):
    """Poll until ``predicate()`` is truthy; the timeout is only a safety net."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ first runs at once


def test_first_runs_started_together_on_a_fresh_store_are_all_logged(tmp_path):
    n = 3
    root = tmp_path / "outputs"  # fresh: no mlflow.db yet
    go = tmp_path / "go"
    procs = []
    for i in range(n):
        cmd = [sys.executable, "-c", BARRIER, str(tmp_path / f"ready{i}"), str(go), f"root={root}", "progress=false"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    wait_for(lambda: all((tmp_path / f"ready{i}").exists() for i in range(n)), what="every process ready")
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
        assert HEADLINE_RUN.search(out), out + err
        assert "NOT logged" not in err, err
    ids = {HEADLINE_RUN.search(out).group(1) for out, _ in outs}
    assert len(ids) == n
    for out, _ in outs:
        marker = read_marker(run_dir(out))
        assert marker["status"] == "logged" and marker["run_id"] in ids
    db = root / "mlflow.db"
    assert alembic_leftovers(db) == []
    client = store.client_for(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("wildtrace")
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == ids
    assert all(client.get_run(i).info.status == "FINISHED" for i in ids)

    later = subprocess.run(wildtrace(root), capture_output=True, text=True, timeout=600)
    assert later.returncode == 0 and HEADLINE_RUN.search(later.stdout), later.stdout + later.stderr
    upload = subprocess.run([sys.executable, "-m", "wildtrace.upload", "--force", str(run_dir(outs[0][0]))],
                            capture_output=True, text=True, timeout=600)
    assert upload.returncode == 0 and "logged as MLflow run" in upload.stdout, upload.stdout + upload.stderr
    assert len(client.search_runs([experiment.experiment_id])) == n + 2


def test_the_store_is_created_under_a_lock_beside_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    lock = tmp_path / "mlflow.db.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process creating or migrating the store
    opened = threading.Event()
    threading.Thread(target=lambda: (store.client_for(uri), opened.set()), daemon=True).start()
    try:
        assert not opened.wait(1.0)  # it waits for the lock: the store is not touched meanwhile
        assert not (tmp_path / "mlflow.db").exists()
    finally:
        os.close(fd)
    assert opened.wait(120)
    assert (tmp_path / "mlflow.db").is_file() and alembic_leftovers(tmp_path / "mlflow.db") == []


def test_the_wait_for_the_lock_is_bounded_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "STORE_LOCK_WAIT_S", 0.2)
    lock = tmp_path / "mlflow.db.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(store.StoreUnusable, match=re.escape(str(lock))):
            store.client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")
    finally:
        os.close(fd)


@pytest.mark.parametrize("required, status", [("true", 3), ("false", 0)])
def test_a_run_that_could_not_log_says_so_in_its_exit_status_and_headline(tmp_path, required, status):
    uri = f"http://127.0.0.1:{closed_port()}"  # a tracking server that is down
    proc = subprocess.run(wildtrace(tmp_path / "outputs", f"mlflow.tracking_uri={uri}", f"mlflow.required={required}"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == status, proc.stdout + proc.stderr
    out = run_dir(proc.stdout)
    assert (out / "scores.json").exists()  # the results are never lost to MLflow trouble
    assert read_marker(out)["status"] == "not_logged"
    line = [x for x in proc.stdout.splitlines() if x.startswith("mlflow:")]
    assert len(line) == 1 and "NOT logged" in line[0] and f"python -m wildtrace.upload {out}" in line[0]
    assert ("exit status 3" in line[0]) == (required == "true")


def test_upload_says_3_when_mlflow_could_not_log_and_2_for_a_folder_that_is_no_run(tmp_path):
    run = subprocess.run(wildtrace(tmp_path / "outputs", "mlflow.enabled=false"), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    uri = f"http://127.0.0.1:{closed_port()}"
    up = subprocess.run([sys.executable, "-m", "wildtrace.upload", "--tracking-uri", uri, str(run_dir(run.stdout))],
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 3, up.stdout + up.stderr
    assert "not logged" in up.stderr and "Traceback" not in up.stderr
    (tmp_path / "empty").mkdir()
    up = subprocess.run([sys.executable, "-m", "wildtrace.upload", "--tracking-uri", uri, str(tmp_path / "empty")],
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 2 and "not a wildtrace run directory" in up.stderr, up.stdout + up.stderr


#: Opens a new store and SIGKILLs itself right after the n-th SQL statement containing a marker:
#: the first run killed while MLflow makes the store's schema, at a point chosen by the test.
KILLED_CREATION = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from wildtrace.tracking import store
uri, marker, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = []

@event.listens_for(Engine, "after_cursor_execute")
def kill_at(conn, cursor, statement, *args):
    if marker in statement:
        seen.append(statement)
        if len(seen) == n:
            os.kill(os.getpid(), signal.SIGKILL)

store.open_store(uri)
"""


@pytest.mark.parametrize(("marker", "n"), [
    ("CREATE TABLE alembic_version", 1),  # the first tables made, no migration run yet
    ("UPDATE alembic_version", 5),  # between two migrations
    ("CREATE TABLE _alembic_tmp_", 1),  # inside a migration that copies a table
])
def test_a_first_run_killed_while_the_store_is_made_leaves_a_store_the_next_run_makes_again(tmp_path, marker, n):
    db = tmp_path / "outputs" / "mlflow.db"
    db.parent.mkdir()
    uri = f"sqlite:///{db}"
    killed = subprocess.run([sys.executable, "-c", KILLED_CREATION, uri, marker, str(n)], capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(db) as conn:  # part-made: some tables, not the whole schema
        made = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "runs" in made and "trace_info" not in made, made

    proc = subprocess.run(wildtrace(tmp_path / "outputs", f"mlflow.tracking_uri={uri}"), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = HEADLINE_RUN.search(proc.stdout).group(1)
    assert read_marker(run_dir(proc.stdout))["status"] == "logged"
    assert alembic_leftovers(db) == []
    client = store.client_for(uri)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert client.search_traces(locations=[client.get_run(run_id).info.experiment_id], run_id=run_id)


# ------------------------------------------------------------------ a store that cannot be opened


def bad_store(tmp_path: Path, kind: str) -> tuple[str, Path]:
    """(tracking URI, the path the error must name) for a local store that cannot be used."""
    if kind == "a folder where the database should be":
        db = tmp_path / "store" / "mlflow.db"
        db.mkdir(parents=True)
        return f"sqlite:///{db}", db
    if kind == "a file where its folder should be":
        folder = tmp_path / "afile"
        folder.write_text("not a folder")
        return f"sqlite:///{folder / 'mlflow.db'}", folder
    if kind == "a file that is no database":
        db = tmp_path / "mlflow.db"
        db.write_bytes(b"\x00garbage, not SQLite" * 100)
        return f"sqlite:///{db}", db
    assert kind == "a store left half-migrated"
    db = tmp_path / "mlflow.db"
    client = store.client_for(f"sqlite:///{db}")
    client.create_run(client.create_experiment("earlier"))  # it holds a run: not made again
    with sqlite3.connect(db) as conn:  # what an interrupted batch migration leaves behind
        conn.execute("CREATE TABLE _alembic_tmp_runs (run_uuid VARCHAR(32))")
    return f"sqlite:///{db}", db


KINDS = ["a folder where the database should be", "a file where its folder should be", "a file that is no database",
         "a store left half-migrated"]


class Answers:
    """A model and judge on 127.0.0.1 that answer at once, counting what they are asked."""

    def responder(self, call: Call) -> Reply:
        if call.route == "test-model":
            return chat("The seal was worn; the pump failed at 03:14.")
        return chat('{"points_awarded":[60,40],"total":100}')


def served_run(tmp_path: Path, url: str, *overrides: str) -> list[str]:
    tasks, corpus = write_release(tmp_path / "release", [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                                         for i in range(3)],
                                  {"doc.txt": "The seal was worn. The pump failed at 03:14. " * 20})
    return [sys.executable, "-m", "wildtrace", f"root={tmp_path / 'outputs'}", "model=custom", "model.route=test-model",
            f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
            "judge_panel.judges.lexical.provider=openai", "judge_panel.judges.lexical.route=judge-a",
            f"judge_panel.judges.lexical.base_url={url}/v1", f"judge_panel.judges.lexical.api_key_env={TEST_KEY_ENV}",
            f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "progress=false", *overrides]


@pytest.mark.parametrize("kind", KINDS)
def test_a_required_store_that_cannot_be_opened_fails_before_any_request_in_one_line(tmp_path, kind):
    uri, named = bad_store(tmp_path, kind)
    with LoopbackServer(Answers().responder) as server:
        proc = subprocess.run(served_run(tmp_path, server.url, f"mlflow.tracking_uri={uri}"),
                              env={**os.environ, TEST_KEY_ENV: "sk-test-store"}, capture_output=True, text=True,
                              timeout=600)
        assert server.calls == []
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "SQLAlchemy" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and str(named) in errors[0] and "mlflow.required=false" in errors[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_not_required_that_cannot_be_opened_is_one_warning_and_the_run_goes_on(tmp_path, kind):
    uri, named = bad_store(tmp_path, kind)
    proc = subprocess.run(wildtrace(tmp_path / "outputs", f"mlflow.tracking_uri={uri}", "mlflow.required=false"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "SQLAlchemy" not in proc.stderr, proc.stderr
    mentions = [line for line in proc.stderr.splitlines() if "mlflow" in line.lower()]
    assert len(mentions) == 1 and str(named) in mentions[0] and "unlogged" in mentions[0], proc.stderr
    out = run_dir(proc.stdout)
    assert (out / "scores.json").exists()
    marker = read_marker(out)
    assert marker["status"] == "not_logged" and marker["run_id"] is None and str(named) in marker["error"]
    assert "mlflow: NOT logged" in proc.stdout


def test_the_papers_scripts_refuse_such_a_store_the_same_way(tmp_path):
    from test_paper_cli import config_json, release, responder, script

    data, corpus = release(tmp_path / "release")
    work = tmp_path / "paper"
    (work / "outputs" / "mlflow.db").mkdir(parents=True)  # the default store of a run in ``work``
    with LoopbackServer(responder) as server:
        config = tmp_path / "config.json"
        config.write_text(json.dumps(config_json(server.url)))
        proc = script("eval", work, "--config", str(config), "--data", str(data), "--corpus", str(corpus),
                      "--out", str(work / "responses.json"))
        assert server.calls == []
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and str(work / "outputs" / "mlflow.db") in errors[0], proc.stderr


@pytest.mark.parametrize("uri, path", [
    ("sqlite:////abs/dir/mlflow.db", Path("/abs/dir/mlflow.db")),
    ("sqlite:////abs/dir/mlflow.db?timeout=20", Path("/abs/dir/mlflow.db")),
    ("sqlite:///rel/mlflow.db", Path.cwd() / "rel/mlflow.db"),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("http://127.0.0.1:5000", None),
    ("postgresql://u@localhost/mlflow", None),
])
def test_which_uris_name_a_local_store(uri, path):
    assert store.sqlite_path(uri) == path


# ------------------------------------------------------------------ upload of a run killed by SIGKILL


class Held:
    """Answers nothing until released: the run is still going when it is killed."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def responder(self, call: Call) -> Reply:
        self.release.wait(timeout=120)
        return Answers().responder(call)


def test_upload_of_a_run_killed_early_says_the_resume_finishes_it(tmp_path):
    held = Held()
    env = {**os.environ, TEST_KEY_ENV: "sk-test-killed"}
    with LoopbackServer(held.responder) as server:
        cmd = served_run(tmp_path, server.url)
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs = tmp_path / "outputs" / "runs"

        def running_marker() -> Path | None:
            for marker in runs.glob("*/*/mlflow.json"):
                if read_marker(marker.parent).get("run_id"):
                    return marker.parent
            assert first.poll() is None, first.communicate()
            return None

        killed = wait_for(running_marker, what="the MLflow run's id in mlflow.json")
        run_id = read_marker(killed)["run_id"]
        first.send_signal(signal.SIGKILL)  # the run's process only: its logging process sees the pipe close
        first.communicate()
        marker = wait_for(lambda: (m := read_marker(killed)).get("status") == "not_logged" and m,
                          what="the logging process marking the run not_logged")
        assert marker["run_id"] == run_id
        assert not (killed / "responses.json").exists()

        up = subprocess.run([sys.executable, "-m", "wildtrace.upload", str(killed)], capture_output=True, text=True,
                            timeout=600)
        assert up.returncode == 2, up.stdout + up.stderr
        said = up.stdout + up.stderr
        assert "not a wildtrace run directory" not in said and "Traceback" not in said
        assert "killed" in said and run_id in said and "rerun the same command" in said
        assert "python -m wildtrace " in said and "dataset.tasks=" in said  # the command itself, from .hydra/

        held.release.set()
        resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert HEADLINE_RUN.search(resumed.stdout)
    assert read_marker(run_dir(resumed.stdout))["status"] == "logged"
