"""Reading the tasks file and measuring the corpus, once, before any request.

Every check that can fail on the data runs here, up front: a run that would die on task
300 after paying for 299 answers must instead die before the first request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from wildtrace.core.caps import count_ideographs
from wildtrace.core.tasks import DatasetError, Task, records_of, select_records, where
from wildtrace.files import file_kind, resolve_corpus_file

#: Threads measuring the corpus at once.
MEASURE_THREADS = 2


@dataclass(frozen=True)
class DocumentInfo:
    """What the caps rule and provenance need from a corpus file, without its text."""

    path: Path
    chars: int
    ideographs: int
    sha256: str


#: What else is done with a document while its text is in memory for measuring: it gets the
#: tasks that use the document, its measurement and its text (runtime/run/plan.py decides its caps
#: and makes its answer requests there, so a document is read once for the plan). Called from the
#: measuring threads.
DocumentStep = Callable[[list[Task], DocumentInfo, str], None]


@dataclass(frozen=True)
class Dataset:
    """The selected tasks, their measured documents, and the tasks file's identity."""

    tasks: list[Task]
    documents: dict[str, DocumentInfo]  # by corpus_file as written in the task
    tasks_path: Path
    tasks_sha256: str
    corpus_dir: Path

    def document(self, task: Task) -> DocumentInfo:
        """The measured document of a task."""
        return self.documents[task.corpus_file]


def input_file(path: str | Path, field: str, what: str = "file") -> Path:
    """``path`` when it names a regular file; else a DatasetError naming ``field`` and what stands there.

    Checked before a read: a directory, a FIFO (whose read blocks forever), a NUL byte, a
    name too long or a symlink loop would otherwise surface as a traceback, or a hang.
    """
    kind = file_kind(path)
    if kind == "file":
        return Path(path)
    if kind is None:
        raise DatasetError(f"{path}: {what} not found ({field})")
    return _refused(path, field, kind)


def input_folder(path: str | Path, field: str, what: str = "folder") -> Path:
    """``path`` when it names a directory; else a DatasetError naming ``field``."""
    kind = file_kind(path)
    if kind == "is a directory, not a file":
        return Path(path)
    if kind is None:
        raise DatasetError(f"{path}: {what} not found ({field})")
    return _refused(path, field, "is a file, not a folder" if kind == "file" else kind.replace(", not a file", ""))


def _refused(path: str | Path, field: str, problem: str) -> Path:
    shown = repr(str(path)) if "\0" in str(path) else str(path)
    raise DatasetError(f"{field}: {shown} {problem}")


#: A tasks file in JSON (a list, or an object holding one) is parsed whole, which takes about six times
#: its size in memory: past this it is refused. JSON Lines is read a line at a time, at any size.
MAX_JSON_BYTES = 64 * 2**20


def iter_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(index, record) of a tasks file (``dataset.tasks``): JSON Lines a line at a time, or JSON (a list, or an
    object with tasks/data) parsed whole up to MAX_JSON_BYTES."""
    input_file(path, "dataset.tasks", "tasks file")
    try:
        with path.open("rb") as f:
            if not _is_json_lines(f):
                yield from enumerate(_whole(f, path))
                return
            index = 0
            for n, line in enumerate(f, start=1):
                if line.strip():
                    yield index, _record_at(line.removeprefix(BOM) if index == 0 else line, n, path)
                    index += 1
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the tasks file (dataset.tasks): {exc.strerror or exc}") from None


#: UTF-8's byte-order mark, which some editors write first.
BOM = b"\xef\xbb\xbf"


def _is_json_lines(f: BinaryIO) -> bool:
    """Whether the file is JSON Lines: its first line a whole task object, and another line after it.
    Reads at most MAX_JSON_BYTES of the first line; ``f`` is back at its start."""
    line = f.readline(MAX_JSON_BYTES + 1)
    while line and not line.strip():
        line = f.readline(MAX_JSON_BYTES + 1)
    try:
        record = json.loads(line.removeprefix(BOM))
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    more = False
    if isinstance(record, dict) and not isinstance(record.get("tasks", record.get("data")), list):
        more = any(rest.strip() for rest in iter(lambda: f.readline(4096), b""))
    f.seek(0)
    return more


def _whole(f: BinaryIO, path: Path) -> Sequence[Any]:
    """The records of a JSON tasks file read whole (refused past MAX_JSON_BYTES, naming both sizes)."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise DatasetError(f"{path}: the tasks file (dataset.tasks) is {size:,} bytes of JSON, over the "
                           f"{MAX_JSON_BYTES:,} bytes ({MAX_JSON_BYTES // 2**20} MiB) a JSON file is read whole up "
                           "to; write it as JSON Lines (one task a line), read a line at a time at any size")
    text = _text(f.read(), path).removeprefix("\ufeff")
    try:
        return records_of(json.loads(text), str(path))
    except json.JSONDecodeError as whole:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if len(lines) < 2:
            raise DatasetError(f"{path}: malformed JSON: {whole}") from None
        for n, line in lines:  # JSON Lines whose first line is not a record: name the first bad line
            _record_at(line.encode(), n, path)
        raise DatasetError(f"{path}: malformed JSON: {whole}") from None


