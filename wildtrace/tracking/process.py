"""MLflow logging in a child process: the run's own interpreter never runs MLflow code.

Why: measured on the full-size benchmark (2 cores), MLflow's import, its store and the
traces held this process's GIL for about 6 s of a 21-s run. Every wake-up of the event loop
then waited for it, so each call came back tens of milliseconds late and the run missed
its wall-time target; with MLflow off the same run met it. In a child process the same
work runs on its own interpreter (and on another core when there is one).

``ProcessObserver`` is the run's observer: it starts the child when it is made (so MLflow
is imported while the dataset loads), or adopts the one ``prestart`` started as the entry
point began (so MLflow is imported while Hydra composes, too), and forwards the events the child's
``MlflowObserver`` listens to. A thread pickles and writes them, so the event loop never
blocks on the pipe. The child's log records come back and are logged here, through this
process's handlers (and their redaction). Nothing here raises:

- if the child cannot be started, the observer logs from threads of this process instead;
- if the child dies, the run's ``mlflow.json`` says ``not_logged`` with the reason (keeping
  the MLflow run id), and ``python -m wildtrace.upload`` completes that run later;
- if this process goes away first (a crash, SIGKILL), the child sees its pipe close,
  stores the traces it already has, closes the MLflow run as FAILED and marks the run
  directory ``not_logged``. Such a run never wrote its run files (they come at its end):
  the resume (the same command, served from the cache) finishes it, and ``upload`` says so.

The child ignores SIGINT and SIGTERM: a Ctrl-C or a job scheduler's SIGTERM reaches the
whole process group, and the run (which stops cleanly and ends its MLflow run as KILLED)
tells the child when to finish.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from enum import StrEnum
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wildtrace.core.events import RunEnd, RunObserver, RunStart, TaskDone
from wildtrace.core.records import RunStatus
from wildtrace.memory import return_large_buffers

if TYPE_CHECKING:
    from wildtrace.tracking.runs.observer import MlflowObserver

log = logging.getLogger(__name__)


class ToChild(StrEnum):
    """What the run's process sends its logging process: the observer's events, in order.

    Both directions send the plain value (``.value``): the child runs this module as ``__main__``,
    so a member pickled there would name ``__main__.ToParent``, which the parent cannot load.
    """

    RUN_STARTED = "run_started"
    TASK_DONE = "task_done"
    RUN_FINISHED = "run_finished"


class ToParent(StrEnum):
    """What the logging process sends back: its log records, that the MLflow run exists, its run id at the end."""

    LOG = "log"
    STARTED = "started"
    FINISHED = "finished"


#: How long the end of a run waits for the child beyond the traces' own bound.
FINISH_WAIT_S = 660.0
#: How long a killed child may take to go.
EXIT_WAIT_S = 5.0
#: The child's niceness: when the CPU is short, its work yields to the run's.
CHILD_NICENESS = 10
#: Set in the child's environment unless the user set it: a benchmark harness that runs
#: offline by default does not send MLflow's usage telemetry.
QUIET_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true"}
#: Also set unless the user set it: pyarrow (under pandas' string columns in the run's tables)
#: allocates from malloc, not from its mimalloc pool, which kept what it freed. Measured at full
#: scale: this process's peak 301-304 MB with the pool, 280 MB without.
MEMORY_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
#: A child started by ``prestart`` and not yet adopted by a ``ProcessObserver``.
_prestarted: tuple[subprocess.Popen, Connection, Connection] | None = None


class _Shared:
    """What the observer and its two threads share (the threads never hold the observer itself)."""

    def __init__(self) -> None:
        self.started = threading.Event()  # the child's MLflow run exists (or could not be made)
        self.finished = threading.Event()  # the child answered run_finished, or is gone
        self.run_id: str | None = None
        self.gone: str | None = None  # why the child is no longer reachable


class ProcessObserver(RunObserver):
    """Forwards the run's events to an ``MlflowObserver`` in a child process (see the module's docstring)."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_location: str | None = None,
                 log_documents: bool = True, parent_run_id: str | None = None) -> None:
        """The same arguments as ``MlflowObserver``; the child is started here."""
        self._kwargs: dict[str, Any] = {"tracking_uri": tracking_uri, "experiment": experiment,
                        "artifact_location": artifact_location, "log_documents": log_documents,
                        "parent_run_id": parent_run_id}
        self.parent_run_id = parent_run_id
        self.fallback: MlflowObserver | None = None  # in-process logging, when no child could be started
        self._shared = _Shared()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.process: subprocess.Popen | None = None
        try:
            self.process, sender, receiver = take_prestarted() or _spawn()
        except OSError as exc:
            log.warning("MLflow: could not start the logging process (%s); logging from this process", exc)
            from wildtrace.tracking.runs.observer import MlflowObserver as InProcess

            self.fallback = InProcess(**self._kwargs)
            return
        self._outbox.put(("init", self._kwargs, logging.getLogger().getEffectiveLevel()))
        threading.Thread(target=_send_loop, args=(self._outbox, sender, self._shared), name="wildtrace-mlflow-send",
                         daemon=True).start()
        threading.Thread(target=_receive_loop, args=(receiver, self._shared), name="wildtrace-mlflow-receive",
                         daemon=True).start()
        # A job that raises before run_finished drops its observer: the child then sees its pipe close.
        weakref.finalize(self, self._outbox.put, None)

    def run_started(self, start: RunStart) -> None:
        """The child creates the MLflow run (its id reaches ``mlflow.json`` as soon as it exists)."""
        self.parent_run_id = start.parent_run_id or self.parent_run_id
        if self.fallback is not None:
            return self.fallback.run_started(start)
        self._outbox.put((ToChild.RUN_STARTED.value, start))

    def task_done(self, done: TaskDone) -> None:
        """Queued for the sending thread: never blocks the event loop."""
        if self.fallback is not None:
            return self.fallback.task_done(done)
        self._outbox.put((ToChild.TASK_DONE.value, done))

    def wait_started(self, timeout: float | None = None) -> bool:
        """Wait until the child's MLflow run exists (or could not be made); False if not known after ``timeout``."""
        if self.fallback is not None:
            return self.fallback.wait_started(timeout)
        return self._shared.started.wait(timeout) or self._shared.gone is not None

    def run_finished(self, end: RunEnd) -> str | None:
        """The child logs the run directory and closes the MLflow run; its id, or None when not logged."""
        if self.fallback is not None:
            return self.fallback.run_finished(end)
        shared = self._shared
        self._outbox.put((ToChild.RUN_FINISHED.value, end))
        self._outbox.put(None)
        if not shared.finished.wait(FINISH_WAIT_S):
            shared.gone = f"the logging process did not finish within {FINISH_WAIT_S:.0f} s"
            self._kill()
        if shared.gone is not None and shared.run_id is None:
            _mark_not_logged(Path(end.out_dir), self.parent_run_id, shared.gone)
            return None
        # Not waited for: the child has answered, and its interpreter's exit took 0.56 s (measured).
        return shared.run_id

    def _kill(self) -> None:
        if self.process is None:
            return
        self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(EXIT_WAIT_S)


