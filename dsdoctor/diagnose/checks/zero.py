"""Lints of ZeRO stage and offload combinations (DS304-DS307), LAMB with offload (DS313) and the
ZeRO-3 16-bit save (DS314).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import (
    device_name,
    finding,
    show_json,
    truthy_arg,
    written_stage,
)
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Finding

# ---------------------------------------------------------------- DS304-DS307 stage / offload

def offload_param_below_stage3(ctx: Context, rule: Any) -> Iterator[Finding]:
    """offload_param only exists in ZeRO-3; below it DeepSpeed ignores it without a word."""
    dev = device_name(ctx.cfg_get("zero_optimization.offload_param.device"))
    stage = written_stage(ctx)
    if dev is None or stage is None or stage >= 3:
        return
    yield finding(
        f"zero_optimization.offload_param (device {show_json(dev)}) only exists in ZeRO stage 3, and this "
        f"config uses stage {stage}: DeepSpeed {ctx.ds_version} ignores it silently, so the "
        f"parameters stay on the GPU (expect the GPU memory of stage {stage}, not of "
        f"parameter offload).",
        path="zero_optimization.offload_param",
        fix=f"to offload parameters set zero_optimization.stage from {stage} to 3; otherwise "
            f"delete zero_optimization.offload_param (it does nothing at stage {stage})",
        change={"op": "delete", "path": "zero_optimization.offload_param",
                "old": ctx.cfg_get("zero_optimization.offload_param")})


def offload_optimizer_without_zero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """offload_optimizer with ZeRO disabled (stage 0): DeepSpeed still builds its CPU optimizer
    (engine.zero_use_cpu_optimizer reads the offload device, not the stage), on parameters that
    nothing moved off the GPU."""
    dev = device_name(ctx.cfg_get("zero_optimization.offload_optimizer.device"))
    stage = written_stage(ctx)
    if dev is None or stage is None or stage != 0:
        return
    written = ctx.cfg_has("zero_optimization.stage")
    typ = ctx.cfg_get("optimizer.type")
    torch_adam = truthy_arg(ctx.cfg_get("optimizer.params.torch_adam", False))
    breaks = True  # the run stops (error); only the offload is lost otherwise (warning)
    cpu_class = {"adam": "DeepSpeedCPUAdam", "adamw": "DeepSpeedCPUAdam",
                 "adagrad": "DeepSpeedCPUAdagrad", "lion": "DeepSpeedCPULion"}.get(
        typ.lower() if isinstance(typ, str) else "")
    if cpu_class and not (torch_adam and cpu_class == "DeepSpeedCPUAdam"):
        what = (f"DeepSpeed still builds {cpu_class} for the config's optimizer, but at stage 0 "
                f"nothing moves the parameters to the CPU, so the first optimizer step stops at "
                f"\"{cpu_class[9:]} param is on cuda:0 and must be 'cpu'\"")
    elif typ is None:
        what = ("the optimizer then comes from the script or the Trainer, and deepspeed.initialize "
                "refuses it (\"You are using ZeRO-Offload with a client provided optimizer\", "
                "DS111); with zero_force_ds_cpu_optimizer false it runs on the GPU and the offload "
                "does nothing")
    else:  # e.g. a torch.optim class: it runs on the GPU, only the offload is lost
        breaks = False
        what = "the optimizer states stay on the GPU and the offload does nothing"
    yield finding(
        f"zero_optimization.offload_optimizer (device {show_json(dev)}) needs ZeRO stage 1 or more, and "
        f"the stage is 0{'' if written else ' (zero_optimization.stage is not set; 0 is the default)'}: "
        f"{what}.",
        path="zero_optimization.stage" if written else "zero_optimization.offload_optimizer",
        severity="" if breaks else "warning",
        fix="set zero_optimization.stage from 0 to 2 (ZeRO-2 + optimizer offload, the usual "
            "ZeRO-Offload setup) or 3; or delete zero_optimization.offload_optimizer")


def nvme_without_path(ctx: Context, rule: Any) -> Iterator[Finding]:
    """NVMe offload without nvme_path: DeepSpeed has nowhere to swap."""
    for section in ("offload_param", "offload_optimizer"):
        base = f"zero_optimization.{section}"
        if device_name(ctx.cfg_get(f"{base}.device")) != "nvme":
            continue
        p = ctx.cfg_get(f"{base}.nvme_path")
        if isinstance(p, str) and p.strip() and p != "auto":
            continue
        yield finding(
            f"{base}.device is \"nvme\" but {base}.nvme_path is "
            f"{'missing' if p is None else show_json(p)}: ZeRO-Infinity swaps "
            f"{'parameters' if section == 'offload_param' else 'optimizer states'} to files "
            f"under that directory, and with none DeepSpeed fails when it creates the swapper.",
            path=f"{base}.nvme_path" if p is not None else f"{base}.device",
            fix=f"add \"nvme_path\": \"/local_nvme\" to {base} (a directory on a local NVMe "
                f"drive, not a network filesystem), or set device to \"cpu\"")


def nvme_below_stage3(ctx: Context, rule: Any) -> Iterator[Finding]:
    """NVMe optimizer offload (ZeRO-Infinity) needs stage 3."""
    stage = written_stage(ctx)
    if stage is None or stage >= 3:
        return
    if device_name(ctx.cfg_get("zero_optimization.offload_optimizer.device")) != "nvme":
        return
    yield finding(
        f"zero_optimization.offload_optimizer.device is \"nvme\" with ZeRO stage {stage}: NVMe "
        f"offload is ZeRO-Infinity, which exists in stage 3 only; stages 1 and 2 offload the "
        f"optimizer to CPU memory only.",
        path="zero_optimization.offload_optimizer.device",
        fix=f"set zero_optimization.stage from {stage} to 3, or set "
            f"zero_optimization.offload_optimizer.device from \"nvme\" to \"cpu\"")


# ------------------------------------------------------------ DS313 LAMB + optimizer offload

def lamb_with_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    """LAMB has no CPU implementation, so ZeRO-Offload cannot run it."""
    typ = ctx.cfg_get("optimizer.type")
    dev = device_name(ctx.cfg_get("zero_optimization.offload_optimizer.device"))
    if not isinstance(typ, str) or "lamb" not in typ.lower() or dev is None:
        return
    yield finding(
        f"optimizer.type is {show_json(typ)} with zero_optimization.offload_optimizer.device {show_json(dev)}: "
        f"ZeRO-Offload runs the optimizer step on the CPU and works with optimizers that have "
        f"both a CPU and a GPU implementation, except LAMB, which has none on the CPU.",
        path="optimizer.type",
        fix=f"set optimizer.type from {show_json(typ)} to \"AdamW\" (DeepSpeedCPUAdam runs on the CPU), "
            f"or delete zero_optimization.offload_optimizer to keep LAMB")


# ------------------------------------------------------------ DS314 stage-3 16-bit save

TRAINS = re.compile(r"\.backward\(|\.step\(\)|\btrainer\.train\(|\.train\(\)|save_(?:16bit_)?model\(|save_checkpoint\(")
_INFERS = re.compile(r"\.generate\(|\.eval\(\)|torch\.no_grad\(|torch\.inference_mode\(")


def inference_only(ctx: Context) -> str | None:
    """Why this run only infers (ZeRO Inference: nothing trained, nothing saved), else None.

    The scripts given with --script infer (generate / eval / no_grad) and nothing in them trains
    or saves; or the Trainer arguments ask for --do_eval/--do_predict without --do_train.
    """
    if ctx.script_sources:
        texts = list(ctx.script_sources.values())
        trains = any(TRAINS.search(t) for t in texts) or any(
            sc.trainers or sc.training_args for sc in ctx.scripts)
        if not trains and any(_INFERS.search(t) for t in texts):
            return "the script only runs inference"
        return None
    args = ctx.trainer_args
    if not truthy_arg(args.get("do_train", False)) and (
            truthy_arg(args.get("do_eval", False)) or truthy_arg(args.get("do_predict", False))):
        return "--do_eval/--do_predict without --do_train"
    return None


#: A model save in a script: the Trainer's, Transformers', DeepSpeed's 16-bit or full checkpoint.
_SAVES = re.compile(r"\.(save_model|save_pretrained|save_16bit_model|save_checkpoint)\(")


def _save_strategy(ctx: Context) -> str | None:
    """The Trainer's save_strategy as the run states it (arguments, launch, script), or None."""
    arg = run_arg(ctx, "save_strategy")
    if arg is not None:
        return str(arg[0]).strip("'\" ").lower().removeprefix("intervalstrategy.")
    for sc in ctx.scripts:
        for name, value, _line in sc.training_arg_values:
            if name == "save_strategy":
                return str(value).strip().lower()
    return None


