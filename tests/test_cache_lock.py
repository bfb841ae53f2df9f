"""Issue 19, item 8: the cache's per-call lock file is opened first and its folder made only
when missing (one system call on the event loop per call instead of three), with the same
outcomes: the lock is held, a folder removed meanwhile is made again, and a cache that cannot
hold lock files locks nothing and the call still goes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
from pathlib import Path

import pytest

from wildtrace.runtime.cache import Cache

KEY = "ab" + "0" * 62


def held_elsewhere(path: Path) -> bool:
    """Whether another open file description holds ``path``'s flock (flock locks per description)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def prepare(cache_dir: Path, state: str) -> None:
    if state == "folder made before":
        (cache_dir / "locks" / KEY[:2]).mkdir(parents=True)
    elif state == "folder removed after a first lock":
        asyncio.run(_hold(Cache(cache_dir)))
        shutil.rmtree(cache_dir / "locks")


async def _hold(cache: Cache) -> bool:
    async with cache.lock(KEY):
        return held_elsewhere(cache.directory / "locks" / KEY[:2] / f"{KEY}.lock")


@pytest.mark.parametrize("state", ["new cache", "folder made before", "folder removed after a first lock"])
def test_the_lock_is_held_whatever_its_folder_was(tmp_path: Path, state: str) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    prepare(cache_dir, state)
    assert asyncio.run(_hold(Cache(cache_dir))) is True
    assert not held_elsewhere(cache_dir / "locks" / KEY[:2] / f"{KEY}.lock")  # released on exit


def test_a_cache_that_cannot_hold_lock_files_locks_nothing(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "locks").write_text("a file where the folder would be")
    ran = []

    async def body() -> None:
        async with Cache(cache_dir).lock(KEY):
            ran.append(True)

    asyncio.run(body())
    assert ran == [True]
    assert (cache_dir / "locks").is_file()
