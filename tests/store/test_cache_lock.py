"""The cache's per-call lock file is opened first and its folder made only
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

from wildtrace.runtime.store.cache import Cache

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


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_holder_cancelled_after_storing_releases_the_lock_and_removes_its_file(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    path = cache.directory / "locks" / KEY[:2] / f"{KEY}.lock"

    async def main() -> tuple[bool, bool]:
        holding = asyncio.Event()

        async def holder() -> None:
            async with cache.lock(KEY):
                cache.put(KEY, {"v": 1}, {"payload": {}, "http_status": 200, "attempts": 1})
                holding.set()
                await asyncio.sleep(30)

        task = asyncio.create_task(holder())
        await holding.wait()
        held = held_elsewhere(path)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return held, path.exists()

    before = open_fds()
    held, lock_file_left = asyncio.run(main())
    assert held and not lock_file_left  # held while stored; removed and released on the way out
    assert open_fds() <= before


def test_a_task_cancelled_while_its_lock_file_opens_leaves_no_descriptor_open(tmp_path: Path, monkeypatch) -> None:
    """The lock file opens in the thread pool; a task cancelled meanwhile closes what arrives after it."""
    import threading
    import time

    opened, real_open = threading.Event(), Cache._open_lock

    def slow_open(path: Path) -> int | None:
        time.sleep(0.2)
        fd = real_open(path)
        opened.set()
        return fd

    monkeypatch.setattr(Cache, "_open_lock", staticmethod(slow_open))
    cache = Cache(tmp_path / "cache")
    ran = []

    async def main() -> None:
        async def body() -> None:
            async with cache.lock(KEY):
                ran.append(True)

        task = asyncio.create_task(body())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(opened.wait, 5)
        await asyncio.sleep(0.05)  # the callback that closes it runs on the loop

    before = open_fds()
    asyncio.run(main())
    assert ran == [] and opened.is_set()
    assert open_fds() <= before  # the descriptor that arrived after the cancel is closed
    assert not held_elsewhere(cache.directory / "locks" / KEY[:2] / f"{KEY}.lock")
