"""Logging a finished run directory to MLflow.

Uses an explicit ``MlflowClient(tracking_uri=…)`` rather than ``mlflow.set_tracking_uri``,
which would export MLFLOW_TRACKING_URI into every later child process and test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from wildtrace.config import WildtraceConfig

MAX_PARAM_CHARS = 6000


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping → {"a.b.c": "value"}; the params of a run (config holds no secrets)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)[:MAX_PARAM_CHARS]
    return out


def run_name(cfg: WildtraceConfig) -> str:
    """model · panel · decoding, readable in the MLflow run list."""
    return f"{cfg.model.name} · {cfg.judge_panel.name} · t={cfg.decoding.temperature} r={cfg.decoding.replicate}"


def log_run(cfg: WildtraceConfig, out_dir: Path, summary: dict | None, stats: dict) -> str | None:
    """One MLflow run: params, overall/scored metrics, the run files as artifacts.

    Returns None on success or a one-line description of what failed; never raises, so
    MLflow trouble never costs the results already on disk.
    """
    try:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=cfg.mlflow.tracking_uri)
        experiment = client.get_experiment_by_name(cfg.mlflow.experiment)
        experiment_id = (experiment.experiment_id if experiment else
                         client.create_experiment(cfg.mlflow.experiment, artifact_location=cfg.mlflow.artifact_location))
        params = flatten({k: v for k, v in asdict(cfg).items() if k not in ("out_dir", "progress")})
        params["decoding.effective_max_tokens"] = str(stats["effective_max_tokens"])
        tags = {"wildtrace.version": stats["harness_version"], "wildtrace.prompts_sha256": stats["prompts_sha256"],
                "wildtrace.tasks_sha256": stats["tasks_sha256"], "wildtrace.run_dir": str(out_dir)}
        run = client.create_run(experiment_id, run_name=run_name(cfg), tags=tags)
        run_id = run.info.run_id
        metrics = {"wall_s": stats["wall_s"], "retries": stats["retries"], "cache_hits": stats["cache_hits"]}
        if summary:
            for key in ("overall", "scored", "n_total", "n_scored", "n_out_of_context", "n_failed", "n_unscored"):
                if summary.get(key) is not None:
                    metrics[key] = summary[key]
        client.log_batch(run_id, metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()],
                         params=[Param(k, v) for k, v in params.items()], tags=[RunTag(k, v) for k, v in tags.items()])
        for name in ("scores.json", "responses.json", "judgments.json", "run_stats.json"):
            if (out_dir / name).exists():
                client.log_artifact(run_id, str(out_dir / name))
        client.set_terminated(run_id, "FINISHED")
        return None
    except Exception as exc:  # noqa: BLE001 - logging must never cost results
        return f"{type(exc).__name__}: {exc}"
