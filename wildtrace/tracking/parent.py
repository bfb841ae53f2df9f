"""A sweep's parent run: its children as an MLflow table, and its closing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wildtrace.tracking.store import replace_table

if TYPE_CHECKING:  # imported where a table is made: the run's process reads a sweep's parent without pandas
    import pandas as pd

CHILD_COLUMNS = ("overall", "scored", "n_scored", "n_total")
CHILDREN_TABLE = "children.json"


def children_frame(client: Any, parent_run_id: str) -> pd.DataFrame:
    """A row per child run (logged or still running): id, name, status, overrides, headline."""
    import pandas as pd

    parent = client.get_run(parent_run_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                                  max_results=5000)
    rows = [{"run_id": c.info.run_id, "run_name": c.info.run_name, "status": c.info.status,
             "overrides": c.data.tags.get("hydra.overrides", ""),
             **{k: c.data.metrics.get(k) for k in CHILD_COLUMNS}} for c in children]
    columns = ["run_id", "run_name", "status", "overrides", *CHILD_COLUMNS]
    return pd.DataFrame(rows, columns=columns).sort_values("overrides", kind="stable").reset_index(drop=True)


def refresh_parent(client: Any, parent_run_id: str, close: str | None = None) -> pd.DataFrame:
    """Rebuild the parent's children table from the store; ``close``: terminate it with that status."""
    frame = children_frame(client, parent_run_id)
    replace_table(client, parent_run_id, frame, CHILDREN_TABLE)
    if close:
        client.set_terminated(parent_run_id, close)
    return frame
