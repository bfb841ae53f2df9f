"""The MLflow store, reached one way by the logger, the observer and the sweep callback."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

# HTTP retries default to 7 with backoff, minutes against a dead server: a run should say
# "not logged" and move on. (Traces do not go through MLflow's tracer: see traces.py.)
for _name, _value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
                      ("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")):
    os.environ.setdefault(_name, _value)

# Alembic's "Creating initial MLflow database tables..." on a new store is noise after a run.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
log = logging.getLogger("wildtrace.tracking")

#: The tag MLflow's UI reads to render a JSON artifact as a table.
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"


def client_for(tracking_uri: str) -> Any:
    """An explicit client: no global state, so jobs in one process never cross stores."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def default_artifact_location(tracking_uri: str, configured: str | None, root: str) -> str | None:
    """Artifacts beside a local store; a tracking server decides for itself unless told."""
    if configured:
        return configured
    if tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri:
        return f"file://{Path(root).resolve()}/mlartifacts"
    return None


def get_or_create_experiment(client: Any, name: str, artifact_location: str | None) -> str:
    """The experiment's id, creating it on first use (a parallel job may create it first)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException:  # another job won the race: use theirs
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def replace_table(client: Any, run_id: str, frame: Any, artifact_file: str) -> None:
    """Log a DataFrame as an MLflow table, replacing (not appending to) one logged before.

    ``MlflowClient.log_table`` appends to an existing file: a refreshed sweep table or an
    upload that completes a run would repeat rows.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(artifact_file).name
        frame.to_json(path, orient="split", index=False, date_format="iso", force_ascii=False)
        folder = str(Path(artifact_file).parent)
        client.log_artifact(run_id, str(path), artifact_path=None if folder == "." else folder)
    tags = client.get_run(run_id).data.tags
    listed = json.loads(tags.get(LOGGED_ARTIFACTS_TAG, "[]"))
    entry = {"path": artifact_file, "type": "table"}
    if entry not in listed:
        client.set_tag(run_id, LOGGED_ARTIFACTS_TAG, json.dumps([*listed, entry]))


def terminate_quietly(client: Any, run_id: str, status: str) -> bool:
    """Close a run without raising (its server may be the very thing that failed)."""
    try:
        client.set_terminated(run_id, status)
    except Exception as exc:  # noqa: BLE001 - best effort: the caller is already handling a failure
        log.warning("MLflow: could not mark run %s %s (%s)", run_id, status, type(exc).__name__)
        return False
    return True
