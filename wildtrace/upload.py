"""``python -m wildtrace.upload RUN_DIR``: log a run directory to MLflow afterwards.

For runs whose logging failed (tracking server down, network gone), that were stopped, or
that ran with ``mlflow.enabled=false``: the same params, metrics, artifacts, tables and
traces as a run logs at its end, because it is the same code. A directory already logged
is left alone unless ``--force`` (which logs a new run); one whose logging was cut off
(``mlflow.json`` says running / partial / not_logged) is completed in the SAME MLflow run,
without repeating the traces already stored.

A run killed before it wrote its files (SIGKILL, out of memory: the folder holds only its
log, ``.hydra/`` and ``mlflow.json``) has nothing to upload: its outcomes are in the cache,
and the resume (the same command again) finishes it, which this says, with the command.

Exit status: 0 when every directory is logged (or was already), 2 when one is not a run
directory or was killed before its files, 3 when MLflow could not log one (the reason said).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from wildtrace.core.records import LogStatus
from wildtrace.exitcodes import ArgumentParser, ExitCode, error

EXIT_OK, EXIT_NOT_A_RUN, EXIT_NOT_LOGGED = ExitCode.OK, ExitCode.BAD_INPUT, ExitCode.NOT_LOGGED


def plan(marker: dict, tracking_uri: str | None, force: bool) -> tuple[str, str | None]:
    """("skip" | "resume" | "new", run id to resume) for a run directory's mlflow.json.

    A marker naming another store than ``tracking_uri`` counts as absent there.
    """
    same_store = tracking_uri is None or marker.get("tracking_uri") in (None, tracking_uri)
    if force or not marker.get("run_id") or not same_store:
        return "new", None
    if marker.get("status") == LogStatus.LOGGED:
        return "skip", marker["run_id"]
    return "resume", marker["run_id"]


def killed_before_files(run_dir: Path) -> bool:
    """A job's folder (``.hydra/`` or ``mlflow.json``) without ``config.json``, the last run file written."""
    job = (run_dir / ".hydra").is_dir() or (run_dir / "mlflow.json").is_file()
    return job and not (run_dir / "config.json").exists()


def resume_text(run_dir: Path, marker: dict) -> str:
    """What finishes a run killed before its files: the resume, not upload (with the command and the folder it
    ran in when known: ``command.json``, else ``.hydra/overrides.yaml``)."""
    from wildtrace.tracking.rundir import read_command

    held = ", ".join(sorted(p.name for p in run_dir.iterdir())) if run_dir.is_dir() else ""
    lines = [f"{run_dir}: this run ended before it wrote its run files (killed, e.g. by SIGKILL, "
             f"or stopped by an error before its first request; it holds {held}): upload has nothing to log."]
    if marker.get("run_id"):
        lines.append(f"  Its MLflow run {marker['run_id']} keeps the traces it stored.")
    lines.append("  The resume finishes it: rerun the same command; every outcome it received is in the cache, so "
                 "nothing is paid twice, and it logs a new MLflow run:")
    named = read_command(run_dir)
    command = named.get("command") or _hydra_command(run_dir)
    if command:
        lines.append(f"  cd {shlex.quote(named['cwd'])} && {command}" if named.get("cwd") else f"  {command}")
    return "\n".join(lines)


def _hydra_command(run_dir: Path) -> str | None:
    """The rerun from Hydra's ``.hydra/overrides.yaml`` (folders from before ``command.json``), or None."""
    from omegaconf import OmegaConf

    from wildtrace.runtime.run.execute import resume_command

    try:
        return resume_command([str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")])
    except (OSError, ValueError, TypeError):
        return None


def upload_one(run_dir: Path, tracking_uri: str | None, experiment: str | None, parent: str | None,
               force: bool) -> int:
    """Log one directory; 0 when logged (or already), 2 when it is no run directory, 3 when MLflow failed."""
    from wildtrace.tracking.runs.mlflow_logger import log_run_dir, read_marker, reason_of, read_run_dir

    marker = read_marker(run_dir)
    if killed_before_files(run_dir):
        error("wildtrace-upload", resume_text(run_dir, marker))
        return EXIT_NOT_A_RUN
    try:
        own_uri = read_run_dir(run_dir).mlflow["tracking_uri"]  # and whether it is a run directory at all
    except (OSError, ValueError, KeyError, TypeError) as exc:
        error("wildtrace-upload", f"{run_dir}: {exc}")
        return EXIT_NOT_A_RUN
    uri = tracking_uri or own_uri
    try:
        action, run_id = plan(marker, uri, force)
        if action == "skip":
            print(f"{run_dir}: already logged as MLflow run {run_id}; nothing to do (--force logs it again)")
            return EXIT_OK
        run_id = log_run_dir(run_dir, parent or marker.get("parent_run_id"), uri, experiment,
                             resume_run_id=run_id if action == "resume" else None)
    except Exception as exc:  # noqa: BLE001 - report and go on with the next directory
        error("wildtrace-upload", f"{run_dir}: not logged: {reason_of(exc)}")
        return EXIT_NOT_LOGGED
    print(f"{run_dir}: {'completed' if action == 'resume' else 'logged as'} MLflow run {run_id}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Log each RUN_DIR; the worst status of them (see the module's docstring), each with its reason."""
    parser = ArgumentParser(prog="wildtrace-upload", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--tracking-uri", help="default: the run's own mlflow.tracking_uri")
    parser.add_argument("--experiment", help="default: the run's own mlflow.experiment")
    parser.add_argument("--parent-run-id", help="log as a child of this run (default: the one recorded, if any)")
    parser.add_argument("--force", action="store_true", help="log a new run even when the directory is logged already")
    args = parser.parse_args(argv)
    results = [upload_one(d, args.tracking_uri, args.experiment, args.parent_run_id, args.force) for d in args.run_dirs]
    return max(results, default=EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
