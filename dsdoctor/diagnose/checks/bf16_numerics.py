"""bf16 numerics the Transformers guide warns about: gradients accumulated in bf16 (DS218) and
gradient reductions in bf16 across several GPUs (DS219). Both are advice (info): the run works,
but loses precision the config can buy back.

What DeepSpeed does with ``data_types.grad_accum_dtype`` (runtime/engine.py,
``_do_optimizer_sanity_check``): with bf16 and ZeRO stage 1, ``"fp32"`` selects the
BF16_Optimizer, which accumulates gradients in fp32 (from 0.7.6; only without CPU offload from
0.10.1). Since 0.10.1 the ZeRO-1/2 and ZeRO-3 optimizers take it too (``gradient_accumulation_dtype``,
engine.py:2384 and 2466 at v0.19.5; stage_1_and_2.py:1105-1107 sums in it); before, stages 2/3
refused it ("must be equal to use ZeRO"). Without ZeRO, from 0.17.6 bf16 gradients are summed in
bf16 and fp32 is an "unsupported mix"; before, the BF16 wrapper summed them in fp32 by default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, show_json, version_tuple
from dsdoctor.diagnose.checks.runfacts import offload_device, precision, world_size, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

#: Sums of this many bf16 terms or more: each doubling of the terms can cost about one of bf16's 8
#: mantissa bits, so 8 terms may lose 3 of them. Fewer (2-4 micro-batches, 2-4 ranks) are the
#: everyday bf16 run, and saying so on every report would be noise.
MANY_TERMS = 8

ACCUM_KEY = "data_types.grad_accum_dtype"
#: The first release whose ZeRO-1/2 and ZeRO-3 optimizers accumulate in grad_accum_dtype.
ZERO_READS_ACCUM = (0, 10, 1)
#: The first release that sums a bf16 model's gradients in bf16 without ZeRO by default and
#: refuses fp32 accumulation there ("unsupported mix"); before it, no ZeRO meant DeepSpeed's
#: BF16 wrapper, accumulating in fp32 (get_data_types and _do_optimizer_sanity_check at v0.17.5).
NO_ZERO_SUMS_BF16 = (0, 17, 6)
COMM_KEY = "communication_data_type"


def _adding(ctx: Context, entry: str) -> str:
    """How to add ``entry`` (a DeepSpeed config entry) to this run's config. An Accelerate
    config that sets DeepSpeed through its own ``deepspeed_config`` keys has no place for it."""
    if ctx.ds_source == "accelerate" and getattr(ctx.ds, "synthesized", False):
        return (f"write the DeepSpeed settings to a JSON file with {entry} and name it in the "
                "Accelerate config's deepspeed_config_file (its deepspeed_config keys cannot hold "
                "it)")
    return f"add {entry} to the config"


def _accumulation_counts(ctx: Context, accum: Any) -> set[int]:
    """The run's accumulation count and any other its sources give: where they disagree, the
    fix of that conflict (DS109/DS311) decides which one the run will use."""
    counts = {accum.value}
    for c in ctx.run.conflicts:
        if c.fact == "grad_accum":
            counts |= {k.value for k in (c.kept, c.other) if isinstance(k.value, int)}
    return counts


def _dtype(v: Any) -> str | None:
    return v.strip().lower() if isinstance(v, str) and v.strip().lower() != "auto" else None


def bf16_grad_accumulation(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS218: bf16 with gradient accumulation, gradients summed in bf16."""
    if precision(ctx) != "bf16" or ctx.ds is None:
        return
    accum = ctx.run.grad_accum
    if accum is None or not isinstance(accum.value, int) or accum.value <= 1:
        return
    stage = zero_stage(ctx)
    if stage is None:
        return
    written = _dtype(ctx.cfg_get(ACCUM_KEY))
    if min(_accumulation_counts(ctx, accum)) < MANY_TERMS and not (written == "fp32" and stage >= 2):
        return
    steps = f"gradient_accumulation_steps {accum.value} ({accum.source.describe()})"
    offload = offload_device(ctx, "optimizer")
    version = version_tuple(ctx.ds_version)
    old_release = version is not None and version < ZERO_READS_ACCUM
    # Before 0.10.1, ZeRO-1 took the BF16_Optimizer for "fp32" with or without offload.
    if stage == 1 and (not offload or old_release):
        if written == "fp32":
            return
        yield finding(
            f"bf16 with {steps}: DeepSpeed sums the {accum.value} micro-batches' gradients in the "
            f"model's dtype unless {ACCUM_KEY} says otherwise ({show_json(ctx.cfg_get(ACCUM_KEY))} "
            f"here), and bf16 keeps 8 bits of mantissa, so small gradients are lost in the sum.",
            path=ACCUM_KEY if ctx.cfg_has(ACCUM_KEY) else "bf16",
            fix=(f"set {ACCUM_KEY} from {show_json(ctx.cfg_get(ACCUM_KEY))} to \"fp32\""
                 if ctx.cfg_has(ACCUM_KEY) else
                 _adding(ctx, '"data_types": {"grad_accum_dtype": "fp32"}') + " (ZeRO-1 then "
                 "uses DeepSpeed's BF16_Optimizer, which accumulates in fp32: 4 bytes per "
                 "parameter more GPU memory)"),
            change={"op": "set", "path": ACCUM_KEY, "old": ctx.cfg_get(ACCUM_KEY), "new": "fp32"})
        return
    if stage == 0:
        if version is not None and version < NO_ZERO_SUMS_BF16:
            return  # the BF16 wrapper accumulates in fp32 by default there
        if written == "fp32":
            return  # DeepSpeed refuses this mix at start-up; the run's own error says so
        yield finding(
            f"bf16 without ZeRO and {steps}: gradients are summed in bf16 (8 bits of mantissa; "
            f"DeepSpeed 0.17.6 and later). {ACCUM_KEY} \"fp32\" is not accepted without ZeRO "
            f"(DeepSpeed raises \"unsupported mix\"); ZeRO stage 1 is where it works.",
            path="zero_optimization.stage" if ctx.cfg_has("zero_optimization.stage") else "bf16",
            fix="set zero_optimization.stage to 1 and "
                + _adding(ctx, '"data_types": {"grad_accum_dtype": "fp32"}')
                + " (fp32 accumulation in the BF16_Optimizer), or accumulate fewer steps with a "
                "larger micro batch")
        return
    if version is None or version >= ZERO_READS_ACCUM:
        if written == "fp32":
            return  # the ZeRO optimizer sums the gradients in fp32
        release = (f"DeepSpeed {ctx.ds_version}" if ctx.ds_version_source != "default"
                   else "DeepSpeed 0.10.1 and later")
        yield finding(
            f"bf16 with {steps} and ZeRO stage {stage}: the micro-batches' gradients are summed "
            f"in bf16 (8 bits of mantissa) unless {ACCUM_KEY} says otherwise; {release} "
            f"accumulates in the dtype it names at every ZeRO stage.",
            path=ACCUM_KEY if ctx.cfg_has(ACCUM_KEY) else "bf16",
            fix=_adding(ctx, '"data_types": {"grad_accum_dtype": "fp32"}') + " (fp32 gradient "
                "buffers: more GPU memory), or accumulate fewer steps with a larger micro batch",
            change={"op": "set", "path": ACCUM_KEY, "old": ctx.cfg_get(ACCUM_KEY), "new": "fp32"})
        return
    # Before 0.10.1, stage 2/3: the ZeRO optimizer sums in the model's dtype and refuses any other
    # (engine.py _do_optimizer_sanity_check at v0.9.5 and v0.10.0).
    why = f"ZeRO stage {stage}"
    if written == "fp32":
        yield finding(
            f"{ACCUM_KEY} is \"fp32\" with bf16 and {why}: DeepSpeed {ctx.ds_version} accepts it "
            f"only at ZeRO stage 1 and refuses it at stage 2 or 3 at start-up (\"Model data type "
            f"and gradient accumulation data type must be equal to use ZeRO\").",
            path=ACCUM_KEY,
            fix=f"to accumulate in fp32 run ZeRO stage 1 (if the memory allows) or DeepSpeed 0.10.1 "
                f"or later; otherwise delete {ACCUM_KEY} and prefer fewer accumulation steps with "
                f"a larger micro batch")
        return
    yield finding(
        f"bf16 with {steps} and {why}: the gradient partitions are summed in bf16 (8 bits of "
        f"mantissa) over {accum.value} micro-batches. The guide's {ACCUM_KEY} \"fp32\" is read only "
        f"at ZeRO stage 1 before DeepSpeed 0.10.1; at stage {stage} this release refuses it at "
        f"start-up.",
        path="bf16",
        fix=("if the loss is noisier than in fp32, use ZeRO stage 1 (or DeepSpeed 0.10.1 or later) and "
             + _adding(ctx, '"data_types": {"grad_accum_dtype": "fp32"}')
             + " (if the memory allows), or accumulate fewer steps with a larger micro batch"))


