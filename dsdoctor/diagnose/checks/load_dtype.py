"""DS232: a 16-bit run whose script loads the pretrained weights in fp32 (the Transformers
DeepSpeed guide, ZeRO-3: "if you can load the fp16 weights, specify torch_dtype=torch.float16 in
from_pretrained"). Below ZeRO-3 nothing partitions the load, so every process first holds the
whole model in fp32, twice its 16-bit size, before DeepSpeed casts it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, param_count, script_evidence
from dsdoctor.diagnose.checks.runfacts import package_version, precision, qlora, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

_TORCH = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


def fp32_load_for_16bit_run(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS232: from_pretrained without torch_dtype in a fp16/bf16 run below ZeRO-3."""
    prec, stage = precision(ctx), zero_stage(ctx)
    if prec not in _TORCH or stage not in (0, 1, 2) or qlora(ctx).loaded_4bit:
        return
    tf, where = package_version(ctx, "transformers")
    if (_major(tf) or 0) >= 5:
        return  # Transformers 5 loads the checkpoint's own dtype by default (dtype="auto")
    total = param_count(ctx)[0]
    for sf in ctx.scripts:
        typed = {d.site for d in sf.dtypes if d.key in ("torch_dtype", "dtype")}
        for site in sf.from_pretrained:
            if site in typed or site in sf.from_pretrained_splat:
                continue  # a dtype is given, or may come in through **kwargs
            size = (f" ({gib(4 * total)} in fp32 against {gib(2 * total)} in 16 bits for "
                    f"{total:,} parameters)" if total else "")
            tf_note = (f"Transformers {tf} ({where})" if tf else
                       "Transformers before 5 (give --env to say which)")
            yield finding(
                f"{sf.path}:{site.line} loads the pretrained weights without torch_dtype, so "
                f"{tf_note} builds the model in fp32{size}, although the run trains in {prec} at "
                f"ZeRO-{stage}: below ZeRO-3 nothing partitions the load, every process holds the "
                f"whole fp32 model until DeepSpeed casts it. The Transformers guide: if the 16-bit "
                f"weights fit one GPU, pass torch_dtype to from_pretrained.",
                fix=f"add torch_dtype={_TORCH[prec]} to the from_pretrained call at "
                    f"{sf.path}:{site.line} (the dtype the run trains in)",
                evidence=(script_evidence(site, sf.path),), severity="info")


__all__ = ["fp32_load_for_16bit_run"]
