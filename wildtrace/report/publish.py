"""The report logged to MLflow as a run of its own, tagged so nobody takes it for a benchmark run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from wildtrace.report.render import tables
from wildtrace.report.tables import Report

#: The tag that tells a report run from a benchmark run (the report itself skips such runs).
KIND_TAG = ("wildtrace.kind", "report")


def log_report(report: Report, out_dir: Path, tracking_uri: str, experiment: str) -> str:
    """One MLflow run: each table via log_table, the files (plots, page, CSVs) as artifacts; its run id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(experiment_id, run_name=f"report · {len(report.leaderboard)} rows · {out_dir.name}",
                            tags={KIND_TAG[0]: KIND_TAG[1], "wildtrace.report_dir": str(out_dir)})
    run_id = run.info.run_id
    try:
        for name, frame in tables(report).items():
            if len(frame):
                # log_table wants JSON-able cells: NaN → None.
                client.log_table(run_id, frame.astype(object).where(pd.notna(frame), None), f"tables/{name}.json")
        client.log_artifacts(run_id, str(out_dir), artifact_path="report")
        client.log_param(run_id, "runs_read", str(report.n_runs_read))
        client.log_param(run_id, "bootstrap", f"{report.boot.resamples} resamples, seed {report.boot.seed}, "
                                              f"level {report.boot.level}")
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    return run_id