def bf16_reductions(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS219: bf16 on several GPUs, gradients reduced in bf16 (communication_data_type unset)."""
    if precision(ctx) != "bf16" or ctx.ds is None:
        return
    n = world_size(ctx)
    if n is None or n < MANY_TERMS:
        return
    written = _dtype(ctx.cfg_get(COMM_KEY))
    if written == "fp32":
        return
    ws = ctx.run.world_size
    where = ws.source.describe() if ws is not None else "the world size"
    state = "not set" if not ctx.cfg_has(COMM_KEY) else f"{show_json(ctx.cfg_get(COMM_KEY))}"
    yield finding(
        f"bf16 on {n} GPUs ({where}) with {COMM_KEY} {state}: DeepSpeed reduces the gradients "
        f"across the {n} ranks in bf16, so each sum of {n} values keeps 8 bits of mantissa (bf16 "
        f"loses more than fp16 here). fp32 reductions cost twice the gradient traffic.",
        path=COMM_KEY if ctx.cfg_has(COMM_KEY) else "bf16",
        fix=(f"set {COMM_KEY} from {show_json(ctx.cfg_get(COMM_KEY))} to \"fp32\""
             if ctx.cfg_has(COMM_KEY) else _adding(ctx, f'"{COMM_KEY}": "fp32" (top level)'))
            + " if the loss is noisier than expected (the reductions then accumulate in fp32)",
        change={"op": "set", "path": COMM_KEY, "old": ctx.cfg_get(COMM_KEY), "new": "fp32"})