def prestart() -> None:
    """Start the logging process now, before the run's config exists; the run's ``ProcessObserver`` adopts it.

    The entry point calls this first thing: the child's MLflow import (seconds of CPU, on
    another core) then overlaps Hydra's compose and the plan instead of following them. A
    child never adopted (MLflow turned off by the config, a refused command) ends at
    ``discard_prestarted`` or when this process does: it sees its pipe close before any
    event, and nothing is logged.
    """
    global _prestarted
    if _prestarted is None:
        with contextlib.suppress(OSError):  # the observer spawns (or falls back) as it always did
            _prestarted = _spawn()


def take_prestarted() -> tuple[subprocess.Popen, Connection, Connection] | None:
    """The prestarted child, if there is one still running (then it is no longer parked)."""
    global _prestarted
    parked, _prestarted = _prestarted, None
    if parked is not None and parked[0].poll() is None:
        return parked
    if parked is not None:
        _release(parked)
    return None


def discard_prestarted() -> None:
    """End the prestarted child unused (the run logs nothing to MLflow)."""
    parked = take_prestarted()
    if parked is not None:
        _release(parked)


def _release(parked: tuple[subprocess.Popen, Connection, Connection]) -> None:
    process, sender, receiver = parked
    for conn in (sender, receiver):  # its pipe closes: the child returns before any MLflow call
        with contextlib.suppress(OSError):
            conn.close()
    threading.Thread(target=process.wait, name="wildtrace-mlflow-reap", daemon=True).start()  # no zombie


