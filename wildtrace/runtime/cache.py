"""Content-addressed outcome cache: nothing lost, nothing paid for twice.

Each stored outcome is one small JSON file named by the sha256 of what decides it:
provider, URL, route, the sha256 of the exact request bytes, and the replicate index —
never the API key, never the request body itself (it holds the document). Files are
written to a temporary name and renamed into place, so a kill -9 leaves either the whole
outcome or nothing, and several processes can share one cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wildtrace.runtime.outputs import FILE_MODE

CACHE_VERSION = 1


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


@dataclass
class Cache:
    """A directory of outcomes; ``enabled=False`` makes every lookup a miss and stores nothing."""

    directory: Path
    enabled: bool = True
    stores: int = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored outcome for ``key``, or None. An unreadable file counts as a miss."""
        if not self.enabled:
            return None
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                entry = json.load(fh)
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        return outcome if isinstance(outcome, dict) else None

    def put(self, key: str, material: dict, outcome: dict[str, Any]) -> None:
        """Store atomically: write a temporary file, fsync, rename into place."""
        if not self.enabled:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"key": key, "material": material, "outcome": outcome}, fh, ensure_ascii=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stores += 1
