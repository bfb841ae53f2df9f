"""Content-addressed outcome cache: nothing lost, nothing paid for twice.

Each stored outcome is one small JSON file named by the sha256 of what decides it:
provider, URL, route, the sha256 of the exact request bytes, and the replicate index —
never the API key, never the request body itself (it holds the document). Whether the
request is streamed is transport, not content: the key is made from the plain request, so
switching ``stream`` pays nothing twice. Files are written to a temporary name and renamed
into place, so a kill -9 leaves either the whole outcome or nothing; several processes can
share one cache directory, and a call in flight in one of them is waited for by the others
(a lock file per request key) instead of being paid again.
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wildtrace.files import FILE_MODE

log = logging.getLogger(__name__)

CACHE_VERSION = 1
#: The fields a stored outcome must have; an entry of another shape is a miss.
OUTCOME_FIELDS = {"payload": object, "http_status": int, "attempts": int, "latency_s": (int, float)}
#: How often a process waiting for another's call looks at the lock again.
LOCK_POLL_S = 0.05


class StorageError(OSError):
    """The cache (or a run folder) cannot be written; the message names the path."""


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


def _well_formed(outcome: Any) -> bool:
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
        raise StorageError(exc.errno or errno.EIO, f"{what} {directory} is not writable: {exc.strerror or exc}") from None


@dataclass
class Cache:
    """A directory of outcomes; ``enabled=False`` makes every lookup a miss and stores nothing."""

    directory: Path
    enabled: bool = True
    stores: int = 0
    #: Why the filesystem refused a lock (said once; the calls then go on unlocked).
    lock_refused: str | None = None

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored outcome for ``key``, or None. An unreadable or ill-shaped file is a miss."""
        if not self.enabled:
            return None
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                entry = json.load(fh)
        except (OSError, ValueError, RecursionError):
            return None
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        return outcome if _well_formed(outcome) else None

    def put(self, key: str, material: dict, outcome: dict[str, Any]) -> None:
        """Store atomically: write a temporary file, fsync, rename into place.

        Raises StorageError (naming the file) when the disk refuses: full, read-only, gone.
        """
        if not self.enabled:
            return
        path = self._path(key)
        tmp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"key": key, "material": material, "outcome": outcome}, fh, ensure_ascii=False,
                          allow_nan=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp:
                Path(tmp).unlink(missing_ok=True)
            raise StorageError(exc.errno or errno.EIO, f"cannot store an outcome in {path}: {exc.strerror or exc}") from None
        except BaseException:
            if tmp:
                Path(tmp).unlink(missing_ok=True)
            raise
        self.stores += 1

    @asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        """Hold the request key's lock (across processes); waits while another holder pays for it.

        The lock is an ``flock`` on a small file, so a killed holder releases it at once.
        A cache that is disabled or cannot hold lock files locks nothing, nor does one on a
        filesystem that refuses locks (Lustre without ``-o flock``, NFS whose lock service is
        down): a call in flight in another process may then be paid twice, never stored torn.
        """
        path = self.directory / "locks" / key[:2] / f"{key}.lock"
        fd = self._open_lock(path) if self.enabled else None
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
            if self._path(key).exists():  # stored: whoever still waits will find it in the cache
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _refused(self, exc: OSError) -> None:
        if self.lock_refused is None:
            self.lock_refused = f"{self.directory}: {exc.strerror or exc}"
            log.warning("cache: the filesystem refuses locks (%s); calls are not locked against other processes, "
                        "so one in flight elsewhere may be paid twice (docs/team.md)", self.lock_refused)

    @staticmethod
    def _open_lock(path: Path) -> int | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
