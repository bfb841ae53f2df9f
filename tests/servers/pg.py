"""A real PostgreSQL and a real `mlflow server` on it, as a team runs them, for the tests.

The database is a cluster of its own (``initdb``) in a temporary folder, listening on a free
loopback port with its unix socket in that folder, started and stopped by its own PID. As
root (CI) it runs as the ``postgres`` user: PostgreSQL refuses to run as root. The MLflow
server stores runs and traces in that database and proxies artifacts into a folder of its
own (``--artifacts-destination``), so clients never write the artifact root themselves.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

#: How long PostgreSQL or the MLflow server may take to come up on a busy machine (a safety net).
START_TIMEOUT_S = 120
DB_USER = "postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin_dir() -> Path | None:
    """The folder holding initdb/pg_ctl/postgres: on PATH, else Debian's /usr/lib/postgresql/<newest>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _as_user() -> dict:
    """Popen arguments that run PostgreSQL as `postgres` when we are root, as ourselves otherwise."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def skip_reason() -> str | None:
    """Why no PostgreSQL can be started here (None when one can)."""
    if pg_bin_dir() is None:
        return ("no PostgreSQL server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin: "
                "install them (Debian: apt-get install -y postgresql)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as (it refuses root)"
    return None


@dataclass
class Postgres:
    """A running cluster: its folder, port and server process."""

    folder: Path
    port: int
    proc: subprocess.Popen

    def uri(self, database: str) -> str:
        """The SQLAlchemy URI MLflow takes (psycopg 3, the `[team]` extra's driver)."""
        return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=DB_USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')


def _wait_ready(bin_dir: Path, port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        ready = subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER],
                               capture_output=True)
        if ready.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"postgres did not accept connections within {START_TIMEOUT_S} s")


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 30) -> None:
    """Stop a process this test started (its own session, by its own PID), then kill it if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def postgres() -> Iterator[Postgres]:
    """initdb a cluster in a fresh temporary folder and run `postgres` on a free loopback port until exit."""
    bin_dir = pg_bin_dir()
    assert bin_dir is not None, skip_reason()
    # Not under pytest's tmp_path: as root that is a 0700 folder the postgres user cannot enter.
    folder = Path(tempfile.mkdtemp(prefix="wildtrace-pg-"))
    user = _as_user()
    if user:
        os.chown(folder, user["user"], user["group"])
    proc = None
    try:
        data, log = folder / "data", folder / "postgres.log"
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", DB_USER, "--auth=trust", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, cwd=folder, **user)
        port = free_port()
        with open(log, "wb") as out:
            # fsync off: a test database need not survive a power cut, and the machine is shared.
            proc = subprocess.Popen([str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                                     "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                                     "-c", "fsync=off", "-c", "max_connections=200"],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True, **user)
        _wait_ready(bin_dir, port, proc, log)
        yield Postgres(folder, port, proc)
    finally:
        if proc is not None:
            stop_process(proc, signal.SIGINT)  # SIGINT is PostgreSQL's "fast" shutdown
        shutil.rmtree(folder, ignore_errors=True)


def server_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # the server alone, not a job runner too
    return env


def wait_health(url: str, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text(errors='replace')[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"{what} did not answer /health within {START_TIMEOUT_S} s")


@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log: Path,
                  workers: int = 2) -> Iterator[tuple[str, subprocess.Popen]]:
    """`mlflow server` on a free loopback port over ``backend_uri``, proxying artifacts into ``artifacts``.

    Its output goes to ``log`` (a pipe nobody reads would fill and stall the server under load).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers), "--backend-store-uri", backend_uri,
           "--artifacts-destination", str(artifacts), "--serve-artifacts"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_health(url, proc, "mlflow server", log)
        yield url, proc
    finally:
        stop_process(proc)


@dataclass
class TeamServer:
    """What a test gets: the server's URL, the database URI behind it and the artifact folder."""

    url: str
    database_uri: str
    artifacts: Path
    log: Path
    server: subprocess.Popen


@contextmanager
def team_server(folder: Path) -> Iterator[TeamServer]:
    """PostgreSQL with a database `mlflow`, and `mlflow server` on it; both stopped by PID on exit.

    The server's artifacts and log go into ``folder``.
    """
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with postgres() as pg:
        pg.create_database("mlflow")
        uri = pg.uri("mlflow")
        artifacts, log = folder / "server-artifacts", folder / "server.log"
        with mlflow_server(uri, artifacts, log) as (url, proc):
            yield TeamServer(url, uri, artifacts, log, proc)


@pytest.fixture(scope="module")
def pg_mlflow(tmp_path_factory) -> Iterator[TeamServer]:
    """One PostgreSQL-backed tracking server for a test module (each test uses its own experiment)."""
    with team_server(tmp_path_factory.mktemp("team-server")) as server:
        yield server
