"""Logging a run directory to MLflow: params, tags, metrics, artifacts, tables, dataset, traces.

Everything is read back from the run directory's files, so the end of a run (the observer)
and ``python -m wildtrace.upload RUN_DIR`` are one code path (``complete_run``), and MLflow
trouble can never cost results: the files are written first, logging comes after and may
be redone. Redoing it completes the same MLflow run (``mlflow.json`` keeps its id): tables
are replaced, documents are content-addressed, traces already stored are not sent again.

The clients are explicit (``MlflowClient(tracking_uri=…)`` and MLflow's trace client for the
same store): MLflow's global tracking URI is never set.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wildtrace.core.records import LogStatus, RunStatus
from wildtrace.files import write_json
from wildtrace.tracking import documents
from wildtrace.tracking.runs.parent import refresh_parent, swept_keys
from wildtrace.tracking.rundir import (RUN_FILES, RunDir, base_tags, judgment_table, metrics_of, params_of,
                                       read_run_dir, run_name, tags_of, task_table, trace_tags)
from wildtrace.tracking.store import (client_for, default_artifact_location, get_or_create_experiment,
                                      log, replace_table, terminate_quietly)
from wildtrace.tracking.traces import (TraceExporter, TraceTarget, assessments, log_feedback, task_dones_of,
                                      traced_tasks)

MARKER = "mlflow.json"
#: How long the end of a run waits for the trace thread before leaving the rest to upload.
TRACE_WAIT_S = 600.0
DATASET_ATTEMPTS = 3
@dataclass
class Target:
    """An MLflow run being logged, and where."""

    client: Any
    """MlflowClient bound to ``tracking_uri``."""
    tracking_uri: str
    """The store."""
    experiment_id: str
    """The run's experiment."""
    run_id: str
    """The run."""
    artifact_location: str | None
    """Where the experiment keeps artifacts (also used for the documents store)."""


def read_marker(run_dir: str | Path) -> dict:
    """mlflow.json of a run directory ({} when absent or unreadable)."""
    path = Path(run_dir) / MARKER
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def logged_status(rd: RunDir) -> LogStatus:
    """What mlflow.json says once a run is logged whole: partial for a partial run."""
    return LogStatus.PARTIAL if rd.status == RunStatus.PARTIAL else LogStatus.LOGGED


def write_marker(run_dir: str | Path, status: LogStatus, target: Target | None, parent_run_id: str | None,
                 error: str | None = None) -> None:
    """Record the run's MLflow state beside its files (never raises: the files matter more)."""
    data = {"status": status, "run_id": target.run_id if target else None, "parent_run_id": parent_run_id,
            "tracking_uri": target.tracking_uri if target else None,
            "experiment_id": target.experiment_id if target else None}
    if error:
        data["error"] = error
    try:
        write_json(Path(run_dir) / MARKER, data)
    except OSError as exc:
        log.warning("MLflow: could not write %s (%s)", Path(run_dir) / MARKER, exc)


def unique_name(client: Any, experiment_id: str, name: str) -> str:
    """``name``, or ``name #2``, ``#3``… when the experiment has it already."""
    taken = {r.info.run_name for r in client.search_runs(
        [experiment_id], f"attributes.run_name LIKE '{name.replace(chr(39), '')}%'", max_results=1000)}
    if name not in taken:
        return name
    n = 2
    while f"{name} #{n}" in taken:
        n += 1
    return f"{name} #{n}"


def open_target(tracking_uri: str, config: dict, experiment: str | None = None) -> Target:
    """Client and experiment for a run's config (the run itself not yet created)."""
    client = client_for(tracking_uri)
    location = default_artifact_location(tracking_uri, config["mlflow"].get("artifact_location"), config["root"])
    experiment_id = get_or_create_experiment(client, experiment or config["mlflow"]["experiment"], location)
    return Target(client, tracking_uri, experiment_id, "", location)


def start_ms(run_date: str | None) -> int | None:
    """An ISO date as MLflow's start time (ms), so the run's name and start time agree."""
    try:
        return int(datetime.datetime.fromisoformat(str(run_date)).timestamp() * 1000)
    except ValueError:
        return None


