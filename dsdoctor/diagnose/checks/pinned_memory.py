"""Page-locked (pinned) host memory of CPU offload, for DS203 and DS106 (S22).

The Transformers DeepSpeed guide: ``pin_memory: true`` speeds CPU<->GPU transfers, but pinned
memory is unavailable to other processes. The kernel cannot swap page-locked pages out, so a
node whose offload need passes its RAM but fits RAM + swap survives with pageable buffers and is
OOM-killed with pinned ones (oobabooga/textgen#969: "pin_memory fills ram quickly and causes an
oom (returns -9) while leaving the swap untouched").

What DeepSpeed pins (read in DeepSpeed 0.15.4 and 0.19.8, ``get_accelerator().pin_memory``):
- ZeRO-1/2, ``offload_optimizer.pin_memory``: each rank's fp32 master-weight partition and its
  fp32 gradient partition (stage_1_and_2.py), 8 bytes per parameter (0.17+ adds a 16-bit
  staging buffer: 2 more);
- ZeRO-3, ``offload_optimizer.pin_memory``: the flat fp32 gradient partition buffer (stage3.py
  ``grad_partitions_flat_buffer``), 4 bytes per parameter;
- ZeRO-3, ``offload_param.pin_memory``: the 16-bit parameter partitions kept on CPU
  (partition_parameters.py), 2 bytes per parameter.
The Adam moments are not pinned. Each rank pins its 1/world share, so a node pins
``bytes x parameters / nodes``. These are lower bounds: PyTorch's pinned allocator may round
each buffer up.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsdoctor.diagnose.checks.common import gib, truthy
from dsdoctor.diagnose.checks.runfacts import offload_device
from dsdoctor.facts.context import Context

OPT_KEY = "zero_optimization.offload_optimizer.pin_memory"
PARAM_KEY = "zero_optimization.offload_param.pin_memory"


@dataclass(frozen=True)
class Pinned:
    """Host bytes one node page-locks for CPU offload, and the keys that pin them."""

    bytes_per_node: int
    keys: tuple[str, ...]
    what: str


def pinned_offload(ctx: Context, stage: int, total_params: int, nodes: int) -> Pinned | None:
    """The pinned part of the offload need, or None when nothing is pinned (the default)."""
    per_param = 0
    keys: list[str] = []
    parts: list[str] = []
    if offload_device(ctx, "optimizer") == "cpu" and truthy(ctx.cfg_get(OPT_KEY)):
        per_param += 4 if stage >= 3 else 8
        keys.append(OPT_KEY)
        parts.append("the fp32 gradient partitions" if stage >= 3
                     else "the fp32 master weights and gradients")
    if stage >= 3 and offload_device(ctx, "param") == "cpu" and truthy(ctx.cfg_get(PARAM_KEY)):
        per_param += 2
        keys.append(PARAM_KEY)
        parts.append("the 16-bit parameter partitions")
    if not per_param or total_params <= 0:
        return None
    return Pinned(per_param * total_params // max(nodes, 1), tuple(keys), " and ".join(parts))


def swap_bytes(ctx: Context) -> int | None:
    """The node's swap from the env snapshot (None when unknown)."""
    v = ctx.env_get("cpu.swap_total_bytes")
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def pinned_sentence(p: Pinned) -> str:
    """'Of that, at least X is page-locked ...' for a finding's message."""
    return (f"At least {gib(p.bytes_per_node)} per node of it is page-locked ({' and '.join(p.keys)} "
            f"true pins {p.what}): the kernel cannot swap those pages out and no other process "
            f"can use them.")


def pin_pushes_past(need: int, ram: int, swap: int | None, in_container: bool) -> bool:
    """Whether pinning is what makes the need fail: it passes RAM but fits RAM + swap, where
    pageable offload buffers could spill (not judged under a cgroup limit, whose swap allowance
    the snapshot does not record)."""
    return (not in_container and swap is not None and swap > 0 and ram < need <= ram + swap)


__all__ = ["OPT_KEY", "PARAM_KEY", "Pinned", "pin_pushes_past", "pinned_offload",
           "pinned_sentence", "swap_bytes"]