def _spawn() -> tuple[subprocess.Popen, Connection, Connection]:
    """Start ``python -m wildtrace.tracking.process``; (process, connection to it, connection from it)."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    path = os.pathsep.join(p for p in (_PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")) if p)
    # This process's wildtrace, whatever sys.path says; the user's own settings win over the defaults.
    env = {**QUIET_ENV, **MEMORY_ENV, **os.environ, "PYTHONPATH": path}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "wildtrace.tracking.process", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w), env=env, stdin=subprocess.DEVNULL,
            stdout=2)  # stdout carries the run's headline only
    except OSError:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
            os.close(fd)
        raise
    os.close(to_child_r)
    os.close(from_child_w)
    return process, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)


def _send_loop(outbox: queue.SimpleQueue, conn: Connection, shared: _Shared) -> None:
    """Pickle and write each queued event; None closes the pipe (the child then ends)."""
    while True:
        item = outbox.get()
        if item is None:
            break
        if shared.gone is not None:
            continue  # drain: nothing can reach the child any more
        try:
            conn.send(item)
        except (OSError, ValueError) as exc:  # the child is gone
            shared.gone = shared.gone or f"the logging process is gone ({type(exc).__name__}: {exc})"
    with contextlib.suppress(OSError):
        conn.close()


def _receive_loop(conn: Connection, shared: _Shared) -> None:
    """The child's messages (``ToParent``): log records (logged here), started, finished; EOF: it is gone."""
    try:
        while True:
            kind, *rest = conn.recv()
            if kind == ToParent.LOG:
                name, level, message = rest
                logger = logging.getLogger(name)
                if logger.isEnabledFor(level):
                    logger.handle(logging.makeLogRecord({"name": name, "levelno": level, "msg": message,
                                                         "levelname": logging.getLevelName(level)}))
            elif kind == ToParent.STARTED:
                shared.started.set()
            elif kind == ToParent.FINISHED:
                shared.run_id = rest[0]
                shared.finished.set()
    except (EOFError, OSError, ValueError) as exc:
        if not shared.finished.is_set():
            shared.gone = shared.gone or (f"the logging process exited ({type(exc).__name__})"
                                          if not isinstance(exc, EOFError) else "the logging process exited")
    finally:
        shared.started.set()
        shared.finished.set()
        conn.close()


def _mark_not_logged(out_dir: Path, parent_run_id: str | None, reason: str) -> None:
    """``mlflow.json`` says not_logged with the reason, keeping the MLflow run the child had made."""
    from wildtrace.core.records import LogStatus
    from wildtrace.tracking.runs.mlflow_logger import MARKER, read_marker, say_not_logged
    from wildtrace.files import write_json

    marker = read_marker(out_dir)
    data = {"status": LogStatus.NOT_LOGGED, "run_id": marker.get("run_id"), "parent_run_id": parent_run_id,
            "tracking_uri": marker.get("tracking_uri"), "experiment_id": marker.get("experiment_id"),
            "error": reason}
    try:
        write_json(out_dir / MARKER, data)
    except OSError as exc:
        log.warning("MLflow: could not write %s (%s)", out_dir / MARKER, exc)
    say_not_logged(out_dir, reason)


# ---------------------------------------------------------------------- the child


class _Forward(logging.Handler):
    """Sends every record to the parent as (name, level, message); tracebacks folded into the message."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        """Never raises: a record that cannot be sent is dropped."""
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            self._send((ToParent.LOG.value, record.name, record.levelno, message))
        except Exception:  # noqa: BLE001 - logging must not break the logging process
            pass


def _announce_started(observer: MlflowObserver, send: Callable[[tuple], None]) -> None:
    """Tell the parent once the MLflow run exists (or could not be made)."""
    observer.wait_started()
    send((ToParent.STARTED.value,))


def _warm() -> None:
    """Import MLflow while the run loads its dataset (the first MLflow call then finds it loaded)."""
    with contextlib.suppress(Exception):  # any failure: the real call reports it
        importlib.import_module("mlflow.tracking")


def child_main(in_fd: int, out_fd: int) -> int:
    """The child: an ``MlflowObserver`` fed from the pipe until run_finished (or the pipe closes)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    return_large_buffers()
    with contextlib.suppress(OSError):  # logging yields the CPU to the run (and to whatever serves it on this machine)
        os.nice(CHILD_NICENESS)
    inbox, outbox = Connection(in_fd, writable=False), Connection(out_fd, readable=False)
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock, contextlib.suppress(OSError, ValueError):  # the parent is gone: the records go nowhere
            outbox.send(message)

    root = logging.getLogger()
    root.handlers[:] = [_Forward(send)]
    # Before the settings arrive: a prestarted child imports while the run's config is composed.
    threading.Thread(target=_warm, name="wildtrace-mlflow-import", daemon=True).start()
    try:
        _kind, kwargs, level = inbox.recv()
    except (EOFError, OSError):
        return 0  # the run ended before it started (or never wanted MLflow)
    root.setLevel(level)
    from wildtrace.tracking.runs.observer import MlflowObserver

    observer = MlflowObserver(**kwargs)
    observer.open_early()
    started: RunStart | None = None
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            break
        name, event = message
        if name == ToChild.RUN_STARTED:
            started = event
            observer.run_started(event)
            threading.Thread(target=_announce_started, args=(observer, send), daemon=True).start()
        elif name == ToChild.TASK_DONE:
            observer.task_done(event)
        elif name == ToChild.RUN_FINISHED:
            send((ToParent.FINISHED.value, observer.run_finished(event)))
            return 0
    if started is not None:  # the run's process went away without finishing: keep what it sent
        observer.run_finished(RunEnd(out_dir=started.out_dir, status=RunStatus.FAILED))
    return 0


def _exit_now(code: int) -> None:
    """End without the interpreter's teardown (0.5 s of MLflow's threads and modules, measured):
    every MLflow call above was synchronous, so nothing is left to flush but the std streams."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(child_main(int(sys.argv[1]), int(sys.argv[2])))
