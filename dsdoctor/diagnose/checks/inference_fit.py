"""DS233: ZeRO Inference (stage 3, nothing trained) whose weights do not fit the GPUs (the
Transformers DeepSpeed guide, non-Trainer ZeRO Inference: T0_3B needs about 15 GB of GPU memory,
T0 (11B) about 50 GB, so 2-4 GPUs unless one has 80 GB; or a small GPU and much CPU RAM with
offload_param). Inference holds no gradients or optimizer states: the weights, divided over the
GPUs by ZeRO-3, plus the layer being gathered, are a floor (activations, the CUDA context and
DeepSpeed's prefetch buffers come on top)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, param_count
from dsdoctor.diagnose.checks.memory import _gpus_per_node
from dsdoctor.diagnose.checks.runfacts import (
    gpu_memory_bytes,
    offload_device,
    precision,
    world_size,
    zero_stage,
)
from dsdoctor.diagnose.checks.zero import inference_only
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

#: The weights fit when the floor takes at most this share of one GPU.
FIT_SHARE = 0.9


def zero_inference_does_not_fit(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS233: the ZeRO-3 inference floor (weights / GPUs + one gathered layer) overflows a GPU."""
    if zero_stage(ctx) != 3 or offload_device(ctx, "param") or not inference_only(ctx):
        return
    total, largest, source = param_count(ctx)
    gpu = gpu_memory_bytes(ctx)
    if not total or not gpu:
        if not ctx.files:
            ctx.missing(rule.code, "whether the ZeRO Inference weights fit the GPUs",
                        "--model PATH" if not total else "--env snapshot.json")
        return
    prec = precision(ctx)
    width = 2 if prec in ("fp16", "bf16") else 4
    dtype = prec if width == 2 else "fp32 (the config enables neither fp16 nor bf16)"
    gpus = world_size(ctx) or _gpus_per_node(ctx)[0]
    layer = width * (largest or 0)
    need = width * total // gpus + layer
    if need <= gpu:
        return
    enough = math.ceil(width * total / max(FIT_SHARE * gpu - layer, 1))
    half = ("; or enable bf16 on Ampere or newer GPUs, which halves the weights (fp16 too, but "
            "it overflows on bf16-pretrained models such as T5)" if width == 4 else "")
    yield finding(
        f"This run only infers ({inference_only(ctx)}) with ZeRO-3 on {gpus} GPU(s): the "
        f"{total:,} parameters ({source}) in {dtype} take {gib(width * total)}, "
        f"{gib(width * total // gpus)} per GPU, plus {gib(layer)} for the layer being gathered: "
        f"{gib(need)} against {gib(gpu)} on one GPU, so loading stops with a CUDA OOM. This is a "
        f"floor: activations, the CUDA context and the prefetch buffers come on top (the "
        f"Transformers guide: T0_3B needs about 15 GB, T0 (11B) about 50 GB).",
        fix=f"run on at least {enough} such GPUs (ZeRO-3 divides the weights by their count), or "
            f"add \"offload_param\": {{\"device\": \"cpu\", \"pin_memory\": true}} to "
            f"zero_optimization (a small GPU and enough CPU RAM, slower){half}",
        path="zero_optimization.stage", severity="warning")


__all__ = ["zero_inference_does_not_fit"]
