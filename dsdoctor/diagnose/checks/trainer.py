"""Checks of the Transformers/Accelerate integration: generate under ZeRO-3 (DS202), the HF
DeepSpeed config (DS205, DS206), batch arithmetic (DS309), "auto" (DS310), Trainer vs config (DS311).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsdoctor.diagnose.checks.common import (
    as_numlike,
    as_real,
    enabled,
    finding,
    fmt_number,
    has_string_number,
    lintable,
    log_facts,
    same_value,
    script_evidence,
    show_json,
    strip_strings,
    truthy_arg,
    version_tuple,
)
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.diagnose.checks.runfacts import package_version, world_size, zero_stage
from dsdoctor.facts import dskeys
from dsdoctor.facts.context import Context
from dsdoctor.facts.run_sources import launches
from dsdoctor.model import Finding

# ------------------------------------------------------ DS202 ZeRO-3 generate without synced_gpus

_SYNCED_AUTO = (4, 28)  # Transformers sets synced_gpus itself under ZeRO-3 on >1 GPU since 4.28


def zero3_generate_without_synced_gpus(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS202: ZeRO-3 on several ranks, generate() without synced_gpus."""
    stage = zero_stage(ctx)
    hang = ctx.symptom("hang")
    if not ctx.scripts:
        if stage == 3 and hang is not None:
            ctx.missing(rule.code, "generate() calls without synced_gpus", "--script train.py")
        return
    if stage is None:
        if any(sc.generate_without_sync() for sc in ctx.scripts):
            ctx.missing(rule.code, "the ZeRO stage (generate without synced_gpus hangs under "
                        "ZeRO-3)", "--config ds_config.json")
        return
    if stage != 3:
        return
    if world_size(ctx) == 1:
        return
    tf, tf_src = package_version(ctx, "transformers")
    tfv = version_tuple(tf)
    calls = [(sc, g) for sc in ctx.scripts for g in sc.generate_without_sync()]
    explicit = [(sc, g) for sc, g in calls if g.synced_gpus is False]
    implicit = [(sc, g) for sc, g in calls if g.synced_gpus is None]
    # generate() turns synced_gpus on by itself only when Transformers knows ZeRO-3 is active:
    # a live HfDeepSpeedConfig, the Trainer's arguments, or Accelerate's DeepSpeed plugin.
    unknown_to_hf = [(sc, g) for sc, g in implicit
                     if not (any(h.kept_alive for h in sc.hf_ds_configs) or sc.uses_trainer
                             or sc.uses_accelerate)]
    implicit = [c for c in implicit if c not in unknown_to_hf]
    flagged = list(explicit) + unknown_to_hf
    reason = []
    if explicit:
        reason.append(f"generate() is called with synced_gpus=False ({len(explicit)} call(s))")
    if unknown_to_hf:
        reason.append(f"generate() is called without synced_gpus ({len(unknown_to_hf)} call(s)) "
                      "in a script that sets up DeepSpeed without a live HfDeepSpeedConfig, the "
                      "Trainer or Accelerate, so Transformers does not know ZeRO-3 is on and "
                      "leaves synced_gpus off (whatever its version)")
    if implicit:
        if tfv is not None and tfv < _SYNCED_AUTO:
            flagged += implicit
            reason.append(f"generate() is called without synced_gpus ({len(implicit)} call(s)) "
                          f"on Transformers {tf} (from the {tf_src}), older than 4.28, which "
                          "would set it automatically")
        elif tfv is None:
            ctx.missing(rule.code, "the Transformers version (4.28+ sets synced_gpus itself)",
                        "--env snapshot.json")
            if hang is not None:
                flagged += implicit
                reason.append(f"generate() is called without synced_gpus ({len(implicit)} "
                              "call(s); the Transformers version is unknown, and before 4.28 "
                              "it is not set automatically)")
    if not flagged:
        return
    ws = (f"{world_size(ctx)} ranks" if world_size(ctx) else "several ranks (world size unknown)")
    sev = "error" if hang is not None else "warning"
    tail = (f" The log shows the hang: a collective timed out at line {hang.first.line}."
            if hang is not None else " Expect a hang at the first generate() where the ranks' "
            "outputs differ in length, until the collective timeout.")
    ev = tuple(script_evidence(g.site, sc.path) for sc, g in flagged[:5])
    if hang is not None:
        ev += hang.evidence[:3]
    yield finding(
        f"ZeRO-3 runs on {ws}, and {'; '.join(reason)}. Under ZeRO-3 every forward pass gathers "
        "parameters from all ranks; a rank that finishes generating early stops joining those "
        "all-gathers and the others wait forever." + tail,
        fix="Pass synced_gpus=True to every generate() call under ZeRO-3. (Transformers >= "
            "4.28 sets it by itself only when it knows ZeRO-3 is on: a live HfDeepSpeedConfig, "
            "the Trainer, or Accelerate.)",
        path=None, severity=sev, evidence=ev, file=flagged[0][0].path,
        line=flagged[0][1].site.line)


