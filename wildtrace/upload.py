"""``python -m wildtrace.upload RUN_DIR``: log a run directory to MLflow afterwards.

For runs whose logging failed (tracking server down, network gone), that were stopped, or
that ran with ``mlflow.enabled=false``: the same params, metrics, artifacts, tables and
traces as a run logs at its end, because it is the same code. A directory already logged
is left alone unless ``--force`` (which logs a new run); one whose logging was cut off
(``mlflow.json`` says running / partial / not_logged) is completed in the SAME MLflow run,
without repeating the traces already stored.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wildtrace.exitcodes import ArgumentParser, ExitCode, error


def plan(marker: dict, tracking_uri: str | None, force: bool) -> tuple[str, str | None]:
    """("skip" | "resume" | "new", run id to resume) for a run directory's mlflow.json.

    A marker naming another store than ``tracking_uri`` counts as absent there.
    """
    same_store = tracking_uri is None or marker.get("tracking_uri") in (None, tracking_uri)
    if force or not marker.get("run_id") or not same_store:
        return "new", None
    if marker.get("status") == "logged":
        return "skip", marker["run_id"]
    return "resume", marker["run_id"]


def upload_one(run_dir: Path, tracking_uri: str | None, experiment: str | None, parent: str | None,
               force: bool) -> int:
    """Log one directory; 0 when logged (or already), 2 when not (with the reason)."""
    from wildtrace.tracking.mlflow_logger import log_run_dir, read_marker, reason_of, read_run_dir

    marker = read_marker(run_dir)
    try:
        uri = tracking_uri or read_run_dir(run_dir).mlflow["tracking_uri"]
        action, run_id = plan(marker, uri, force)
        if action == "skip":
            print(f"{run_dir}: already logged as MLflow run {run_id}; nothing to do (--force logs it again)")
            return 0
        run_id = log_run_dir(run_dir, parent or marker.get("parent_run_id"), uri, experiment,
                             resume_run_id=run_id if action == "resume" else None)
    except Exception as exc:  # noqa: BLE001 - report and go on with the next directory
        error("wildtrace-upload", f"{run_dir}: not logged: {reason_of(exc)}")
        return ExitCode.BAD_INPUT
    print(f"{run_dir}: {'completed' if action == 'resume' else 'logged as'} MLflow run {run_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Log each RUN_DIR; 0 when all were logged, 2 otherwise (with the reason)."""
    parser = ArgumentParser(prog="wildtrace-upload", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--tracking-uri", help="default: the run's own mlflow.tracking_uri")
    parser.add_argument("--experiment", help="default: the run's own mlflow.experiment")
    parser.add_argument("--parent-run-id", help="log as a child of this run (default: the one recorded, if any)")
    parser.add_argument("--force", action="store_true", help="log a new run even when the directory is logged already")
    args = parser.parse_args(argv)
    results = [upload_one(d, args.tracking_uri, args.experiment, args.parent_run_id, args.force) for d in args.run_dirs]
    return max(results, default=0)


if __name__ == "__main__":
    sys.exit(main())
