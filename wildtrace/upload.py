"""``python -m wildtrace.upload RUN_DIR``: log a finished run directory to MLflow afterwards.

For runs whose logging failed (tracking server down, network gone) or that ran with
``mlflow.enabled=false``: the same params, metrics, artifacts, tables and traces as a run
logs at its end, because it is the same code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Log each RUN_DIR; 0 when all were logged, 2 otherwise (with the reason)."""
    parser = argparse.ArgumentParser(prog="wildtrace-upload", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--tracking-uri", help="default: the run's own mlflow.tracking_uri")
    parser.add_argument("--experiment", help="default: the run's own mlflow.experiment")
    parser.add_argument("--parent-run-id", help="log as a child of this run (default: the one recorded, if any)")
    args = parser.parse_args(argv)

    from wildtrace.runtime.outputs import write_json
    from wildtrace.tracking.mlflow_logger import MARKER, log_run_dir

    status = 0
    for run_dir in args.run_dirs:
        marker = run_dir / MARKER
        recorded = json.loads(marker.read_text()).get("parent_run_id") if marker.exists() else None
        parent = args.parent_run_id or recorded
        try:
            run_id = log_run_dir(run_dir, parent, args.tracking_uri, args.experiment)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next directory
            print(f"wildtrace-upload: {run_dir}: not logged: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 2
            continue
        write_json(marker, {"status": "logged", "run_id": run_id, "parent_run_id": parent})
        print(f"{run_dir}: logged as MLflow run {run_id}")
    return status


if __name__ == "__main__":
    sys.exit(main())
