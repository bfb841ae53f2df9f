"""A small multirun logged over HTTP to a real `mlflow server`, as teams run it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from test_tracking_observer import scripted_run, wait_for_traces
from wildtrace import upload
from wildtrace.core.events import RunEnd
from wildtrace.tracking.runs.mlflow_logger import read_marker
from wildtrace.tracking.runs.observer import MlflowObserver

pytestmark = [pytest.mark.slow, pytest.mark.mlflow]


#: A safety net, not a measure: a server's four workers or a child importing MLflow took over
#: 130 s to start on 2 cores shared with a dozen other processes.
SAFETY_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path: Path, port: int) -> subprocess.Popen:
    """`mlflow server` on 127.0.0.1:port over a SQLite store in tmp_path, once /health answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # two processes, not a job runner too
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "server-artifacts")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + SAFETY_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if reply.status == 200:
                    return proc
        except OSError:
            time.sleep(0.25)
        if proc.poll() is not None:
            pytest.fail(proc.stderr.read().decode())
    stop_server(proc)
    pytest.fail(f"mlflow server did not answer /health within {SAFETY_S:.0f} s")


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop a server this test started (its own process group, by its own PID)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    proc = start_server(tmp_path, port)
    yield f"http://127.0.0.1:{port}", tmp_path
    stop_server(proc)


def test_multirun_over_http(mlflow_server):
    url, tmp = mlflow_server
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "-m", f"root={tmp / 'outputs'}", "dataset.limit=2",
                           f"mlflow.tracking_uri={url}", "mlflow.experiment=team", "progress=false",
                           "decoding.temperature=0.0,0.3"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NOT logged" not in proc.stderr
    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("team")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("wildtrace.sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert {c.data.params["decoding.temperature"] for c in children} == {"0.0", "0.3"}
    child = children[0]
    run_dir = Path(child.data.tags["wildtrace.run_dir"])
    scores = json.loads((run_dir / "scores.json").read_text())
    assert child.data.metrics["overall_pct"] == pytest.approx(scores["overall"], abs=0.005)
    assert {"scores.json", "tables"} <= {a.path for a in client.list_artifacts(child.info.run_id)}
    traces = client.search_traces(locations=[experiment.experiment_id], run_id=child.info.run_id)
    assert len(traces) == 2
    assert not (tmp / "outputs" / "mlartifacts").exists()  # the server keeps the artifacts


def test_a_cached_rerun_over_http_lists_the_first_runs_traces(mlflow_server):
    """The rerun's tasks, every call served from the cache, are linked to the traces the first run stored."""
    url, tmp = mlflow_server
    first = scripted_run(tmp / "job", "one", cached=frozenset())
    rerun = scripted_run(tmp / "job", "two", cached=frozenset(f"q{i}" for i in range(4)))
    runs = []
    for s in (first, rerun):
        obs = MlflowObserver(url, "team")
        obs.run_started(s.start())
        runs.append(obs.run_finished(RunEnd(str(s.out_dir), "finished")))
    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("team").experiment_id
    listed = [{t.info.tags["question_id"]: t.info.trace_id
               for t in client.search_traces(locations=[experiment], run_id=run_id, include_spans=False)}
              for run_id in runs]
    assert sorted(listed[0]) == [f"q{i}" for i in range(4)] and listed[1] == listed[0]
    assert len(client.search_traces(locations=[experiment], include_spans=False)) == 4


def test_a_server_that_dies_mid_run_leaves_a_run_upload_completes(tmp_path):
    """Traces of 3 tasks stored, then the server is killed: the run says not logged, keeps its id,
    and upload against the restarted server completes THAT run with no trace twice."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    s = scripted_run(tmp_path / "job", n=5)
    proc = start_server(tmp_path, port)
    try:
        obs = MlflowObserver(url, "team")
        obs.run_started(s.start())
        assert obs.wait_started(SAFETY_S)  # the MLflow run is made off the event loop
        run_id = read_marker(s.out_dir)["run_id"]
        for done in s.dones[:3]:
            obs.task_done(done)
        assert len(wait_for_traces(MlflowClient(tracking_uri=url), run_id, 3)) == 3
        stop_server(proc, signal.SIGKILL)
        for done in s.dones[3:]:
            obs.task_done(done)
        started = time.monotonic()
        assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
        assert time.monotonic() - started < 120  # says so in bounded time, never hangs on the dead server
        marker = read_marker(s.out_dir)
        assert (marker["status"], marker["run_id"]) == ("not_logged", run_id)
        proc = start_server(tmp_path, port)
        assert upload.main([str(s.out_dir), "--tracking-uri", url]) == 0
        client = MlflowClient(tracking_uri=url)
        experiment = client.get_experiment_by_name("team")
        (mlrun,) = client.search_runs([experiment.experiment_id])
        assert mlrun.info.run_id == run_id and mlrun.info.status == "FINISHED"
        traces = client.search_traces(locations=[experiment.experiment_id], run_id=run_id, max_results=100)
        assert sorted(t.info.tags["question_id"] for t in traces) == [f"q{i}" for i in range(5)]
        for t in traces:  # each assessment once (none logged twice by the upload), the one judge's among them
            names = [a.name for a in t.info.assessments]
            assert len(names) == len(set(names)) and [n for n in names if n.startswith("judge/")] == ["judge/offline"]
        assert read_marker(s.out_dir)["status"] == "logged"
    finally:
        stop_server(proc)