# ---------------------------------------------------------- DS205/DS206 ZeRO-3 loading order


def hf_deepspeed_config_dropped(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS205: HfDeepSpeedConfig not kept alive, or created after from_pretrained."""
    stage = zero_stage(ctx)
    if stage not in (None, 3):
        return
    sev = "error" if stage == 3 else "warning"
    for sc in ctx.scripts:
        for site, what in sc.hf_ds_config_problems():
            yield finding(
                f"{sc.path}:{site.line}: HfDeepSpeedConfig is {what}. Under ZeRO-3 Transformers "
                "looks for a live HfDeepSpeedConfig inside from_pretrained to load the model "
                "directly partitioned (deepspeed.zero.Init); without it every rank loads the "
                "whole model into CPU/GPU memory first.",
                fix="Create it before from_pretrained and keep a reference for the whole run: "
                    "dschf = HfDeepSpeedConfig(ds_config)  # keep this object alive",
                severity=sev, evidence=(script_evidence(site, sc.path),), file=sc.path,
                line=site.line)


def training_args_after_from_pretrained(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS206: TrainingArguments created after from_pretrained under ZeRO-3."""
    stage = zero_stage(ctx)
    if stage != 3 and not (stage is None and any(
            "deepspeed" in (site.text or "") for sc in ctx.scripts for site in sc.training_args)):
        return
    for sc in ctx.scripts:
        for ta, fp in sc.training_args_after_from_pretrained():
            yield finding(
                f"{sc.path}:{ta.line}: TrainingArguments is created after from_pretrained "
                f"(line {fp.line}). The Trainer's ZeRO-3 integration is set up by "
                "TrainingArguments; created later, the model is loaded whole on every rank "
                "instead of partitioned (zero.Init), which costs CPU RAM and time and can OOM.",
                fix="Create TrainingArguments (with deepspeed=...) before calling "
                    "from_pretrained.",
                evidence=(script_evidence(ta, sc.path), script_evidence(fp, sc.path)),
                file=sc.path, line=ta.line)


# ---------------------------------------------------------------- DS207 merge under DeepSpeed


def _deepspeed_in_use(ctx: Context) -> bool:
    if ctx.ds is not None:
        return True
    dt = ctx.acc_get("distributed_type")
    if isinstance(dt, str) and dt.upper() == "DEEPSPEED":
        return True
    if log_facts(ctx).accelerate.get("distributed_type") == "DEEPSPEED":
        return True
    if ctx.trainer_args.get("deepspeed") not in (None, False, "None", ""):
        return True
    return any(sc.uses_deepspeed for sc in ctx.scripts)


# ---------------------------------------------------------------- DS309 batch-size arithmetic

_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: Megatron/NeoX-style launch flags naming a model-parallel degree (the ranks one replica spans).
_MP_FLAG = re.compile(r"--(?:tensor|pipeline|pipe|sequence|context)[-_](?:model[-_])?parallel[-_]size"
                      r"(?:=|\s+)(\d+)")
_NUM_STAGES = re.compile(r"\bnum_stages\s*=\s*(\d+)")


@dataclass(frozen=True)
class _ModelParallel:
    """How many ranks one data-parallel replica spans. DeepSpeed's batch check counts replicas
    (its world_size is the data-parallel size: ranks / (TP x PP x SP)), not ranks."""

    degree: int  # the product of the degrees seen (1: none seen)
    unknown: str = ""  # a model-parallel setup whose degree nothing states (then degree is a floor)
    where: str = ""
    # AutoTP set in the config with no mpu passed: DeepSpeed's check counts every rank (why, shown)
    autotp_every_rank: str = ""


def _passes_mpu(ctx: Context) -> bool:
    """A script passes ``mpu=`` to ``deepspeed.initialize``: DeepSpeedConfig then takes its
    world_size from the mpu's data-parallel size (runtime/config.py, ``if mpu is not None``)."""
    return any(sf.ds_initialize_mpu for sf in ctx.scripts)


def _model_parallel(ctx: Context) -> _ModelParallel:
    degree, where, unknown, autotp_every_rank = 1, [], "", ""
    for key in ("tensor_parallel.autotp_size", "sequence_parallel_size"):
        n = as_real(ctx.cfg_get(key))
        if n is None or n <= 1 or not float(n).is_integer():
            continue
        if key == "tensor_parallel.autotp_size" and not _passes_mpu(ctx):
            # without an mpu DeepSpeedConfig uses dist.get_world_size(): AutoTP from the config
            # alone does not divide it (a real 2-rank run: autotp_size 2, train_batch_size 1 is
            # refused with '1 != 1 * 1 * 2', 2 is accepted; tests/test_upstream_live_runs.py)
            autotp_every_rank = (f"tensor_parallel.autotp_size {int(n)} is set in the config "
                                 "and no mpu is passed to deepspeed.initialize, so DeepSpeed's "
                                 "check counts every rank, TP ranks included")
            continue
        degree *= int(n)
        where.append(f"{key} {int(n)}")
    for la in launches(ctx):
        for n in (int(x) for x in _MP_FLAG.findall(la.text)):
            if n > 1:
                degree *= n
                where.append(f"a parallel-size flag of {n} at {la.location}")
    for path, text in ctx.script_sources.items():
        if "PipelineModule(" not in text:
            continue
        stages = [int(x) for x in _NUM_STAGES.findall(text)]
        if len(stages) == 1 and stages[0] > 0:
            degree *= stages[0]
            where.append(f"PipelineModule num_stages={stages[0]} in {path}")
        else:
            unknown = f"a PipelineModule in {path}"
    return _ModelParallel(degree, unknown, ", ".join(where), autotp_every_rank)


def batch_arithmetic(ctx: Context, rule: Any) -> Iterator[Finding]:
    """train_batch_size = micro x accumulation x world size, as DeepSpeed asserts."""
    vals = {k: ctx.cfg_get(k) for k in _BATCH}
    nums = {k: as_real(v) for k, v in vals.items()}
    for k, v in vals.items():
        if isinstance(v, float) and not v.is_integer():
            yield finding(f"{k} is {show_json(v)}: a batch size must be a whole number; DeepSpeed "
                           f"divides with it and the batch arithmetic cannot hold.",
                           path=k, fix=f"set {k} to a whole number")
            return
        n = nums[k]
        if n is not None and n <= 0:
            yield finding(f"{k} is {show_json(v)}: it must be a positive whole number.",
                           path=k, fix=f"set {k} to a positive whole number (or \"auto\" under the Trainer)")
            return
    tb, mb, gas = (nums[k] for k in _BATCH)
    if tb is None or mb is None:
        return  # DeepSpeed derives the missing one; "auto"/strings are DS310/DS318's business
    world = world_size(ctx)
    known_world = ctx.run.world_size
    world_source = known_world.source.describe() if known_world is not None else ""
    mp = _model_parallel(ctx)
    if mp.unknown:
        # the replicas are ranks / (TP x PP x SP) and one degree is not stated: no equality to test
        ctx.missing(rule.code, f"the data-parallel size ({mp.unknown}: ranks / pipeline stages)",
                    "the script's PipelineModule(num_stages=...) or the log")
        world = None
    elif world and mp.degree > 1:
        if world % mp.degree:
            return  # the degrees seen do not divide the ranks: a model-parallel setup not read right
        world_source += f" / {mp.degree} ({mp.where})"
        world //= mp.degree
    if world and mp.autotp_every_rank:
        world_source += f"; {mp.autotp_every_rank}"
    if gas is not None:
        per_rank = mb * gas
        if world:
            expect = per_rank * world
            if expect != tb:
                size = "data-parallel size" if mp.degree > 1 else "world size"
                yield finding(
                    f"train_batch_size is {fmt_number(tb)} but train_micro_batch_size_per_gpu x "
                    f"gradient_accumulation_steps x {size} = {fmt_number(mb)} x {fmt_number(gas)} x "
                    f"{world} = {fmt_number(expect)} ({size} {world} from the {world_source}): "
                    f"DeepSpeed stops with 'Check batch related parameters. train_batch_size is not "
                    f"equal to micro_batch_per_gpu * gradient_acc_step * world_size "
                    f"{fmt_number(tb)} != {fmt_number(mb)} * {fmt_number(gas)} * {world}'.",
                    path="train_batch_size",
                    fix=f"set train_batch_size from {fmt_number(tb)} to {fmt_number(expect)}, or delete it "
                        f"(DeepSpeed computes it), or \"auto\" under the Trainer")
        elif tb % per_rank != 0:
            yield finding(
                f"train_batch_size {fmt_number(tb)} is not a multiple of train_micro_batch_size_per_gpu x "
                f"gradient_accumulation_steps = {fmt_number(mb)} x {fmt_number(gas)} = {fmt_number(per_rank)}: no "
                f"world size can satisfy DeepSpeed's check train_batch_size = micro x accumulation "
                f"x world size.",
                path="train_batch_size",
                fix="delete train_batch_size (DeepSpeed computes it from the other two and the "
                    "number of GPUs), or make it micro x accumulation x number of GPUs")
        else:
            ctx.missing(rule.code, f"train_batch_size {fmt_number(tb)} against micro x accumulation x "
                        "world size", "a log with the world size, or --env")
    elif world and tb % (mb * world) != 0:
        yield finding(
            f"train_batch_size {fmt_number(tb)} is not divisible by train_micro_batch_size_per_gpu x "
            f"world size = {fmt_number(mb)} x {world}: DeepSpeed cannot derive a whole "
            f"gradient_accumulation_steps.",
            path="train_batch_size",
            fix=f"set train_batch_size to a multiple of {fmt_number(mb * world)}")


# ---------------------------------------------------------------- DS310 "auto" without Trainer

def _auto_paths(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            if v == "auto":
                yield p
            else:
                yield from _auto_paths(v, p)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            p = f"{prefix}[{i}]"
            if v == "auto":
                yield p
            else:
                yield from _auto_paths(v, p)


#: DeepSpeed reads fp16/bf16 through pydantic models (runtime/precision_config.py) from 0.17.1;
#: before, ``get_scalar_param`` returned the raw value, and the string "auto" is truthy.
_PRECISION_MODELS = (0, 17, 1)


def _auto_effect(path: str, table: dskeys.KeyTable, release: str) -> tuple[str, str]:
    """(what DeepSpeed ``release`` does with "auto" at this path, severity)."""
    if path in _BATCH:
        return ("DeepSpeed keeps the string and crashes at deepspeed.initialize with a TypeError "
                "(it computes with it)", "error")
    if path in ("fp16.enabled", "bf16.enabled"):
        if dskeys.parse_version(release) < _PRECISION_MODELS:
            return (f"DeepSpeed {release} reads the string \"auto\" as true, so "
                    f"{path.split('.')[0]} is on whatever the script meant (and with fp16 and bf16 "
                    "both \"auto\" it stops: 'bfloat16 and fp16 modes cannot be simultaneously "
                    "enabled')", "error")
        return (f"DeepSpeed drops \"auto\" before validating, so {path.split('.')[0]} stays off "
                "and the model silently trains in fp32 (slower, twice the memory)", "error")
    section = path.rpartition(".")[0]
    if section.startswith(("optimizer.params", "scheduler.params")):
        return ("DeepSpeed passes the string \"auto\" to the optimizer/scheduler, which fails "
                "when it computes with it", "error")
    if table.is_strict(section):
        return ("DeepSpeed drops \"auto\" before validating, so the default value is used", "warning")
    return ("DeepSpeed keeps the string \"auto\" where a number or flag is expected", "error")


def auto_without_trainer(ctx: Context, rule: Any) -> Iterator[Finding]:
    """"auto" values with neither the Trainer nor Accelerate to fill them in."""
    doc = lintable(ctx)
    if doc is None or ctx.run.value("uses_trainer") is not False or ctx.run.value("uses_accelerate"):
        return
    table = dskeys.table_for(ctx.ds_version)
    why = ("the training script does not use the Trainer or Accelerate"
           if ctx.script_sources else "the log shows neither the Trainer nor Accelerate")
    for path in _auto_paths(doc.data):
        effect, sev = _auto_effect(path, table, ctx.ds_version)
        yield finding(
            f"{path} is \"auto\", but only the HF Trainer and Accelerate replace \"auto\" with "
            f"real values, and {why}: {effect}.",
            path=path, severity=sev,
            fix=f"replace \"auto\" in {path} with the value you want (for example "
                f"{_auto_example(path)}), or launch through the Trainer/Accelerate")


def _auto_example(path: str) -> str:
    examples = {"train_batch_size": "32", "train_micro_batch_size_per_gpu": "4",
                "gradient_accumulation_steps": "1", "fp16.enabled": "true",
                "bf16.enabled": "true", "gradient_clipping": "1.0",
                "optimizer.params.lr": "2e-5", "optimizer.params.weight_decay": "0.0",
                "optimizer.params.eps": "1e-8", "optimizer.params.betas": "[0.9, 0.999]",
                "scheduler.params.warmup_num_steps": "100"}
    return examples.get(path, "a number")


# ------------------------------------------------------------ DS311 Trainer vs config values

#: Trainer defaults (transformers TrainingArguments) of the arguments it checks against the config.
TRAINER_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_grad_norm": 1.0,
    "learning_rate": 5e-5, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
    "weight_decay": 0.0, "fp16": False, "bf16": False, "max_steps": -1, "warmup_steps": 0,
}


def _arg(ctx: Context, name: str) -> tuple[Any, bool]:
    """(value, given explicitly) of a Trainer argument; the Trainer default when not given.
    The log's (or the analysis') arguments first, then a launch command's (``--script run.sh``)."""
    for key in (name, name.replace("_", "-")):
        if key in ctx.trainer_args:
            return ctx.trainer_args[key], True
    given = run_arg(ctx, name)
    if given is not None:
        return given[0], True
    return TRAINER_DEFAULTS.get(name), False


def _pairs(ctx: Context) -> list[tuple[str, str, Any, bool]]:
    """(DeepSpeed key, Trainer argument(s), Trainer value, explicit) as the Trainer compares them.

    Follows transformers' HfTrainerDeepSpeedConfig.trainer_config_process / _finalize.
    """
    out: list[tuple[str, str, Any, bool]] = []

    def num(v: Any) -> Any:
        n = as_numlike(v)
        if n is None:
            return v
        return int(n) if n.is_integer() and not (isinstance(v, str) and "." in v) else n

    mb, mb_x = _arg(ctx, "per_device_train_batch_size")
    gas, gas_x = _arg(ctx, "gradient_accumulation_steps")
    out.append(("train_micro_batch_size_per_gpu", "per_device_train_batch_size", num(mb), mb_x))
    out.append(("gradient_accumulation_steps", "gradient_accumulation_steps", num(gas), gas_x))
    mb_n, gas_n = as_numlike(mb), as_numlike(gas)
    ws_total = world_size(ctx)
    if ws_total and mb_n is not None and gas_n is not None:
        out.append(("train_batch_size", "world_size x per_device_train_batch_size x "
                    "gradient_accumulation_steps", int(ws_total * mb_n * gas_n), mb_x or gas_x))
    v, x = _arg(ctx, "max_grad_norm")
    out.append(("gradient_clipping", "max_grad_norm", num(v), x))
    lr, lr_x = _arg(ctx, "learning_rate")
    out.append(("optimizer.params.lr", "learning_rate", num(lr), lr_x))
    b1, x1 = _arg(ctx, "adam_beta1")
    b2, x2 = _arg(ctx, "adam_beta2")
    out.append(("optimizer.params.betas", "adam_beta1 + adam_beta2", [num(b1), num(b2)], x1 or x2))
    v, x = _arg(ctx, "adam_epsilon")
    out.append(("optimizer.params.eps", "adam_epsilon", num(v), x))
    v, x = _arg(ctx, "weight_decay")
    out.append(("optimizer.params.weight_decay", "weight_decay", num(v), x))
    out.append(("scheduler.params.warmup_max_lr", "learning_rate", num(lr), lr_x))
    f16, f16_x = _arg(ctx, "fp16")
    f16e, f16e_x = _arg(ctx, "fp16_full_eval")
    out.append(("fp16.enabled", "fp16 (or fp16_full_eval)",
                truthy_arg(f16) or truthy_arg(f16e), f16_x or f16e_x))
    b16, b16_x = _arg(ctx, "bf16")
    b16e, b16e_x = _arg(ctx, "bf16_full_eval")
    out.append(("bf16.enabled", "bf16 (or bf16_full_eval)",
                truthy_arg(b16) or truthy_arg(b16e), b16_x or b16e_x))
    ms, ms_x = _arg(ctx, "max_steps")
    ms_n = as_numlike(ms)
    if ms_x and ms_n is not None and ms_n > 0:
        out.append(("scheduler.params.total_num_steps", "max_steps", int(ms_n), True))
        ws, ws_x = _arg(ctx, "warmup_steps")
        ws_n = as_numlike(ws)
        if ws_x and ws_n is not None and ws_n > 0:
            # Transformers 5 reads a warmup_steps below 1 as a share of the steps
            # (TrainingArguments.get_warmup_steps: ceil(steps x ratio)); 4.x takes only integers.
            warm = int(ws_n) if ws_n >= 1 else math.ceil(ms_n * ws_n)
            out.append(("scheduler.params.warmup_num_steps", "warmup_steps", warm, True))
    return out


def _trainer_inferred(ctx: Context) -> str:
    """Why the run model infers the HF Trainer from a launch command alone, or '' when a
    stronger source says (or nothing does). See ``run_sources.trainer_evidence``."""
    known = ctx.run.uses_trainer
    if known is None or not known.value or known.confidence != "inferred" \
            or known.source.kind != "launch":
        return ""
    return f"{known.source.location} {known.source.detail}"


def _trainer_args_given(ctx: Context) -> bool:
    """Some Trainer argument is stated: by the log, the analysis, or a launch command."""
    return bool(ctx.trainer_args) or any(la.script_options for la in launches(ctx))


def trainer_mismatch(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Config values that differ from the Trainer's arguments (the Trainer refuses to start)."""
    # A config the engine printed in the log already passed the Trainer's own check (the
    # engine starts after it), with "auto" values filled in: comparing it again with
    # default arguments can only be wrong.
    if ctx.ds_source == "log":
        return
    inferred = _trainer_inferred(ctx)
    if ctx.run.value("uses_trainer") and ctx.ds is not None and _trainer_args_given(ctx):
        for ds_key, hf_name, hf_val, explicit in _pairs(ctx):
            if not ctx.cfg_has(ds_key) or (inferred and not explicit):
                continue  # inferred Trainer: compare only what the command line states
            ds_val = ctx.cfg_get(ds_key)
            if ds_val == "auto" or ds_val is None or same_value(ds_val, hf_val):
                continue
            shown = show_json(ds_val)
            stated = run_arg(ctx, hf_name.split(" ")[0]) if explicit else None
            where = (f"--{hf_name.split(' ')[0]} {show_json(hf_val)} ({stated[1].split(' at ')[1]})"
                     if stated and " at " in stated[1] else
                     f"--{hf_name.split(' ')[0]} {show_json(hf_val)}" if explicit else
                     f"{hf_name} {show_json(hf_val)} (the Trainer's default: the command line does "
                     f"not set it)")
            text = (f"{ds_key} is {shown} in the config but the Trainer has {where}; "
                    f"transformers checks this pair when training starts and stops with "
                    f"'Please correct the following DeepSpeed config values that mismatch "
                    f"TrainingArguments values: - ds {ds_key}={ds_val} vs hf {hf_name.split(' ')[0]}="
                    f"{hf_val}'.")
            change = None
            if has_string_number(ds_val) and same_value(strip_strings(ds_val), hf_val):
                text = (f"{ds_key} is the string {shown} in the config, and the Trainer compares "
                        f"it with the number {show_json(hf_val)} from {hf_name}: a string never equals "
                        f"a number, so it reports a mismatch that reads 'ds {ds_key}={ds_val} vs "
                        f"hf {hf_name.split(' ')[0]}={hf_val}' although both print the same. Write "
                        f"the value without quotes.")
                change = {"op": "set", "path": ds_key, "old": ds_val, "new": strip_strings(ds_val)}
            else:
                # "auto" is what the Trainer wants: it then takes the argument's value.
                change = {"op": "set", "path": ds_key, "old": ds_val, "new": "auto"}
            if inferred:
                text += (f" (The Trainer is inferred: {inferred}. DeepSpeed-Chat-style scripts "
                         "take the same flags and ignore them for DeepSpeed; give --script "
                         "train.py to confirm.)")
            # Accelerate's plugin passes "auto" for a key its YAML leaves out (the PEFT guide:
            # set these on the command line, not in the Accelerate config).
            fix = (f"delete {ds_key} from the Accelerate config (Accelerate then passes \"auto\" "
                   f"and the Trainer fills in {hf_name}) or set it to {show_json(hf_val)}"
                   if ctx.ds_source == "accelerate" else
                   f"set {ds_key} from {shown} to \"auto\" (the Trainer fills in {hf_name}) or "
                   f"to {show_json(hf_val)}")
            yield finding(
                text, path=ds_key, severity="warning" if inferred or not explicit else "",
                fix=fix,
                change=None if inferred else change)
    # Accelerate: its mixed_precision must agree with the DeepSpeed config file it points to.
    acc = ctx.accelerate
    if acc is not None and acc.deepspeed is not None and not acc.deepspeed.synthesized:
        mp = acc.get("mixed_precision")
        ds = acc.deepspeed
        for prec in ("fp16", "bf16"):
            other = "bf16" if prec == "fp16" else "fp16"
            if mp == prec and enabled(ds.get(f"{other}.enabled")):
                pos = acc.locate("mixed_precision")
                yield finding(
                    f"The Accelerate config sets mixed_precision: {prec} (line "
                    f"{pos.line if pos else '?'} of {acc.path}) but the DeepSpeed config enables "
                    f"{other}: Accelerate stops with '`--mixed_precision` arg cannot be set to "
                    f"`{prec}` when `{other}` is set in the DeepSpeed config file.'",
                    path=f"{other}.enabled", file=ds.path, line=ds.line(f"{other}.enabled"),
                    fix=f"make them agree: mixed_precision: {other} in {acc.path}, or "
                        f"{prec}.enabled true and {other}.enabled false in {ds.path}")


# ------------------------------------------------------- DS214 --lr_scheduler_type overridden

#: DeepSpeed scheduler -> the Trainer's --lr_scheduler_type of the same shape (the Transformers
#: DeepSpeed guide, "Scheduler"): warm up, then constant / linear decay to 0. Not identical:
#: DeepSpeed warms up logarithmically unless warmup_type is "linear" (lr_schedules.py).
_SAME_SCHEDULE = {"warmuplr": "constant_with_warmup", "warmupdecaylr": "linear"}


def scheduler_type_ignored(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS214: the config's scheduler replaces an explicit, different --lr_scheduler_type."""
    if ctx.ds_source == "log" or ctx.ds is None:
        return
    inferred = _trainer_inferred(ctx)
    if not ctx.run.value("uses_trainer"):
        return
    ds_type = ctx.cfg_get("scheduler.type")
    hf_type, explicit = _arg(ctx, "lr_scheduler_type")
    if not isinstance(ds_type, str) or ds_type == "auto" or not explicit or not hf_type:
        return
    hf = str(hf_type).strip("'\" ").lower().removeprefix("schedulertype.")
    # "linear" is the Trainer's default: a printed TrainingArguments shows it unasked
    if hf == "linear" or _SAME_SCHEDULE.get(ds_type.lower()) == hf:
        return
    same = _SAME_SCHEDULE.get(ds_type.lower())
    yield finding(
        f"The DeepSpeed config has a scheduler section ({ds_type}), so the Trainer uses "
        f"DeepSpeed's {ds_type} and silently ignores --lr_scheduler_type {hf}: the learning rate "
        f"does not follow the schedule the command line asks for"
        + (f" ({ds_type} has the shape of the Trainer's {same})." if same else ".")
        + (f" (The Trainer is inferred: {inferred}.)" if inferred else ""),
        path="scheduler.type",
        fix=f"delete the scheduler section so the Trainer builds {hf} from its arguments, or "
            f"drop --lr_scheduler_type {hf} and keep {ds_type}",
        severity="warning")
