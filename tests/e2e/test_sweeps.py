"""Multirun sweeps (basic, joblib, submitit_local), ablations and replicates, in MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from wildtrace.tracking.rundir import SHORT
from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat


pytestmark = pytest.mark.slow


def env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}


def sweep(tmp: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "-m", f"root={tmp / 'outputs'}", "dataset.limit=2",
                           "progress=false", *overrides], env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def parent_and_children(uri: str):
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("wildtrace")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("wildtrace.sweep") == "parent"]
    assert len(parents) == 1
    (parent,) = parents
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return client, parent, children


def check_sweep(uri: str, key: str, values: set[str]) -> None:
    client, parent, children = parent_and_children(uri)
    assert {c.data.params[key] for c in children} == values
    assert all(c.info.status == "FINISHED" for c in children) and parent.info.status == "FINISHED"
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "children.json")).read_text())
    assert len(table["data"]) == len(values)
    overall = table["columns"].index("overall_pct")
    assert {row[overall] for row in table["data"]} == {c.data.metrics["overall_pct"] for c in children}
    # Each child says its swept value; the parent holds each point's score and its verdict against the first.
    assert parent.data.tags["wildtrace.sweep.keys"] == key
    assert {c.data.tags[f"sweep.{key}"] for c in children} == values
    named = SHORT.get(key, key.rsplit(".", 1)[-1] + "={}")  # t=0.1; any other key: temperature=0.1
    assert all(c.info.run_name.split(" ")[0] == named.format(c.data.tags[f"sweep.{key}"]) for c in children)
    parent = client.get_run(parent.info.run_id)
    for c in children:
        assert parent.data.metrics[f"{key}/{c.data.tags[f'sweep.{key}']}/overall_pct"] == c.data.metrics["overall_pct"]
    verdicts = {k: v for k, v in parent.data.tags.items() if k.startswith("verdict/")}
    assert len(verdicts) == len(values) - 1 and all("paired t over 2 tasks" in v for v in verdicts.values())


def test_basic_launcher_sweep_gives_parent_and_children(tmp_path):
    sweep(tmp_path, "decoding.temperature=0.0,0.3")
    check_sweep(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}", "decoding.temperature", {"0.0", "0.3"})


def test_joblib_launcher_sweep(tmp_path):
    sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "decoding.max_tokens=8192,32768")
    check_sweep(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}", "decoding.max_tokens", {"8192", "32768"})


def test_submitit_local_sweep(tmp_path):
    sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
          "judge_panel.temperature=0.0,0.1", timeout=600)
    check_sweep(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}", "judge_panel.temperature", {"0.0", "0.1"})


def judge_responder(call: Call) -> Reply:
    if call.route == "test-model":
        return chat(f"The seal was worn (answer {call.seen}).")
    return chat(json.dumps({"total": {"judge-a": 40, "judge-b": 60, "judge-c": 80}[call.route]}))


def test_ablation_sends_nothing_and_replicates_are_tagged(tmp_path, test_key):
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"Why? [q{i}]", "doc.txt") for i in range(3)],
                                  {"doc.txt": "The seal was worn. " * 30})
    with LoopbackServer(judge_responder) as server:
        panel = {k: openai_judge(server.url, f"judge-{k}") for k in "abc"}
        base = ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                "mlflow.enabled=true"]
        full = tracked_run(settings(tmp_path, base, judges=panel))
        sent = len(server.calls)
        alone = tracked_run(settings(tmp_path, base, judges={"b": panel["b"]}))
        without = tracked_run(settings(tmp_path, base, judges={"a": panel["a"], "c": panel["c"]}))
        assert len(server.calls) == sent  # an ablation of a panel already run sends no request
        rerun = tracked_run(settings(tmp_path, [*base, "judge_panel.replicate=1"], judges=panel))
        assert [c.route for c in server.calls[sent:]].count("test-model") == 0  # only judge calls
        assert len(server.calls) - sent == 9
    assert full.summary["overall"] == pytest.approx(60.0)
    assert alone.summary["overall"] == pytest.approx(60.0) and without.summary["overall"] == pytest.approx(60.0)
    assert rerun.stats["requests"]["model"] == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    assert sorted(r.data.tags["replicate.judge_panel"] for r in runs) == ["0", "0", "0", "1"]


def test_many_tasks_lose_no_trace(tmp_path):
    """A run of 1100 tasks keeps every trace (MLflow's own tracer holds 1000 and would drop the rest)."""
    n = 1100
    tasks, corpus = write_release(tmp_path, [make_task(f"t{i:04d}", f"What failed at step {i}?", "doc.txt")
                                             for i in range(n)], {"doc.txt": "The seal was worn at step one. " * 5})
    result = tracked_run(settings(tmp_path, [f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                                             "mlflow.enabled=true", "mlflow.log_documents=false"]))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    traces = client.search_traces(locations=[mlrun.info.experiment_id], run_id=mlrun.info.run_id, max_results=5000,
                                  include_spans=False)
    assert len(traces) == n == result.summary["n_total"]


@pytest.mark.parametrize(("limits", "logged"), [
    ("2,0", ["2"]),  # the last job fails: Hydra skips on_multirun_end
    ("0,2", []),  # the first job fails: its SystemExit ends the sweep before the second job
    ("0,0", []),  # every job fails
], ids=["last-fails", "first-fails", "all-fail"])
def test_a_failing_job_never_leaves_a_running_parent(tmp_path, limits, logged):
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "-m", f"root={tmp_path / 'outputs'}", "progress=false",
                           f"dataset.limit={limits}"], env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "dataset.limit must be at least 1" in proc.stderr
    _client, parent, children = parent_and_children(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    assert parent.info.status == "FAILED"  # closed by the exit hook, not left RUNNING
    assert [c.data.params["dataset.limit"] for c in children] == logged
    assert all(c.info.status == "FINISHED" for c in children)
    assert f"mlflow parent run: {parent.info.run_id}" in proc.stdout
    assert "failed" in proc.stdout.split("multirun:")[1]  # the summary names the job that failed


def test_multirun_ends_with_a_summary_of_its_jobs(tmp_path):
    proc = sweep(tmp_path, "decoding.temperature=0.0,0.3")
    _client, parent, children = parent_and_children(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    summary = proc.stdout.split("multirun:")[1]
    assert " 2 jobs" in summary.splitlines()[0] and f"mlflow parent run: {parent.info.run_id}" in summary
    for child in children:
        line = next(x for x in summary.splitlines() if child.info.run_id in x)
        assert f"{child.data.metrics['overall_pct']:.2f}%" in line and child.data.tags["hydra.overrides"] in line
    assert {"path": "children.json", "type": "table"} in json.loads(parent.data.tags["mlflow.loggedArtifacts"])
