"""End to end: real offline runs logged to a real MLflow store, then `python -m wildtrace.report`
read back from MLflow — same numbers as the runs' metrics — and the page in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import settings, tracked_run

pytestmark = [pytest.mark.slow, pytest.mark.mlflow]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
RUNS = {
    "default": [],
    "default-rerun": [],  # fully cached: identical config and outcomes
    "panel": ["judge_panel=offline_panel"],
    "panel-hot": ["judge_panel=offline_panel", "decoding.temperature=0.7"],
    "panel-rep1": ["judge_panel=offline_panel", "judge_panel.replicate=1"],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report-e2e")
    for name, overrides in RUNS.items():
        cfg = settings(root, ["mlflow.enabled=true", *overrides])
        cfg.out_dir = str(root / "runs" / name)
        tracked_run(cfg)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("wildtrace")
    parent = client.create_run(experiment.experiment_id, tags={"wildtrace.sweep": "parent"})  # not a benchmark run
    client.set_terminated(parent.info.run_id, "FINISHED")
    return root


def report_cli(root: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, Path]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "wildtrace.report", f"root={root / 'outputs'}", *overrides],
                          capture_output=True, text=True, env=env, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr
    page = Path(proc.stdout.strip().splitlines()[-2 if "mlflow: run" in proc.stdout else -1].split("report: ")[1])
    return proc, page.parent


def metrics_of_runs(root: Path, experiment: str = "wildtrace") -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root / 'outputs' / 'mlflow.db'}")
    try:
        return mlflow.search_runs(experiment_names=[experiment])
    finally:
        mlflow.set_tracking_uri(None)


def test_report_from_mlflow_has_the_runs_numbers(store):
    proc, out = report_cli(store)
    board = pd.read_csv(out / "leaderboard.csv")
    runs = metrics_of_runs(store)
    bench = runs[runs["tags.wildtrace.kind"].isna() if "tags.wildtrace.kind" in runs else slice(None)]
    bench = bench[bench["tags.wildtrace.sweep"].isna()]
    assert len(bench) == 5
    assert len(board) == 3  # default (its rerun counted once), panel (two replicates), panel at t=0.7
    default = board[board["panel"] == "offline"].iloc[0]
    assert default["overall"] == pytest.approx(28.25, abs=0.051) and default["n_runs"] == 1  # 0.1 pp in the CSV
    panel = bench[(bench["params.judge_panel.name"] == "offline_panel")
                  & (bench["params.decoding.temperature"] == "0.1")]
    row = board[~board["model"].str.contains("t=") & (board["panel"] == "offline_panel")].iloc[0]
    assert row["n_runs"] == 2 and row["overall"] == pytest.approx(panel["metrics.overall_pct"].mean(), abs=0.05)
    hot = bench[bench["params.decoding.temperature"] == "0.7"]["metrics.overall_pct"].iloc[0]
    assert board[board["model"].str.contains("t=0.7")]["overall"].iloc[0] == pytest.approx(hot, abs=0.051)
    assert "| model | point | panel | judges | temperature | max_tokens |" in proc.stdout  # the baseline's settings
    sweeps = pd.read_csv(out / "sweeps.csv")
    assert set(sweeps["key"]) == {"decoding.temperature"}  # the other panel has other judges: no experiment


def test_report_is_its_own_tagged_run_and_is_never_read_back(store):
    report_cli(store)
    assert "tags.wildtrace.kind" not in metrics_of_runs(store)  # the benchmark runs' experiment holds no report
    runs = metrics_of_runs(store, "wildtrace-reports")
    reports = runs[runs.get("tags.wildtrace.kind") == "report"]
    assert len(reports) >= 1
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'outputs' / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(reports.iloc[0]["run_id"], "tables")}
    assert {"tables/leaderboard.json", "tables/judge_pairs.json"} <= artifacts
    _, out = report_cli(store)  # a second report reads the same five benchmark runs, not the first report
    assert "5 runs read, 1 identical duplicate counted once" in (out / "leaderboard.md").read_text()
    # its metric keys say what they measure, never a row's label (no model name, panel or setting in them)
    keys = set(client.get_run(reports.iloc[0]["run_id"]).data.metrics)
    assert client.get_run(reports.iloc[0]["run_id"]).data.params["bootstrap"] == \
        "2000 resamples, seed 0, level 0.95, small n t"  # how every interval of the report was drawn
    judges = "|".join(("strict", "balanced", "lenient"))
    assert "inter_judge/krippendorff_alpha_interval" in keys and any(k.startswith("intra_rater/") for k in keys)
    assert all(re.fullmatch(rf"inter_judge/krippendorff_alpha_interval|intra_rater/({judges})/[a-z0-9_]+", k)
               for k in keys), sorted(keys)


def test_filters_and_run_dirs(store):
    _, out = report_cli(store, 'report.filter="params.judge_panel.name = \'offline_panel\'"',
                        "mlflow.log_report=false")
    assert set(pd.read_csv(out / "leaderboard.csv")["panel"]) == {"offline_panel"}
    _, out = report_cli(store, f"report.run_dirs=[{store / 'runs' / 'panel*'}]", "mlflow.log_report=false")
    board = pd.read_csv(out / "leaderboard.csv")
    assert sorted(board["n_runs"]) == [1, 2]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's chromium)")
def test_page_renders_in_headless_chromium(store, tmp_path):
    _, out = report_cli(store, "mlflow.log_report=false")
    shot = tmp_path / "report.png"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=1400,4000", (out / "report.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (4000, 1400)
    ink = (pixels < 0.9).any(axis=2)  # anything not white: text, table rules, plots
    rows_with_ink = np.flatnonzero(ink.any(axis=1))
    assert rows_with_ink.max() > 2000  # the page runs far down: tables and plots, not an error line
    colour = (np.abs(pixels[..., 0] - pixels[..., 2]) > 0.3).sum()  # blue/orange/red plot marks
    assert colour > 2000
    shutil.copy(shot, Path(os.environ.get("WILDTRACE_SCREENSHOT_DIR", tmp_path)) / "report-screenshot.png")


def test_no_runs_says_so_and_exits_1(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "wildtrace.report", f"root={tmp_path / 'outputs'}"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1
    assert "no benchmark runs found" in proc.stderr
