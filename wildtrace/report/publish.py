"""The report logged to MLflow as a run of its own, in an experiment of its own (``<experiment>-reports``)
and tagged, so nobody takes it for a benchmark run and the benchmark runs' tables and charts hold
only benchmark runs."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from wildtrace.report.render import tables
from wildtrace.report.assemble import Report

#: The tag that tells a report run from a benchmark run (the report itself skips such runs).
KIND_TAG = ("wildtrace.kind", "report")
#: The report runs' experiment: the benchmark runs' name with this after it.
REPORTS_SUFFIX = "-reports"
#: Digits kept in the report run's metrics: for reading in MLflow's UI (judge_agreement.json and
#: noise.json keep full precision).
METRIC_DIGITS = 4


def _metric_key(*parts: str) -> str:
    """A metric key MLflow accepts from parts joined by "/" (a part's characters outside its set become "_")."""
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. ]", "_", str(p)) for p in parts)


def report_metrics(report: Report) -> dict[str, float]:
    """The report run's metrics, keyed by what they measure, never by a row's label: the inter-judge
    alpha and each judge against itself (``intra_rater/<judge>/<key>``). Per-row figures (the noise
    split, the leaderboard) are the run's tables."""
    out: dict[str, float] = {}
    alpha = report.agreement.get("krippendorff_alpha_interval")
    if alpha is not None:
        out["inter_judge/krippendorff_alpha_interval"] = alpha
    for judge, row in report.agreement.get("intra_rater", {}).items():
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[_metric_key("intra_rater", judge, key)] = value
    return {k: round(float(v), METRIC_DIGITS) for k, v in out.items()}


def log_report(report: Report, out_dir: Path, tracking_uri: str, experiment: str) -> str:
    """One MLflow run in ``<experiment>-reports`` (``experiment``: the benchmark runs'): each table via
    log_table, the files (plots, page, CSVs) as artifacts; its run id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    name = experiment + REPORTS_SUFFIX
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found else client.create_experiment(name)
    run = client.create_run(experiment_id, run_name=f"report · {len(report.leaderboard)} rows · {out_dir.name}",
                            tags={KIND_TAG[0]: KIND_TAG[1], "wildtrace.report_dir": str(out_dir)})
    run_id = run.info.run_id
    try:
        for name, frame in tables(report).items():
            if len(frame):
                # log_table wants JSON-able cells: NaN → None.
                client.log_table(run_id, frame.astype(object).where(pd.notna(frame), None), f"tables/{name}.json")
        client.log_artifacts(run_id, str(out_dir), artifact_path="report")
        from mlflow.entities import Metric

        metrics = [Metric(k, v, 0, 0) for k, v in report_metrics(report).items()]
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])
        client.log_param(run_id, "runs_read", str(report.n_runs_read))
        b = report.boot
        client.log_param(run_id, "bootstrap", f"{b.resamples} resamples, seed {b.seed}, level {b.level}, "
                                              f"small n {b.small_n}" + ", by document" * b.by_document)
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    return run_id
