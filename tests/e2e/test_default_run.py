"""The embedded default: `python -m wildtrace` offline, no key, seconds — and its MLflow run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wildtrace.config import package_data
from wildtrace.core.caps import count_ideographs
from wildtrace.runtime.store.dataset import load_dataset

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def clean_env() -> dict:
    """The user's environment minus anything that would point MLflow or keys elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    return env


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("default")
    proc = subprocess.run([sys.executable, "-m", "wildtrace"], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=300)
    return cwd, proc


def test_default_run_prints_the_overall(default_run):
    _cwd, proc = default_run
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^overall \(All view\): \d+\.\d\d%   scored: \d+\.\d\d% \(n=10\)$", proc.stdout, re.M)
    assert "model=extractive panel=offline dataset=sample (10 tasks" in proc.stdout


def test_default_run_writes_its_files_under_outputs(default_run):
    cwd, proc = default_run
    run_dir = Path(re.search(r"^run dir: (.+)$", proc.stdout, re.M).group(1))
    assert run_dir.is_relative_to(cwd / "outputs" / "runs")
    scores = json.loads((run_dir / "scores.json").read_text())
    responses = json.loads((run_dir / "responses.json").read_text())
    assert scores["n_total"] == len(responses) == 10
    assert scores["n_scored"] == 10 and 0 < scores["overall"] < 100
    assert f"{scores['overall']:.2f}%" in proc.stdout
    assert all(r["status"] == "answered" and r["response"] for r in responses)
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert (cwd / "outputs" / "mlflow.db").exists()


def test_default_run_is_logged_to_mlflow(default_run):
    from mlflow.tracking import MlflowClient

    cwd, proc = default_run
    run_dir = Path(re.search(r"^run dir: (.+)$", proc.stdout, re.M).group(1))
    scores = json.loads((run_dir / "scores.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("wildtrace")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.metrics["overall_pct"] == pytest.approx(scores["overall"], abs=0.005)
    assert run.data.metrics["scored_pct"] == pytest.approx(scores["scored"], abs=0.005)
    assert run.data.params["model.route"] == "extractive-bm25"
    assert run.data.params["model.caps.en"] == "2850000"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"scores.json", "responses.json", "judgments.json", "hydra", "tables"} <= artifacts
    assert "documents" not in artifacts  # stored once per store, by sha256, and referenced
    assert "wildtrace.documents_run_id" in run.data.tags
    hydra_files = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "hydra")}
    assert {"config.yaml", "overrides.yaml"} <= hydra_files
    assert Path(experiment.artifact_location.removeprefix("file://")).is_relative_to(cwd / "outputs")


def test_rerun_is_served_from_the_cache(default_run):
    cwd, _ = default_run
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "mlflow.enabled=false"], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(re.search(r"^run dir: (.+)$", proc.stdout, re.M).group(1))
    stats = json.loads((run_dir / "run_stats.json").read_text())
    assert stats["requests"] == {"model": 0, "lexical": 0}
    assert stats["cache_hits"] == 20


def test_bad_input_exits_2_with_one_clear_line(tmp_path):
    bad = tmp_path / "tasks.json"
    bad.write_text('[{"question_id": "q1"}]', encoding="utf-8")
    (tmp_path / "corpus").mkdir()
    proc = subprocess.run([sys.executable, "-m", "wildtrace", f"dataset.tasks={bad}",
                           f"dataset.corpus={tmp_path / 'corpus'}", f"root={tmp_path / 'out'}"],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"wildtrace: error: {bad}: record #0 (question_id='q1'): missing field" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "runs").exists() or not list((tmp_path / "out" / "runs").rglob("scores.json"))


def test_missing_key_stops_before_any_request(tmp_path):
    env = {k: v for k, v in clean_env().items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "model=gpt-4.1", f"root={tmp_path}"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "model.api_key_env: environment variable OPENAI_API_KEY is not set" in proc.stderr


def test_sample_dataset_shape():
    ds = load_dataset(package_data("sample/tasks.json"), package_data("sample/corpus"))
    assert 8 <= len(ds.tasks) <= 12
    assert len({t.meta["paradigm"] for t in ds.tasks}) >= 3
    sizes = sorted(d.path.stat().st_size for d in ds.documents.values())
    assert sizes[0] < 10_000 and sizes[-1] > 80_000
    chinese = [d for d in ds.documents.values() if count_ideographs(d.path.read_text(encoding="utf-8")) > 20]
    assert chinese and len(chinese) < len(ds.documents)
    assert all(t.max_points == 100 for t in ds.tasks)


def test_sample_generator_reproduces_the_corpus():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_sample_corpus.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
