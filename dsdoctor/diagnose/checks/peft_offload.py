"""DS222: optimizer offload in a PEFT (LoRA) run, where it moves only the adapters' small optimizer
states to the CPU and slows every step (the PEFT DeepSpeed guide, caveat 2).

What ZeRO-Offload moves for the optimizer: per trainable parameter the fp32 master weight, Adam's
two moments (12 bytes) and, at ZeRO-2, the fp32 gradient partition (4 bytes); the frozen base
weights have none of these. Parameter offload (ZeRO-3 ``offload_param``) is another matter: it
moves the frozen base weights too, so it can save GPU memory in a PEFT run and is not flagged.
QLoRA with ZeRO-3 offload is DS210's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib1
from dsdoctor.diagnose.checks.qlora import _uses_peft
from dsdoctor.diagnose.checks.runfacts import offload_device, qlora, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

#: Bytes ZeRO-Offload moves to the CPU per trainable parameter (fp32 master + Adam m, v + grad).
OFFLOADED_BYTES_PER_TRAINABLE = 16
#: Above this the adapters' optimizer memory is worth offloading (a GPU of 16-24 GB notices it).
WORTH_OFFLOADING = 2 * 2**30


def peft_optimizer_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    dev = offload_device(ctx, "optimizer")
    stage = zero_stage(ctx)
    if dev is None or stage is None or not _uses_peft(ctx):
        return
    if stage == 3 and qlora(ctx).loaded_4bit:
        return  # DS210
    known = ctx.run.trainable_params
    if known is not None and isinstance(known.value, int):
        trainable = known.value
        moved = trainable * OFFLOADED_BYTES_PER_TRAINABLE
        if moved >= WORTH_OFFLOADING:
            return
        size = (f"{trainable / 1e6:.1f}M trainable parameters ({known.source.describe()}), so the "
                f"offload saves about {gib1(moved)} of GPU memory")
    else:
        size = ("the adapters' share is usually well under 1% of the model (PEFT's 'trainable "
                "params' line in the log gives the figure)")
    par = offload_device(ctx, "param")
    keep = (" Keep offload_param: it moves the frozen base weights, which does save GPU memory."
            if par else "")
    yield finding(
        f"This PEFT run offloads the optimizer to {dev} at ZeRO stage {stage}: ZeRO-Offload moves "
        f"only the optimizer states and gradients of the trainable (adapter) parameters, and "
        f"{size}, while every step now runs the optimizer on the CPU and copies gradients across "
        f"PCIe. The PEFT guide: with PEFT, CPU offload shrinks optimizer memory in CPU RAM, not "
        f"GPU memory.{keep}",
        path="zero_optimization.offload_optimizer.device",
        fix=f"set zero_optimization.offload_optimizer.device from \"{dev}\" to \"none\" (measure "
            f"the GPU memory of one step before and after)",
        change={"op": "set", "path": "zero_optimization.offload_optimizer.device", "old": dev,
                "new": "none"})