def run_saves(ctx: Context) -> str | None:
    """Why this run saves a model, or None when nothing says it does."""
    for path, text in ctx.script_sources.items():
        m = _SAVES.search(text)
        if m:
            return f"{path} calls {m.group(1)}()"
    if ctx.run.value("uses_trainer"):
        strategy = _save_strategy(ctx)
        if strategy != "no":  # the Trainer's default is "steps" (every save_steps)
            return ("the Trainer saves checkpoints" if strategy is None else
                    f"the Trainer saves checkpoints (save_strategy {strategy})")
    return None


def _peft_trainer_saves_adapters(ctx: Context) -> bool:
    """PEFT under the Trainer of Transformers 5: save_model() gathers the trainable (adapter)
    weights itself under ZeRO-3, whatever the gather flag (trainer.py, save_model). Transformers
    4.57 goes through accelerator.get_state_dict, which refuses without the flag."""
    if not (ctx.run.value("peft") and ctx.run.value("uses_trainer")):
        return False
    known = ctx.run.version("transformers")
    return known is None or parse_version(str(known.value)) >= (5,)


def stage3_no_16bit_save(ctx: Context, rule: Any) -> Iterator[Finding]:
    """ZeRO-3 without stage3_gather_16bit_weights_on_model_save: saves write no model weights."""
    if written_stage(ctx) != 3 or inference_only(ctx):
        return
    key = "zero_optimization.stage3_gather_16bit_weights_on_model_save"
    old_key = "zero_optimization.stage3_gather_fp16_weights_on_model_save"
    alias = "zero_optimization.gather_16bit_weights_on_model_save"
    for k in (key, old_key, alias):
        v = ctx.cfg_get(k)
        if v is True or v == "true":
            return
    saves = run_saves(ctx)
    if saves is None or _peft_trainer_saves_adapters(ctx):
        return
    val = ctx.cfg_get(key)
    state = "missing (default false)" if val is None else f"{show_json(val)}"
    yield finding(
        f"ZeRO stage 3 partitions every weight across the GPUs, {key} is {state}, and "
        f"{saves}: the Trainer's save_model() then writes no model weights file (it warns "
        f"'stage3_gather_16bit_weights_on_model_save=false. Saving the full checkpoint instead' "
        f"and writes a DeepSpeed checkpoint), and engine.save_16bit_model() writes nothing; the "
        f"weights come back only through zero_to_fp32.py on the checkpoint.",
        path=key,
        # No automatic change: the gather builds the whole 16-bit model in rank 0's CPU memory at
        # save time, which a run that saves fine today might not have room for.
        fix=f"set {key} to true (costs one gather of the full 16-bit model into rank 0's CPU "
            f"memory at save time)")