def create_run(target: Target, config: dict, stats: dict, out_dir: str, run_date: str | None,
               parent_run_id: str | None) -> Target:
    """A new MLflow run named uniquely, with the tags known before any file exists."""
    swept = swept_keys(target.client, parent_run_id)
    name = unique_name(target.client, target.experiment_id, run_name(config, stats, run_date, swept))
    run = target.client.create_run(target.experiment_id, run_name=name, start_time=start_ms(run_date),
                                   tags={**base_tags(config, out_dir, parent_run_id), "wildtrace.status": "running"})
    target.run_id = run.info.run_id
    return target


def rename_if_needed(target: Target, rd: RunDir, swept: list[str]) -> None:
    """Rename a run whose name no longer says what the files say (its overrides, which the run's
    start did not know, or a temperature dropped mid-run)."""
    info = target.client.get_run(target.run_id).info
    started = datetime.datetime.fromtimestamp(info.start_time / 1000, datetime.UTC).isoformat()
    wanted = run_name(rd.config, rd.stats, started, swept)  # the run's own start: the time stamp never moves
    current = info.run_name or ""
    if current != wanted and not current.startswith(wanted + " #"):
        target.client.update_run(target.run_id, name=unique_name(target.client, target.experiment_id, wanted))


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def log_dataset(client: Any, run_id: str, rd: RunDir) -> None:
    """The tasks file as the run's MLflow dataset input: name, release, digest (tasks sha256)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.exceptions import MlflowException

    d = rd.stats.get("dataset") or {}
    sha = d.get("tasks_sha256")
    if not sha:
        return
    name = str(d.get("name") or rd.config["dataset"].get("name"))
    if d.get("release_version"):
        name += f"@{d['release_version']}"
    profile = {k: d.get(k) for k in ("tasks_sha256", "release_version", "freeze_id", "n_tasks")}
    dataset = Dataset(name=name, digest=sha[:12], source_type="local", source=json.dumps({"uri": d.get("tasks")}),
                      profile=json.dumps(profile))
    given = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "eval")])]
    for attempt in range(DATASET_ATTEMPTS):
        try:
            client.log_inputs(run_id, datasets=given)
            return
        except MlflowException as exc:
            # Parallel jobs insert the same dataset at once and one loses on MLflow's unique
            # constraint; a second try finds the row the other wrote.
            if attempt == DATASET_ATTEMPTS - 1:
                log.warning("MLflow: dataset input not logged (%s)", reason_of(exc))
            time.sleep(0.2 * (attempt + 1))


def log_contents(target: Target, rd: RunDir, parent_run_id: str | None,
                 uploader: documents.DocumentUploader | None = None) -> None:
    """Params, tags, metrics, run files, tables, dataset input and documents (idempotent)."""
    from mlflow.entities import Metric, Param, RunTag

    client, run_id = target.client, target.run_id
    swept = swept_keys(client, parent_run_id)
    tags = tags_of(rd, parent_run_id, swept)
    rename_if_needed(target, rd, swept)
    uris: dict[str, str] = {}
    if rd.mlflow.get("log_documents", True):
        store_run, uris = documents.store_documents(client, rd, target.artifact_location, uploader)
        tags[documents.RUN_TAG] = store_run
    for chunk in _batches([Param(k, v) for k, v in params_of(rd).items()], 100):
        client.log_batch(run_id, params=chunk)
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    for chunk in _batches([Metric(k, v, 0, 0) for k, v in metrics_of(rd).items()], 1000):
        client.log_batch(run_id, metrics=chunk)
    for name in RUN_FILES:
        if (rd.path / name).exists():
            client.log_artifact(run_id, str(rd.path / name))
    if (rd.path / ".hydra").is_dir():
        client.log_artifacts(run_id, str(rd.path / ".hydra"), artifact_path="hydra")
    replace_table(client, run_id, task_table(rd, uris), "tables/tasks.json")
    if rd.judgments:
        replace_table(client, run_id, judgment_table(rd), "tables/judgments.json")
    log_dataset(client, run_id, rd)


def trace_target(target: Target, rd: RunDir) -> TraceTarget:
    """Where a run's traces go, and the judges' routes for their feedback."""
    routes = {k: v.get("route", k) for k, v in rd.config["judge_panel"]["judges"].items()}
    return TraceTarget(target.experiment_id, target.run_id, routes, rd.config["model"].get("route"),
                       trace_tags(rd.config, rd.stats))


def finish_traces(target: Target, rd: RunDir, exporter: TraceExporter | None = None) -> int:
    """Trace every task not yet in the store, then check the store holds them all; how many traces."""
    tt = exporter.target if exporter else trace_target(target, rd)
    dones = task_dones_of(rd)
    existing = traced_tasks(target.client, tt)
    by_id = {d.question_id: d for d in dones}
    complete = {qid for qid, stored in existing.items() if stored.has_spans}
    exporter = exporter or TraceExporter(tt, target.tracking_uri)
    exporter.complete_spans(set(existing) - complete)
    for qid in complete:  # stored, but its feedback was cut off
        if qid in by_id and existing[qid].assessments < len(assessments(existing[qid].trace_id, by_id[qid], tt)):
            log_feedback(exporter.client, existing[qid].trace_id, by_id[qid], tt)
    exporter.skip(complete)
    for done in dones:  # the exporter ignores tasks it was given while the run went
        exporter.submit(done)
    exporter.close(TRACE_WAIT_S)
    stored = traced_tasks(target.client, tt)
    missing = {qid for qid in by_id if not (qid in stored and stored[qid].has_spans)}
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(by_id)} traces are not in the store (e.g. {sorted(missing)[0]})")
    return len(by_id)


def complete_run(target: Target, rd: RunDir, parent_run_id: str | None, exporter: TraceExporter | None = None,
                 uploader: documents.DocumentUploader | None = None) -> str:
    """Log everything of ``rd`` into the existing run ``target.run_id`` and close it.

    FINISHED, or KILLED for a partial run; on any failure the run is marked FAILED (where the
    store still answers) and the exception propagates, for the caller to report.
    """
    try:
        log_contents(target, rd, parent_run_id, uploader)
        finish_traces(target, rd, exporter)
        target.client.set_terminated(target.run_id, "KILLED" if rd.status == RunStatus.PARTIAL else "FINISHED")
    except BaseException:
        if exporter:
            exporter.close(0)
        terminate_quietly(target.client, target.run_id, "FAILED")
        raise
    if parent_run_id:
        try:  # this run is logged; a stale parent table is worth a warning, not a failure
            refresh_parent(target.client, parent_run_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("MLflow: could not refresh the sweep's parent run (%s)", exc)
    return target.run_id


def resumable(client: Any, run_id: str | None, experiment: str | None) -> Any:
    """The run ``run_id`` of this store, if a new upload should complete it (else None).

    ``experiment``: when named, the run must belong to it (otherwise a new run is logged there).
    """
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
        wanted = client.get_experiment_by_name(experiment) if experiment else None
    except Exception:  # noqa: BLE001 - not in this store (or deleted): log a new run
        return None
    if run.info.lifecycle_stage != "active" or (
            experiment and (not wanted or wanted.experiment_id != run.info.experiment_id)):
        return None
    return run


def log_run_dir(path: str | Path, parent_run_id: str | None = None, tracking_uri: str | None = None,
                experiment: str | None = None, resume_run_id: str | None = None) -> str:
    """Log one run directory as one MLflow run; returns its run id. Raises on MLflow trouble.

    ``resume_run_id``: complete that run (a half-logged one, in whichever experiment it was
    created) instead of creating another.
    """
    rd = read_run_dir(path)
    uri = tracking_uri or rd.mlflow["tracking_uri"]
    location = default_artifact_location(uri, rd.mlflow.get("artifact_location"), rd.config["root"])
    client = client_for(uri)
    run = resumable(client, resume_run_id, experiment)
    if run is not None:
        target = Target(client, uri, run.info.experiment_id, run.info.run_id, location)
    else:
        target = create_run(open_target(uri, rd.config, experiment), rd.config, rd.stats, str(rd.path),
                            rd.stats.get("run_date"), parent_run_id)
    write_marker(rd.path, LogStatus.RUNNING, target, parent_run_id)
    complete_run(target, rd, parent_run_id)
    write_marker(rd.path, logged_status(rd), target, parent_run_id)
    return target.run_id


def reason_of(exc: BaseException) -> str:
    """One line naming an exception (no traceback: it may quote a URL, never a key)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def say_not_logged(path: Path, reason: str) -> None:
    """The warning a user sees when MLflow failed: results are safe, and how to log them later."""
    log.warning("MLflow: this run was NOT logged (%s). Results are safe in %s; log them later with\n"
                "  python -m wildtrace.upload %s", reason, path, path)
