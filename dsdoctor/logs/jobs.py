"""How a big log is shared between cores: whether to fork scan workers, how many, and how each
reads its byte range. Kept apart from parallel.py (the workers and the merge) so that scanning an
ordinary log imports none of that machinery (start-up, issue 13)."""

from __future__ import annotations

import os
import sys

PARALLEL_MIN_BYTES = 64 << 20  # smaller files are scanned in one process (forking costs ~20 ms)


def default_jobs() -> int:
    """Workers for a big file: both cores of a typical node's login shell, at most 2."""
    return max(1, min(os.cpu_count() or 1, 2))


def fork_available() -> bool:
    # macOS lists fork, but forking a process that may hold system framework threads is unsafe
    return hasattr(os, "fork") and sys.platform != "darwin"


class PositionedReader:
    """``readinto`` over ``os.pread`` of an inherited descriptor, from ``offset`` on (the forked
    workers share the parent's file description, so they must not move its offset)."""

    def __init__(self, fd: int, offset: int):
        self.fd = fd
        self.offset = offset

    def readinto(self, view: memoryview) -> int:
        n = os.preadv(self.fd, [view], self.offset)
        self.offset += n
        return n
