"""Where the batches a run created are written down, so a killed run never pays twice.

Each batch gets one small JSON record the moment the provider returns its id: the
provider, the endpoint label, the batch id, the round (the attempt number of its items),
when it was created and every item's custom_id (the item's cache key). Records live in
``<cache.dir>/batches/`` (the folder every run of the same config shares, so a resumed run
in a new run folder finds them) and are mirrored into the run folder's ``batches.json``.
A record is marked ``collected`` once its results are stored; until then a run whose
items it covers polls it instead of creating a second batch for the same requests.
Every write is atomic (temporary file + rename): a kill leaves the old record or the new.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from wildtrace.files import write_json

#: A record file larger than this is not one of ours (a record holds ids, never documents).
RECORD_LIMIT = 64 << 20
#: Provider batch ids are short tokens; anything else is refused as a file name.
SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


class BatchState(StrEnum):
    """A batch's states of the run's own; between them a record holds the provider's last status as it said it."""

    CREATED = "created"  #: made, not yet polled
    COLLECTED = "collected"  #: its results stored
    MISSING = "missing"  #: the provider answers 404 for it: its items are sent again


@dataclass
class BatchRecord:
    """One batch a run created, as written to disk."""

    provider: str  #: openai | anthropic
    label: str  #: the endpoint: "model" or a judge key
    batch_id: str
    custom_ids: list[str]
    round: int  #: the attempt number of its items (1 for a first send)
    created_at: float
    state: str = BatchState.CREATED  #: the provider's last status seen, or BatchState.COLLECTED once stored
    counts: dict[str, int] = field(default_factory=dict)
    input_file_id: str | None = None  #: OpenAI: the uploaded JSONL file

    @property
    def open(self) -> bool:
        """Not yet collected: a run that needs its items polls it."""
        return self.state != BatchState.COLLECTED


def _record(value: Any) -> BatchRecord | None:
    """A record read back, or None when the file is not one (never raises)."""
    if not isinstance(value, dict):
        return None
    try:
        ids = value["custom_ids"]
        record = BatchRecord(provider=str(value["provider"]), label=str(value["label"]),
                             batch_id=str(value["batch_id"]), custom_ids=[str(i) for i in ids],
                             round=int(value["round"]), created_at=float(value["created_at"]),
                             state=str(value.get("state", BatchState.CREATED)),
                             counts={str(k): int(v) for k, v in dict(value.get("counts") or {}).items()},
                             input_file_id=value.get("input_file_id"))
    except (KeyError, TypeError, ValueError):
        return None
    return record if SAFE_ID.match(record.batch_id) and isinstance(ids, list) else None


class Ledger:
    """The batch records of one cache folder (``shared``) and one run folder's ``batches.json``."""

    def __init__(self, shared: Path | None, run_dir: Path) -> None:
        self.shared = shared  # None when the cache is disabled: the run folder is then the only record
        self.run_file = run_dir / "batches.json"
        self.mine: dict[str, BatchRecord] = {}  # the batches this run created or resumed, by id
        self._lock = threading.Lock()

    def _path(self, record: BatchRecord) -> Path | None:
        if self.shared is None:
            return None
        return self.shared / f"{record.provider}-{record.batch_id}.json"

    def save(self, record: BatchRecord) -> None:
        """Write the record (shared folder, then the run folder's list), atomically."""
        with self._lock:
            self.mine[record.batch_id] = record
            path = self._path(record)
            if path is not None:
                write_json(path, asdict(record))
            write_json(self.run_file, {"updated_at": time.time(),
                                       "batches": [asdict(r) for r in self.mine.values()]})

    def open_records(self, provider: str, label: str) -> list[BatchRecord]:
        """Batches not yet collected for this endpoint, oldest first (shared folder, else the run folder)."""
        found: dict[str, BatchRecord] = {}
        for value in self._read_all():
            record = _record(value)
            if record and record.open and record.provider == provider and record.label == label:
                found[record.batch_id] = record
        return sorted(found.values(), key=lambda r: r.created_at)

    def _read_all(self) -> list[Any]:
        values: list[Any] = []
        if self.shared is not None and self.shared.is_dir():
            for path in sorted(self.shared.glob("*.json")):
                values.append(_load(path))
        if self.run_file.is_file():
            data = _load(self.run_file)
            if isinstance(data, dict) and isinstance(data.get("batches"), list):
                values.extend(data["batches"])
        return values


def _load(path: Path) -> Any:
    """A JSON file's value, or None when it is unreadable, too large or not JSON."""
    try:
        if path.stat().st_size > RECORD_LIMIT:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
