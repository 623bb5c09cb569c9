"""DS247: DeepSpeed's leftover shared-memory buffers fill /dev/shm.

On the CPU accelerator DeepSpeed's allreduce goes through shared memory: each rank creates a
66 MiB buffer ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>``. Nothing unlinks
it: csrc/cpu/comm/shm.cpp defines shared_close (munmap + shm_unlink) and no release from 0.14.4 to
0.19.8 calls it, so every run leaves its buffers, finished or killed; run after run they fill
/dev/shm, and then the next run's buffers, DataLoader workers and NCCL's
shared memory find no room. The env snapshot's ``shm`` section (``dsdoctor env`` on the node)
counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding


def shm_filled_by_leftovers(ctx: Context, rule: Any) -> Iterator[Finding]:
    if not ctx.env:
        return
    # envinfo imports importlib.metadata: only when a snapshot is there to read
    from dsdoctor.facts.envinfo import shm_filled_by_deepspeed  # noqa: PLC0415

    said = shm_filled_by_deepspeed(ctx.env_get("shm"))
    if said is None:
        return
    yield finding(
        f"{said}. DeepSpeed's shared-memory allreduce (CPU accelerator) creates one 66 MiB buffer "
        "per rank and no DeepSpeed release to 0.19.8 removes it (shm.cpp's shared_close is never "
        "called): these are left by earlier runs, finished or killed. The next run's buffers "
        "(and DataLoader workers, NCCL) need that room.",
        fix="When no DeepSpeed job runs on this node, remove the leftovers: rm /dev/shm/deepspeed_* "
            "(in a container, a larger --shm-size gives more room too).")


__all__ = ["shm_filled_by_leftovers"]