# ------------------------------------------------------------ DS213 ZeRO Inference below stage 3

def zero_inference_below_stage3(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS213: an inference-only run on ZeRO-1/2, which partition nothing inference holds."""
    stage = written_stage(ctx)
    if stage not in (1, 2):
        return
    why = inference_only(ctx)
    if not why:
        return
    change = ({"op": "set", "path": "zero_optimization.stage", "old": stage, "new": 3}
              if ctx.cfg_has("zero_optimization.stage") else None)
    fix = (f"set zero_optimization.stage from {stage} to 3 (add offload_param device cpu if the "
           "shards still do not fit), or run without DeepSpeed if the model fits one GPU")
    if not ctx.script_sources:
        # The Trainer's evaluation loop, run without training first, calls
        # deepspeed_init(inference=True), which refuses any stage but 3 (integrations/deepspeed.py).
        yield finding(
            f"This run only evaluates ({why}) with ZeRO stage {stage}: the Trainer's evaluation "
            "loop then sets DeepSpeed up for inference, which it refuses below stage 3 with "
            "'ValueError: ZeRO inference only makes sense with ZeRO Stage 3 - please adjust "
            "your config'.",
            path="zero_optimization.stage", severity="error", fix=fix, change=change)
        return
    # deepspeed.initialize with no optimizer (none passed, none in the config) builds a DummyOptim,
    # which the ZeRO-1/2 optimizer refuses (engine.py, _configure_zero_optimizer).
    no_optimizer = ("" if ctx.cfg_has("optimizer") else
                    f" With no optimizer section, deepspeed.initialize stops with 'AssertionError: "
                    f"zero stage {stage} requires an optimizer' unless the script passes one.")
    yield finding(
        f"This run only infers ({why}) with ZeRO stage {stage}. ZeRO-1 and ZeRO-2 partition "
        "optimizer states and gradients, which inference does not use; only stage 3 partitions "
        "the parameters, so here every GPU holds the whole model." + no_optimizer,
        path="zero_optimization.stage", fix=fix, change=change)