def _text(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 (dataset.tasks): {exc}") from None


def _record_at(line: bytes, n: int, path: Path) -> Any:
    """The record on line ``n`` of a JSON Lines file."""
    try:
        return json.loads(_text(line, path))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: line {n}: malformed JSON Lines record: {exc}") from None


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_document(path: Path) -> str:
    """The document exactly as the file holds it: strict UTF-8, no newline translation."""
    return path.read_bytes().decode("utf-8")


def measure(path: Path, at: str, tasks: Sequence[Task] = (), step: DocumentStep | None = None) -> DocumentInfo:
    """Length in characters, ideographs in the CJK window, sha256 of the bytes; then ``step``, if given."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{at}: corpus file {path} cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{at}: corpus file {path} is not UTF-8 ({exc})") from None
    digest = hashlib.sha256(raw).hexdigest()
    del raw
    info = DocumentInfo(path=path, chars=len(text), ideographs=count_ideographs(text), sha256=digest)
    if step is not None:
        step(list(tasks), info, text)
    return info


def load_dataset(tasks_file: str | Path, corpus_dir: str | Path, ids: Sequence[str] | None = None,
                 limit: int | None = None, step: DocumentStep | None = None) -> Dataset:
    """Read, validate and select tasks, then measure every corpus file they use (and ``step`` each, if given)."""
    tasks_path, corpus = Path(tasks_file), Path(corpus_dir)
    if file_kind(corpus) is None:
        raise DatasetError(f"{corpus}: corpus folder not found (dataset.corpus); for dataset=wildtrace, fetch the "
                           "release first: python -m wildtrace.download (or point WILDTRACE_DATA_DIR at an existing "
                           "copy)")
    input_folder(corpus, "dataset.corpus", "corpus folder")
    chosen = select_records(iter_records(tasks_path), str(tasks_path), ids, limit)
    tasks = [task for _, task in chosen]
    wanted: dict[str, tuple[Path, str]] = {}  # corpus_file → (path, where its first task is), in task order
    users: dict[str, list[Task]] = {}  # corpus_file → the tasks that use it, in task order
    for i, task in chosen:
        users.setdefault(task.corpus_file, []).append(task)
        if task.corpus_file not in wanted:
            at = where(str(tasks_path), i, {"question_id": task.question_id})
            wanted[task.corpus_file] = (resolve_corpus_file(corpus, task.corpus_file, at), at)
    # Reading and hashing release the interpreter lock: two threads measure the 230 MB
    # benchmark corpus in 0.29 s instead of 0.39 (four are no faster on 2 cores). map()
    # raises the first failure in task order, as the loop it replaced did.
    with ThreadPoolExecutor(max_workers=min(MEASURE_THREADS, len(wanted) or 1)) as pool:
        measured = pool.map(lambda name: measure(*wanted[name], users[name], step), wanted)
        documents = dict(zip(wanted, measured, strict=True))
    return Dataset(tasks=tasks, documents=documents, tasks_path=tasks_path,
                   tasks_sha256=file_sha256(tasks_path), corpus_dir=corpus)
