"""File helpers shared by runtime and tracking: one atomic JSON writer, one corpus-path resolver.

Both layers import from here, so neither has to import the other.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from wildtrace.core.tasks import DatasetError

#: mkstemp creates 0600 files; run files should get the user's usual permissions.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
CORPUS_PREFIX = "corpus/"


def write_json(path: Path, data: Any) -> Path:
    """Write JSON atomically (temporary file + rename), so no reader ever sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=2, allow_nan=False, default=str)
            fh.write("\n")
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def resolve_corpus_file(corpus_dir: Path, corpus_file: str, at: str) -> Path:
    """``corpus_file`` inside ``corpus_dir``, with or without the release's ``corpus/`` prefix.

    Refuses absolute paths and anything that resolves outside the corpus folder.
    """
    root = corpus_dir.resolve()
    relative = Path(corpus_file)
    if relative.is_absolute():
        raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r} is an absolute path; it must lie inside {root}")
    candidates = [relative]
    if corpus_file.startswith(CORPUS_PREFIX):
        candidates.insert(0, Path(corpus_file[len(CORPUS_PREFIX):]))
    for candidate in candidates:
        path = (root / candidate).resolve()
        if not path.is_relative_to(root):
            raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r} leaves the corpus folder {root}")
        if path.is_file():
            return path
    raise DatasetError(f"{at}: field 'corpus_file': corpus file {corpus_file!r} not found in {root}")
