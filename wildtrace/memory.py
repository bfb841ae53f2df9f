"""Large buffers go back to the system when they are freed (glibc's malloc).

A run holds documents and request bodies of hundreds of kilobytes to megabytes for as long
as their call is in flight. glibc serves an allocation that large from its own mapping, but
raises that threshold to the size of each such block freed (up to 32 MB): after the first
document, every body came from the heap, whose freed holes stay resident. Fixing the
threshold (``mallopt(M_MMAP_THRESHOLD)``, which also turns the raising off) keeps each large
buffer its own mapping, unmapped when freed. Measured at full scale: the run's process peaked
at 154-158 MB without it and 104-106 MB with it; the harness's CPU stayed within its
run-to-run spread (17.2-19.5 s either way).

Set by the entry points (the job itself, so a sweep's worker processes set it too) and the
logging process, never by importing the library. Elsewhere (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import sys

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: glibc's own default threshold: blocks this large or larger are mapped on their own.
LARGE_BLOCK = 128 * 1024


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold at its default; True when it was set (False where there is no glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):  # no mallopt (musl): nothing to set
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) == 1
