"""DS325: explicit ZeRO-3 bucket sizes far from the hidden-size formulas (the Transformers guide).

The Trainer's ``"auto"`` for ZeRO-3 (``transformers.integrations.deepspeed``,
``HfTrainerDeepSpeedConfig.trainer_config_finalize``) fills, from the model's hidden size h:
``reduce_bucket_size = h*h``, ``stage3_prefetch_bucket_size = int(0.9*h*h)`` and
``stage3_param_persistence_threshold = 10*h``; the guide's non-Trainer ZeRO Inference example
(t0.py) writes the same formulas by hand. A value written as a number that is more than
:data:`FAR` times larger or smaller than its formula was sized for another model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import as_real, finding, fmt_number, lintable
from dsdoctor.diagnose.checks.runfacts import zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

#: How far (as a factor either way) a bucket may be from its formula before DS325 speaks.
FAR = 10.0
#: A too-large bucket below this many elements (200 MB in 16-bit) holds too little to matter.
MATERIAL_BUCKET = 100_000_000


def formulas(h: int) -> dict[str, int]:
    """The Trainer's ZeRO-3 "auto" values for hidden size h."""
    return {"reduce_bucket_size": h * h,
            "stage3_prefetch_bucket_size": int(0.9 * h * h),
            "stage3_param_persistence_threshold": 10 * h}


def _formula_text(key: str) -> str:
    return {"reduce_bucket_size": "hidden_size^2",
            "stage3_prefetch_bucket_size": "0.9 x hidden_size^2",
            "stage3_param_persistence_threshold": "10 x hidden_size"}[key]


def zero3_buckets_vs_hidden(ctx: Context, rule: Any) -> Iterator[Finding]:
    if lintable(ctx) is None or zero_stage(ctx) != 3:
        return
    h = getattr(ctx.model, "hidden_size", None)
    if not isinstance(h, int) or h <= 0:
        written = [k for k in formulas(1) if as_real(ctx.cfg_get(f"zero_optimization.{k}"))]
        if written:
            ctx.missing(rule.code, "the ZeRO-3 bucket sizes against the model's hidden size",
                        "--model PATH")
        return
    trainer = bool(ctx.run.value("uses_trainer"))
    model_path = getattr(ctx.model, "path", "config.json")
    for key, want in formulas(h).items():
        path = f"zero_optimization.{key}"
        v = as_real(ctx.cfg_get(path))
        if v is None or v <= 0 or want <= 0 or (1 / FAR) <= v / want <= FAR:
            continue
        ratio = v / want
        if ratio > 1 and not key.endswith("threshold") and v < MATERIAL_BUCKET:
            continue
        new: Any = "auto" if trainer else want
        yield finding(
            f"{path} is {fmt_number(v)}, {ratio:.3g}x the {_formula_text(key)} = {want:,} that "
            f"the Trainer's and Accelerate's \"auto\" fill derives from this model's "
            f"hidden_size {h} ({model_path}): "
            + ("buckets this much larger hold GPU memory for no gain" if ratio > 1 else
               "buckets this much smaller split communication into many small messages")
            + ("; the persistence threshold keeps parameters below it unpartitioned"
               if key.endswith("threshold") else "") + ".",
            path=path,
            fix=(f"set {path} from {fmt_number(v)} to \"auto\" (the Trainer fills {want:,} for "
                 f"this model)" if trainer else
                 f"set {path} from {fmt_number(v)} to {want} ({_formula_text(key)})"),
            change={"op": "set", "path": path, "old": ctx.cfg_get(path), "new": new})
