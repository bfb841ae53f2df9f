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

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # two processes, not a job runner too
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "server-artifacts")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as reply:
                if reply.status == 200:
                    break
        except OSError:
            time.sleep(0.25)
        assert proc.poll() is None, proc.stderr.read().decode()
    else:
        pytest.fail("mlflow server did not answer /health within 60 s")
    yield url, tmp_path
    os.killpg(proc.pid, signal.SIGTERM)  # its own process group, started above: its own PID
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


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
    assert child.data.metrics["overall"] == pytest.approx(scores["overall"])
    assert {"scores.json", "tables"} <= {a.path for a in client.list_artifacts(child.info.run_id)}
    traces = client.search_traces(locations=[experiment.experiment_id], run_id=child.info.run_id)
    assert len(traces) == 2
    assert not (tmp / "outputs" / "mlartifacts").exists()  # the server keeps the artifacts
