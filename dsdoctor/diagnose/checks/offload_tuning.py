"""Tuning of ZeRO-Offload that the Transformers DeepSpeed guide names (ZeRO-2 section):
``round_robin_gradients`` for CPU offload at stages 1-2 (DS231)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.diagnose.checks.runfacts import offload_device, world_size, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

_KEY = "zero_optimization.round_robin_gradients"


def round_robin_gradients(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS231: ZeRO-1/2 with optimizer offload, several ranks or accumulation steps, and
    round_robin_gradients off: the gradient copies to CPU are not spread over the ranks."""
    if ctx.ds is None or ctx.ds_source == "log":
        return
    stage, dev = zero_stage(ctx), offload_device(ctx, "optimizer")
    if stage not in (1, 2) or dev is None or ctx.cfg_get(_KEY) is True:
        return
    accum = ctx.run.value("grad_accum")
    ranks = world_size(ctx)
    if ranks is None:
        ctx.missing(rule.code, "the number of data-parallel ranks (round robin spreads over them)",
                    "a log with the world size, --world-size or --env")
        return
    if ranks <= 1:
        return  # one data-parallel rank: DeepSpeed's round-robin reorder leaves the order as is
    why = [f"{ranks} ranks"] + \
          [f"{accum} accumulation steps" for _ in [0] if isinstance(accum, int) and accum > 1]
    state = "false" if ctx.cfg_has(_KEY) else "not set"
    yield finding(
        f"ZeRO-{stage} offloads the optimizer to {dev} with {' and '.join(why)}, and "
        f"{_KEY} is {state}: DeepSpeed then copies each rank's gradients to CPU memory without "
        f"spreading the copies over the ranks. The Transformers guide (ZeRO-2): "
        f"round_robin_gradients (DeepSpeed 0.4.4 and later) parallelizes those copies for CPU "
        f"offload, and the gain grows with the accumulation steps and the GPU count.",
        fix=f"set {_KEY} to true (a speed-up only: measure the step time before and after)",
        path=_KEY if ctx.cfg_has(_KEY) else "zero_optimization.offload_optimizer.device",
        change={"op": "set", "path": _KEY, "old": ctx.cfg_get(_KEY), "new": True},
        severity="info")


__all__ = ["round_robin_gradients"]
