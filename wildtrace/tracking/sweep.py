"""Multirun: one parent MLflow run per sweep, a child per job, the children's table on the parent.

The parent is created in the launching process (``on_multirun_start``) and its id is left in
the sweep directory, where every job — in-process, joblib worker or submitit process — finds
it. Each child refreshes the parent's table and status when it has logged itself, so a sweep
whose last job fails (Hydra then skips ``on_multirun_end``) still leaves a closed parent with
the children that did finish.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

PARENT_FILE = "mlflow_parent.json"
CHILD_COLUMNS = ("overall", "scored", "n_scored", "n_total")


def parent_file(sweep_dir: str | Path) -> Path:
    """Where a sweep's parent run id is kept."""
    return Path(sweep_dir) / PARENT_FILE


def read_parent(sweep_dir: str | Path) -> str | None:
    """The sweep's parent run id, if the callback made one."""
    path = parent_file(sweep_dir)
    return json.loads(path.read_text())["run_id"] if path.exists() else None


def refresh_parent(client: Any, parent_run_id: str) -> None:
    """Rebuild the parent's children table from the store and mark it finished."""
    parent = client.get_run(parent_run_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                                  max_results=5000)
    columns = ["run_id", "run_name", "status", "overrides", *CHILD_COLUMNS]
    rows = [[c.info.run_id, c.info.run_name, c.info.status, c.data.tags.get("hydra.overrides", ""),
             *[c.data.metrics.get(k) for k in CHILD_COLUMNS]] for c in children]
    rows.sort(key=lambda r: r[3])
    client.log_dict(parent_run_id, {"columns": columns, "data": rows}, "children.json")
    client.set_terminated(parent_run_id, "FINISHED")


class MlflowSweepCallback(Callback):
    """Hydra callback: a parent run around a multirun. Never raises (Hydra would only warn)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the parent run and leave its id in the sweep directory."""
        HydraConfig.instance().set_config(config)  # callbacks run before Hydra sets it
        if not config.mlflow.enabled:
            return
        try:
            from mlflow.tracking import MlflowClient

            from wildtrace.tracking.mlflow_logger import default_artifact_location

            uri = config.mlflow.tracking_uri
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(config.mlflow.experiment)
            experiment_id = found.experiment_id if found else client.create_experiment(
                config.mlflow.experiment,
                artifact_location=default_artifact_location(uri, config.mlflow.artifact_location, config.root))
            overrides = " ".join(HydraConfig.get().overrides.task)
            run = client.create_run(experiment_id, run_name=f"sweep · {overrides}"[:250],
                                    tags={"wildtrace.sweep": "parent", "hydra.overrides": overrides})
            sweep_dir = Path(HydraConfig.get().sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            parent_file(sweep_dir).write_text(json.dumps({"run_id": run.info.run_id, "tracking_uri": uri}))
        except Exception as exc:  # noqa: BLE001 - a sweep must run even when MLflow is down
            print(f"wildtrace: MLflow: no parent run for this sweep ({type(exc).__name__}: {exc})", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Final refresh of the parent's table and status."""
        HydraConfig.instance().set_config(config)
        parent = read_parent(HydraConfig.get().sweep.dir) if config.mlflow.enabled else None
        if not parent:
            return
        try:
            from mlflow.tracking import MlflowClient

            refresh_parent(MlflowClient(tracking_uri=config.mlflow.tracking_uri), parent)
        except Exception as exc:  # noqa: BLE001
            print(f"wildtrace: MLflow: could not close the sweep's parent run ({exc})", file=sys.stderr)
