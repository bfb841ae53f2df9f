"""The MLflow store, reached one way by the logger, the observer, upload and the sweep callback.

A local SQLite store (the default ``outputs/mlflow.db``) is checked before the first request
and opened under a lock beside it (``mlflow.db.lock``): MLflow creates and migrates a new
store's schema when it first opens it, and two processes doing that at once corrupted it
(``duplicate column name``, alembic errors, ``_alembic_tmp_*`` tables that broke every later
run). A tracking server migrates its own database once, so it is the setting for many
concurrent jobs (docs/mlflow/mlflow-store.md).

A store whose creation was cut off (the first run killed while MLflow made its schema) is
made again by the next command when it holds nothing yet, or completed by MLflow's own
``mlflow db upgrade`` when it holds runs, under the same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
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


#: How long opening a local store waits for another process creating or migrating it (a new
#: store's migrations took 5 s on 2 busy cores; an existing store's check 0.08 s).
STORE_LOCK_WAIT_S = 120.0
#: How often a process waiting for the store's lock looks again.
LOCK_POLL_S = 0.05
#: Stores opened (created and migrated) by this process: MLflow caches them per URI.
_READY: set[str] = set()
_READY_LOCK = threading.Lock()


class StoreUnusable(OSError):
    """A local MLflow store that cannot be used; the message names the path (one line)."""


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; None for servers, other databases and in-memory stores."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    name = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    if name in ("", ":memory:"):
        return None
    return Path(name) if name.startswith("/") else Path.cwd() / name


def lock_path(db: Path) -> Path:
    """The lock file beside a store: ``mlflow.db`` → ``mlflow.db.lock``."""
    return db.with_name(db.name + ".lock")


@contextlib.contextmanager
def store_lock(db: Path, exclusive: bool) -> Iterator[None]:
    """Hold the store's lock (shared to read its state, exclusive to open it), waiting at most
    ``STORE_LOCK_WAIT_S``. ``flock``: the kernel releases it when a holder dies."""
    path = lock_path(db)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise StoreUnusable(f"the MLflow store's lock file {path} cannot be opened: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + STORE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreUnusable(f"the MLflow store {db} stayed locked by another process ({path}) for more "
                                        f"than {STORE_LOCK_WAIT_S:.0f} s") from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_folder(db: Path) -> None:
    """The store's folder exists (or is made), is a folder, and takes a new file (SQLite writes journals there)."""
    folder = db.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), folder)
        reason = "is a file, not a folder" if blocker.exists() else f"cannot be created: {exc.strerror or exc}"
        raise StoreUnusable(f"the MLflow store's folder {blocker} {reason}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreUnusable(f"the MLflow store's folder {folder} is not writable: {exc.strerror or exc}") from None


def _check_database(db: Path) -> None:
    """An existing store file is a SQLite database this process can write, not left half-migrated."""
    if not db.exists():
        return  # MLflow creates it (under the lock)
    if not db.is_file():
        raise StoreUnusable(f"the MLflow store {db} is not a database file (it is a folder)")
    if not os.access(db, os.R_OK | os.W_OK):
        raise StoreUnusable(f"the MLflow store {db} cannot be written (its permissions)")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=20)) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error as exc:
        raise StoreUnusable(f"the MLflow store {db} cannot be opened as SQLite: {exc}") from None
    leftovers = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
    if leftovers and _holds_something(db):
        raise StoreUnusable(f"the MLflow store {db} was left half-migrated (tables {', '.join(leftovers)}: an "
                            "interrupted schema migration, e.g. two first runs at once before wildtrace locked it); "
                            "move it aside: the next run makes a new one, and upload logs any run folder into it")


#: What a store holds that makes it more than a schema: a run, a trace, an experiment besides MLflow's
#: default one (id 0).
HOLDINGS = {"runs": "SELECT 1 FROM runs LIMIT 1", "trace_info": "SELECT 1 FROM trace_info LIMIT 1",
            "experiments": "SELECT 1 FROM experiments WHERE experiment_id != 0 LIMIT 1"}


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    return [r[0] for r in rows]


