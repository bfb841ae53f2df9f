"""MLflow as a run observer: the run is created when the run starts, traces are logged as
tasks finish, and the rest is logged from the run directory when the run ends.

The runtime calls these methods from its event loop and never imports this module; the
entry point builds an ``MlflowObserver`` and hands it in. Nothing here raises: MLflow
trouble is a warning, ``mlflow.json`` says ``not_logged`` and names the command that logs
the run later (which completes this same MLflow run, see ``mlflow_logger``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path

from wildtrace.core.events import RunEnd, RunObserver, RunStart, TaskDone
from wildtrace.core.records import LogStatus, RunStatus
from wildtrace.tracking.runs.mlflow_logger import (TRACE_WAIT_S, Target, complete_run, create_run, logged_status,
                                              open_target, read_run_dir, reason_of, say_not_logged, write_marker)
from wildtrace.tracking.documents import DocumentUploader
from wildtrace.tracking.rundir import trace_tags
from wildtrace.tracking.store import client_for, log, sqlite_path, terminate_quietly
from wildtrace.tracking.traces import TraceExporter, TraceTarget

#: RunEnd.status → the MLflow status a run that cannot be logged is closed with.
CLOSE_STATUS = {RunStatus.FINISHED: "FAILED", RunStatus.PARTIAL: "KILLED", RunStatus.FAILED: "FAILED"}
#: How long a run whose store is failing still waits for traces in flight.
FAILING_WAIT_S = 15.0


class MlflowObserver(RunObserver):
    """Logs one run to MLflow while it goes (see the module's docstring)."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_location: str | None = None,
                 log_documents: bool = True, parent_run_id: str | None = None) -> None:
        """Where to log; ``parent_run_id``: the sweep's parent when the run is a multirun job."""
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.log_documents = log_documents
        self.parent_run_id = parent_run_id
        self.target: Target | None = None
        self.exporter: TraceExporter | None = None
        self.out_dir: Path | None = None
        self._lock = threading.Lock()
        self._pending: list[TaskDone] = []  # tasks done before the MLflow run existed
        self._starter: threading.Thread | None = None
        self._opener: threading.Thread | None = None
        self.documents: DocumentUploader | None = None  # shared with the end of the run: one upload each

    def _config(self, config: dict) -> dict:
        """The run's config with this observer's MLflow settings (they win over the file's)."""
        mlflow = {**config.get("mlflow", {}), "tracking_uri": self.tracking_uri, "experiment": self.experiment,
                  "artifact_location": self.artifact_location, "log_documents": self.log_documents}
        return {**config, "mlflow": mlflow}

    def open_early(self) -> None:
        """Open an existing local store on a thread now, before the run's config arrives.

        Its import and schema check (about a second) then overlap the run's plan instead of
        following it. A store still to be made, a server or another database waits for the
        run: a command refused before its first request leaves no store behind.
        """
        db = sqlite_path(self.tracking_uri)
        if db is None or not db.is_file():
            return
        self._opener = threading.Thread(target=self._open_quietly, name="wildtrace-mlflow-open", daemon=True)
        self._opener.start()

    def _open_quietly(self) -> None:
        with contextlib.suppress(Exception):  # the run's own open (``_start``) meets it again and reports it
            client_for(self.tracking_uri)

    def run_started(self, start: RunStart) -> None:
        """Create the MLflow run off the event loop and leave its id in the run directory as soon as it exists.

        Opening a store costs seconds (SQLite's schema check, a server's round trips): the first
        requests go out meanwhile, and tasks that finish before the run exists wait in a list.
        """
        self.out_dir = Path(start.out_dir)
        self.parent_run_id = start.parent_run_id or self.parent_run_id
        self._starter = threading.Thread(target=self._start, args=(start,), name="wildtrace-mlflow-start",
                                         daemon=True)
        self._starter.start()

    def wait_started(self, timeout: float | None = None) -> bool:
        """Wait until the MLflow run exists (or could not be made); False if still starting after ``timeout``."""
        if self._starter is not None:
            self._starter.join(timeout)
            return not self._starter.is_alive()
        return True

    def _start(self, start: RunStart) -> None:
        if self._opener is not None:
            self._opener.join()
        try:
            config = self._config(start.config)
            target = open_target(self.tracking_uri, config, self.experiment)
            self.target = create_run(target, config, {}, start.out_dir, start.run_date, self.parent_run_id)
            write_marker(Path(start.out_dir), LogStatus.RUNNING, self.target, self.parent_run_id)
            routes = {k: v.get("route", k) for k, v in config["judge_panel"]["judges"].items()}
            also = None
            if self.log_documents:  # copy each document while the run goes, not all of them at its end
                self.documents = DocumentUploader(self.target.client, self.target.artifact_location)
                also = functools.partial(self._store_document, self.documents, config["dataset"]["corpus"])
            exporter = TraceExporter(TraceTarget(self.target.experiment_id, self.target.run_id, routes,
                                                 config["model"].get("route"), trace_tags(config, {})),
                                     self.tracking_uri, also=also)
        except Exception as exc:  # noqa: BLE001 - MLflow trouble must never cost results
            log.warning("MLflow: could not start a run (%s); the run goes on unlogged", reason_of(exc))
            with self._lock:
                self._pending.clear()
            return
        with self._lock:
            for done in self._pending:
                exporter.submit(done)
            self._pending.clear()
            self.exporter = exporter

    @staticmethod
    def _store_document(uploader: DocumentUploader, corpus: str, done: TaskDone) -> None:
        uploader.put_task(done.answer.document, corpus)

    def task_done(self, done: TaskDone) -> None:
        """Queue the task's trace for the export thread (never blocks the event loop)."""
        with self._lock:
            if self.exporter is not None:
                self.exporter.submit(done)
            elif self._starter is not None and self._starter.is_alive():
                self._pending.append(done)

    def run_finished(self, end: RunEnd) -> str | None:
        """Log the run directory, wait for the traces, close the run; its id, or None when not logged."""
        path = Path(end.out_dir)
        self.wait_started()
        try:
            if self.target is None:
                raise RuntimeError("the MLflow run could not be started")
            if end.status == RunStatus.FAILED:
                raise RuntimeError("the run failed before its files were complete")
            rd = read_run_dir(path)
            if end.status == RunStatus.PARTIAL:  # the files may predate the stop: the event is the truth
                rd.stats["status"] = RunStatus.PARTIAL
            complete_run(self.target, rd, self.parent_run_id, self.exporter, self.documents)
        except Exception as exc:  # noqa: BLE001 - MLflow trouble must never cost results
            reason = reason_of(exc)
            if self.exporter is not None:  # the store is failing: do not wait on its trace retries
                self.exporter.close(FAILING_WAIT_S)
                self.exporter = None
            if self.target is not None:
                terminate_quietly(self.target.client, self.target.run_id, CLOSE_STATUS.get(end.status, "FAILED"))
            write_marker(path, LogStatus.NOT_LOGGED, self.target, self.parent_run_id, reason)
            say_not_logged(path, reason)
            return None
        finally:
            self._abandon()
        write_marker(path, logged_status(rd), self.target, self.parent_run_id)
        return self.target.run_id

    def _abandon(self) -> None:
        """Stop the trace thread (if any)."""
        if self.exporter is not None:
            self.exporter.close(TRACE_WAIT_S)
            self.exporter = None


class UnloggedObserver(RunObserver):
    """A run whose store could not be opened, with ``mlflow.required=false``: ``mlflow.json`` says
    not_logged with the reason (for ``upload`` later); the warning was given once already."""

    def __init__(self, reason: str, parent_run_id: str | None = None) -> None:
        """``reason``: why the store cannot be used (one line naming its path)."""
        self.reason = reason
        self.parent_run_id = parent_run_id

    def run_started(self, start: RunStart) -> None:
        """Leave the reason beside the run's files from its first moment."""
        write_marker(Path(start.out_dir), LogStatus.NOT_LOGGED, None, start.parent_run_id or self.parent_run_id,
                     self.reason)

    def run_finished(self, end: RunEnd) -> str | None:
        """Not logged: None."""
        return None
