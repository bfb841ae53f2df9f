"""File helpers shared by runtime and tracking: one atomic JSON writer, one corpus-path resolver.

Both layers import from here, so neither has to import the other.
"""

from __future__ import annotations

import errno
import json
import os
import stat
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


def file_kind(path: str | Path) -> str | None:
    """What stands at ``path``: "file" (a regular file, links followed), None (nothing), or what is wrong.

    Never raises: a NUL byte, a name too long, a symlink loop, a directory or a FIFO are
    answers (a FIFO would block a read forever), so a caller can name its field and stop.
    """
    try:
        mode = os.stat(path).st_mode
    except ValueError:
        return "the path holds a NUL byte"
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return "is not a regular file (a FIFO, socket or device)"


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
        try:
            path = (root / candidate).resolve()
        except RuntimeError as exc:  # a symlink loop (Python < 3.13; later ones stat it as ELOOP below)
            raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r}: a loop of symbolic links ({exc})") from None
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r}: cannot be resolved: {exc}") from None
        if not path.is_relative_to(root):
            raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r} leaves the corpus folder {root}")
        kind = file_kind(path)
        if kind == "file":
            return path
        if kind is not None:
            raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r}: {path} {kind}")
    raise DatasetError(f"{at}: field 'corpus_file': corpus file {corpus_file!r} not found in {root}")
