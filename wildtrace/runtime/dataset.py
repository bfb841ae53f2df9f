"""Reading the tasks file and measuring the corpus, once, before any request.

Every check that can fail on the data runs here, up front: a run that would die on task
300 after paying for 299 answers must instead die before the first request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from wildtrace.core.caps import count_ideographs
from wildtrace.core.tasks import DatasetError, Task, parse_tasks, records_of, select, where
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
#: tasks that use the document, its measurement and its text (runtime/plan.py decides its caps
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


def read_records(path: Path) -> list:
    """Decode a tasks file (``dataset.tasks``): JSON (list, or object with tasks/data) or JSON Lines."""
    try:
        raw = input_file(path, "dataset.tasks", "tasks file").read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the tasks file (dataset.tasks): {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 (dataset.tasks): {exc}") from None
    try:
        return list(records_of(json.loads(text), str(path)))
    except json.JSONDecodeError as whole:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if len(lines) < 2:
            raise DatasetError(f"{path}: malformed JSON: {whole}") from None
        records = []
        for n, line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: line {n}: malformed JSON Lines record: {exc}") from None
        return records


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
    records = read_records(tasks_path)
    tasks = select(parse_tasks(records, str(tasks_path)), ids, limit, str(tasks_path))
    index_of = {str(r.get("question_id")): i for i, r in enumerate(records) if isinstance(r, dict)}
    wanted: dict[str, tuple[Path, str]] = {}  # corpus_file → (path, where its first task is), in task order
    users: dict[str, list[Task]] = {}  # corpus_file → the tasks that use it, in task order
    for task in tasks:
        users.setdefault(task.corpus_file, []).append(task)
        if task.corpus_file not in wanted:
            i = index_of.get(task.question_id, 0)
            at = where(str(tasks_path), i, records[i])
            wanted[task.corpus_file] = (resolve_corpus_file(corpus, task.corpus_file, at), at)
    # Reading and hashing release the interpreter lock: two threads measure the 230 MB
    # benchmark corpus in 0.29 s instead of 0.39 (four are no faster on 2 cores). map()
    # raises the first failure in task order, as the loop it replaced did.
    with ThreadPoolExecutor(max_workers=min(MEASURE_THREADS, len(wanted) or 1)) as pool:
        measured = pool.map(lambda name: measure(*wanted[name], users[name], step), wanted)
        documents = dict(zip(wanted, measured, strict=True))
    return Dataset(tasks=tasks, documents=documents, tasks_path=tasks_path,
                   tasks_sha256=hashlib.sha256(tasks_path.read_bytes()).hexdigest(), corpus_dir=corpus)
