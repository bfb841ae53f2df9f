"""Content-addressed outcome cache: nothing lost, nothing paid for twice.

Each stored outcome is one small JSON file named by the sha256 of what decides it:
provider, URL, route, the sha256 of the exact request bytes, and the replicate index —
never the API key, never the request body itself (it holds the document). Whether the
request is streamed is transport, not content: the key is made from the plain request, so
switching ``stream`` pays nothing twice. Files are written to a temporary name and renamed
into place, so a kill -9 leaves either the whole outcome or nothing; several processes can
share one cache directory, and a call in flight in one of them is waited for by the others
(a lock file per request key) instead of being paid again.

A cache that stops taking writes mid-run (a disk that fills, a folder replaced or gone)
loses nothing: an outcome it cannot store is appended to the run directory's journal
(``uncached.jsonl``, one cache entry a line, fsynced) and the run stops sending. A later run
reads every journal under its ``root`` (``journals_under``) before its first lookup, so what
was received is not paid for again, and stores the journal's outcomes in the cache when it
can, so the cache is whole again.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from wildtrace.files import FILE_MODE

log = logging.getLogger(__name__)

CACHE_VERSION = 1
#: The run directory's journal of outcomes the cache could not take (read by later runs).
JOURNAL = "uncached.jsonl"
#: The fields a stored outcome must have; an entry of another shape is a miss.
OUTCOME_FIELDS: dict[str, type | tuple[type, ...]] = {"payload": object, "http_status": int, "attempts": int,
                                                     "latency_s": (int, float)}
#: How often a process waiting for another's call looks at the lock again.
LOCK_POLL_S = 0.05
#: Where a run's journal sits, relative to ``root``, in Hydra's layout (conf/config.yaml):
#: runs/<date>/<time>, multirun/<date>/<time>/<job>, and runs/adhoc for a run() without Hydra.
JOURNAL_GLOBS = (f"runs/*/{JOURNAL}", f"runs/*/*/{JOURNAL}", f"multirun/*/*/*/{JOURNAL}")


def journals_under(root: Path, out_dir: Path | None = None) -> list[Path]:
    """The journals of earlier runs under ``root`` (and ``out_dir``'s own, wherever it is), sorted."""
    found = {p for pattern in JOURNAL_GLOBS for p in root.glob(pattern)}
    if out_dir is not None and (out_dir / JOURNAL).is_file():
        found.add(out_dir / JOURNAL)
    return sorted(found)


class StorageError(OSError):
    """The cache (or a run folder) cannot be written; the message names the path."""

    def __str__(self) -> str:
        return str(self.strerror)  # the message names the path and the cause; "[Errno 17]" adds nothing


def cache_key(provider: str, url: str, route: str, body: bytes, replicate: int) -> tuple[str, dict]:
    """(hex key, the material it was made from)."""
    material = {
        "v": CACHE_VERSION,
        "provider": provider,
        "url": url,
        "route": route,
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "replicate": replicate,
    }
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return key, material


def _well_formed(outcome: Any) -> TypeGuard[dict[str, Any]]:
    if not isinstance(outcome, dict):
        return False
    for name, kind in OUTCOME_FIELDS.items():
        value = outcome.get(name)
        if name not in outcome or isinstance(value, bool) or not isinstance(value, kind):
            return False
    return True


def check_writable(directory: Path, what: str) -> None:
    """Create ``directory`` and write a probe file in it; StorageError naming the path otherwise."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StorageError(exc.errno or errno.EIO,
                           f"{what} {directory} is not writable: {exc.strerror or exc}") from None
    except ValueError:  # the OS cannot take the name at all
        raise StorageError(errno.EINVAL, f"{what} {str(directory)!r} is not writable: the path holds a NUL byte") \
            from None


@dataclass
class Cache:
    """A directory of outcomes; ``enabled=False`` makes every lookup a miss and stores nothing.

    ``journal``: the file an outcome goes to when the directory refuses it (the run's
    ``uncached.jsonl``); None keeps no fallback.
    """

    directory: Path
    enabled: bool = True
    stores: int = 0
    journal: Path | None = None
    uncached: int = 0  #: outcomes the directory refused
    journaled: int = 0  #: of those, how many the journal holds
    _fallback: dict[str, dict] = field(default_factory=dict, repr=False)  # key → outcome, from journals
    _journal_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Why the filesystem refused a lock (said once; the calls then go on unlocked).
    lock_refused: str | None = None

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored outcome for ``key`` (the directory, then the journals read), or None.

        An unreadable or ill-shaped file is a miss.
        """
        if not self.enabled:
            return None
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                entry = json.load(fh)
        except (OSError, ValueError, RecursionError):
            return self._fallback.get(key)
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        return outcome if _well_formed(outcome) else self._fallback.get(key)

    def put(self, key: str, material: dict, outcome: dict[str, Any]) -> None:
        """Store atomically: write a temporary file, fsync, rename into place.

        When the disk refuses (full, read-only, gone) the outcome goes to the journal, and a
        StorageError names the file and where the outcome is kept (or that it is kept nowhere).
        """
        if not self.enabled:
            return
        try:
            self._write(key, material, outcome)
        except StorageError as exc:
            raise StorageError(exc.errno, f"{exc}; {self._keep(key, material, outcome)}") from None
        self.stores += 1

    def _write(self, key: str, material: dict, outcome: dict[str, Any]) -> None:
        path = self._path(key)
        tmp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # dumps, then one write: json.dump encodes in pure Python (its C encoder is for dumps
                # only), holding the interpreter lock from the event loop for the whole of it.
                fh.write(json.dumps({"key": key, "material": material, "outcome": outcome}, ensure_ascii=False,
                                    allow_nan=False))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
        except OSError as exc:
            _unlink(tmp)
            raise StorageError(exc.errno or errno.EIO,
                               f"cannot store an outcome in {path}: {exc.strerror or exc}") from None
        except BaseException:
            _unlink(tmp)
            raise

    def _keep(self, key: str, material: dict, outcome: dict[str, Any]) -> str:
        """Append a refused outcome to the journal (stores call this at once: one lock); says where it is."""
        line = json.dumps({"v": CACHE_VERSION, "cache_dir": os.path.abspath(self.directory), "key": key,
                           "material": material, "outcome": outcome}, ensure_ascii=False, allow_nan=False)
        with self._journal_lock:
            self.uncached += 1
            self._fallback[key] = outcome
            if self.journal is None:
                return "kept only in the run files"
            try:
                with open(self.journal, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                return f"and not kept in {self.journal} either ({exc.strerror or exc}): only in the run files"
            self.journaled += 1
        return f"kept in {self.journal}"

    def read_journals(self, paths: Iterable[Path]) -> int:
        """Read earlier runs' journals of this cache; store their outcomes here when the directory takes them.

        A line that is torn (a kill mid-append), ill-shaped, or from another cache folder is
        skipped. Returns how many outcomes were read.
        """
        if not self.enabled:
            return 0
        mine = os.path.abspath(self.directory)
        read = 0
        for path in paths:
            for entry in _journal_entries(path):
                if entry.get("cache_dir") != mine or not isinstance(entry.get("key"), str):
                    continue
                key, outcome = entry["key"], entry.get("outcome")
                if not _well_formed(outcome) or key in self._fallback:
                    continue
                self._fallback[key] = outcome
                read += 1
                if not self._path(key).exists():
                    with suppress(StorageError):  # still broken: the journal keeps serving it
                        self._write(key, entry.get("material") or {}, outcome)
        return read

    @asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        """Hold the request key's lock (across processes); waits while another holder pays for it.

        The lock is an ``flock`` on a small file, so a killed holder releases it at once.
        A cache that is disabled or cannot hold lock files locks nothing, nor does one on a
        filesystem that refuses locks (Lustre without ``-o flock``, NFS whose lock service is
        down): a call in flight in another process may then be paid twice, never stored torn.
        """
        path = self.directory / "locks" / key[:2] / f"{key}.lock"
        fd = await self._opened_lock(path) if self.enabled else None
        if fd is None:
            yield
            return
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(LOCK_POLL_S)
                except OSError as exc:  # ENOLCK, ENOSYS, EOPNOTSUPP: no locks here; still make the call
                    self._refused(exc)
                    break
            yield
        finally:
            # Removed (when stored) and released in asyncio's default thread pool, even when this task is
            # cancelled meanwhile: the shielded job runs to its end either way.
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, self._release, key, path, fd))

    async def _opened_lock(self, path: Path) -> int | None:
        """The lock file's descriptor, opened in asyncio's default thread pool: creating a file (or its
        folder) waits on the filesystem's journal, which the stores' fsyncs (in the same pool) keep
        busy, and on the event loop that held every call up (0.8 ms an open, 1.2 ms a folder, measured
        with judges storing)."""
        opening = asyncio.get_running_loop().run_in_executor(None, self._open_lock, path)
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:  # the descriptor still arrives: close it then
            opening.add_done_callback(_close_when_opened)
            raise

    def _release(self, key: str, path: Path, fd: int) -> None:
        try:
            if self._path(key).exists():  # stored: whoever still waits will find it in the cache
                _unlink(str(path))
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _refused(self, exc: OSError) -> None:
        if self.lock_refused is None:
            self.lock_refused = f"{self.directory}: {exc.strerror or exc}"
            log.warning("cache: the filesystem refuses locks (%s); calls are not locked against other processes, "
                        "so one in flight elsewhere may be paid twice (docs/team/team.md)", self.lock_refused)

    @staticmethod
    def _open_lock(path: Path) -> int | None:
        # Opened first, its folder made only when missing: one system call for every call but the
        # first of a prefix, instead of three (mkdir, stat, open).
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None


def _close_when_opened(opening: asyncio.Future[int | None]) -> None:
    """A lock file opened for a task cancelled meanwhile: close it."""
    if not opening.cancelled() and opening.exception() is None and (fd := opening.result()) is not None:
        with suppress(OSError):
            os.close(fd)


def _unlink(path: str | None) -> None:
    """Remove a temporary or lock file; on a disk that refuses even that, leave it (it is harmless)."""
    if path:
        with suppress(OSError):
            Path(path).unlink(missing_ok=True)


def _journal_entries(path: Path) -> Iterable[dict]:
    """The entries of one journal; unreadable files and lines are skipped."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(entry, dict):
                    yield entry
    except OSError:
        return
