"""Large buffers go back to the system when freed (``wildtrace.memory``), in a real process.

Each case is a fresh interpreter: it frees one large block (which, left alone, raises
glibc's threshold above the blocks that follow), then makes 80 blocks of 512 KiB, frees
every other one and reports how much of its resident memory went back. With the threshold
fixed each freed block is unmapped; without it they are holes in the heap that stay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wildtrace.memory import return_large_buffers

ROOT = Path(__file__).resolve().parents[2]
BLOCKS, SIZE = 80, 512 * 1024

SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from wildtrace.memory import return_large_buffers

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

fixed = return_large_buffers() if sys.argv[2] == "fixed" else None
first = b"d" * (4 * 1024 * 1024)  # a document
del first
blocks = [bytes([65 + i % 26]) * int(sys.argv[3]) for i in range(int(sys.argv[4]))]
before = rss_kb()
del blocks[::2]
print(json.dumps({"fixed": fixed, "returned_kb": before - rss_kb()}))
"""


def freed(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc's own defaults
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), mode, str(SIZE), str(BLOCKS)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_large_buffers_leave_the_process():
    half = BLOCKS // 2 * SIZE // 1024
    fixed, default = freed("fixed"), freed("default")
    assert fixed["fixed"] is True
    assert fixed["returned_kb"] >= 0.9 * half  # every freed block unmapped
    assert default["returned_kb"] < 0.2 * half  # the control: the same frees, held by the heap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_setting_it_twice_is_harmless():
    assert (return_large_buffers(), return_large_buffers()) == (True, True)  # glibc takes the same value again