def _holds_something(db: Path) -> bool:
    """Whether a store holds a run, a trace or an experiment of its own (not only a schema)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=20)) as conn:
        tables = set(_tables(conn))
        return any(conn.execute(query).fetchone() for table, query in HOLDINGS.items() if table in tables)


def _unfinished(db: Path) -> bool:
    """Whether a store's schema was left part-made: tables, but a migration's leftovers or no schema version."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=20)) as conn:
        tables = _tables(conn)
        if not tables:
            return False
        if any(t.startswith("_alembic_tmp_") for t in tables) or "alembic_version" not in tables:
            return True
        return conn.execute("SELECT 1 FROM alembic_version LIMIT 1").fetchone() is None


def _make_again(db: Path) -> None:
    """Drop every table of a store that holds nothing yet: MLflow makes its schema anew on the next open.

    The file stays (a process holding it open keeps a valid handle); only its tables go.
    """
    log.warning("MLflow: the store %s was left part-made (its creation was cut off); making it again", db)
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=20)) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        for table in _tables(conn):
            conn.execute(f'DROP TABLE "{table}"')  # the names come from the store's own schema
        conn.commit()


def _complete(db: Path, tracking_uri: str, reason: Exception) -> None:
    """Finish a store's interrupted migration with MLflow's own ``mlflow db upgrade``; StoreUnusable if it cannot."""
    log.warning("MLflow: the store %s was left part-migrated; completing it with `mlflow db upgrade`", db)
    done = subprocess.run([sys.executable, "-m", "mlflow", "db", "upgrade", tracking_uri], capture_output=True,
                          text=True, timeout=STORE_LOCK_WAIT_S)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [str(reason)])[-1]
        raise StoreUnusable(f"the MLflow store {db} was left half-migrated and `mlflow db upgrade` could not complete "
                            f"it ({last}); move it aside: the next run makes a new one, and upload logs any run "
                            "folder into it")


def _repair(db: Path) -> None:
    """Under the store's exclusive lock: a part-made store that holds nothing is made again."""
    if db.exists() and db.is_file() and _unfinished(db) and not _holds_something(db):
        _make_again(db)


def check_store(tracking_uri: str) -> None:
    """Before the first request, without MLflow: a local store's folder takes files and its database opens.

    StoreUnusable (naming the path) otherwise. A tracking server is not asked here: its first
    call tells (and is bounded, see above).
    """
    db = sqlite_path(tracking_uri)
    if db is None:
        return
    _check_folder(db)
    with store_lock(db, exclusive=False):  # a migration in progress elsewhere has tables of its own
        _check_database(db)
        if not (db.exists() and _unfinished(db)):
            return
    with store_lock(db, exclusive=True):  # cut off while it was made: made again (what it holds is checked again)
        _repair(db)


def open_store(tracking_uri: str) -> None:
    """Make a local store ready once per process: checked, then created / migrated under its lock.

    MLflow creates and migrates a store when it first opens it, and caches it per URI: every
    later client of this process (also MLflow's trace client) then finds it ready, whatever
    other processes do. Servers and other databases are left to MLflow.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    db = sqlite_path(tracking_uri)
    if db is None:
        return
    with _READY_LOCK:
        if tracking_uri in _READY:
            return
        _check_folder(db)
        with store_lock(db, exclusive=True):
            _check_database(db)
            _repair(db)
            try:
                MlflowClient(tracking_uri=tracking_uri)  # opens the store: creates, migrates, verifies its schema
            except Exception as exc:  # a part-made store fails in MLflow's or SQLAlchemy's words
                if not _holds_something(db):
                    _make_again(db)  # cut off between two migrations: MLflow cannot resume from there
                elif isinstance(exc, MlflowException) and "out-of-date database schema" in str(exc):
                    _complete(db, tracking_uri, exc)
                else:
                    raise
                MlflowClient(tracking_uri=tracking_uri)
        _READY.add(tracking_uri)


def client_for(tracking_uri: str) -> Any:
    """An explicit client: no global state, so jobs in one process never cross stores (see open_store)."""
    from mlflow.tracking import MlflowClient

    open_store(tracking_uri)
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
