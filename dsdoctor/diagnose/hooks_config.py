"""Hooks of the config lints (DS3xx): the arithmetic and lookups YAML conditions cannot express.

Each hook is ``hook(ctx, rule) -> Iterable[Finding]``; the engine fills the rule's code, name,
title and references, and the config line of ``config_path``. Messages give the numbers; fixes
name the key, the old value and the new one. ``fix_change`` is set only for changes that are safe
to apply blindly (``--fix-out``): a run that works today keeps doing the same thing (a typo that
was ignored or refused gets its intended name, a setting that did nothing goes away, a quoted
number loses its quotes, a value the Trainer refused becomes "auto").

The DeepSpeed behaviours quoted here were measured on DeepSpeed 0.19.8 (see tests/test_dskeys.py,
which re-measures them when DeepSpeed is installed).
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator

from dsdoctor.facts import dskeys
from dsdoctor.facts.configfile import ConfigDoc, lookup
from dsdoctor.facts.context import Context
from dsdoctor.diagnose.hooks_symptoms import finding as _finding
from dsdoctor.model import Finding


def _lintable(ctx: Context) -> ConfigDoc | None:
    """The DeepSpeed config whose keys were written by a person (not synthesized by us)."""
    if ctx.ds is None or ctx.ds.synthesized:
        return None
    return ctx.ds


def _show(v: Any) -> str:
    """A value as it is written in JSON."""
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


_num = dskeys.as_real  # a real number (not bool, not a string)
_numlike = dskeys.as_number  # a number, also when written as a string ("8", "2e-5")


def _fmt(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:g}"


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def _gb(b: float) -> str:
    """Decimal gigabytes, as the DeepSpeed guides count bucket memory ("9 GB")."""
    return f"{b / 1e9:.1f} GB"


def _enabled(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


def _truthy_arg(v: Any) -> bool:
    """A Trainer boolean flag as the command line gives it (``--fp16``, ``--fp16 True``)."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v)


def _device(v: Any) -> str | None:
    if isinstance(v, str) and v.strip().lower() not in ("", "none"):
        return v.strip().lower()
    return None


def _stage(ctx: Context) -> int | None:
    """ZeRO stage as written, or None when unknown ("auto" or not a number)."""
    v = ctx.cfg_get("zero_optimization.stage", 0)
    n = _numlike(v)
    return int(n) if n is not None and math.isfinite(n) else None  # NaN/Infinity: unknown


# ------------------------------------------------------------------------ DS301 duplicate keys

def duplicate_keys(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Keys written twice in one object: DeepSpeed refuses the file."""
    seen: set[str] = set()
    docs: list[ConfigDoc] = []
    for doc in ctx.configs:
        docs.append(doc)
        if doc.deepspeed is not None:
            docs.append(doc.deepspeed)
    for doc in docs:
        # An Accelerate config's deepspeed_config_file may also be given with --config: once.
        if doc.path in seen or doc.synthesized:
            continue
        seen.add(doc.path)
        for dup in doc.duplicates:
            where = "DeepSpeed refuses the file (ValueError: Duplicate keys in DeepSpeed config)" \
                if doc.kind == "deepspeed" else "YAML keeps the last value without a word"
            a, b = ((f"{dup.first.line}:{dup.first.col}", f"{dup.pos.line}:{dup.pos.col}")
                    if dup.first.line == dup.pos.line else (str(dup.first.line), str(dup.pos.line)))
            yield _finding(
                f"'{dup.path}' is written twice: line {a} and line {b}. "
                f"{where}; the Trainer's json.load keeps the last value, so the two tools would "
                f"disagree even if it loaded.",
                path=dup.path, file=dup.pos.file, line=dup.pos.line,
                fix=f"delete one of the two '{dup.path.rpartition('.')[2]}' entries "
                    f"(lines {a} and {b}), keeping the value you mean")


# ------------------------------------------------------------------ DS302/DS303 unknown keys

def _release_story(path: str, value: Any) -> str:
    """Which releases refuse, ignore or read this key."""
    refuse, ignore, read = [], [], []
    rejecting = dskeys.releases_rejecting(path, value)
    for rel in dskeys.available_releases():
        t = dskeys.table_for(rel)
        if rel in rejecting:
            refuse.append(rel)
        elif t.is_known(path):
            read.append(rel)
        else:
            ignore.append(rel)
    parts = []
    if refuse:
        parts.append(f"refused by DeepSpeed {', '.join(refuse)}")
    if ignore:
        parts.append(f"silently ignored by {', '.join(ignore)}")
    if read:
        parts.append(f"read by {', '.join(read)}")
    return "; ".join(parts)


def _unknown(ctx: Context, rejected: bool) -> Iterator[Finding]:
    doc = _lintable(ctx)
    if doc is None:
        return
    table = dskeys.table_for(ctx.ds_version)
    for u in table.check(doc.data):
        if u.rejected != rejected:
            continue
        value = doc.get(u.path)
        story = _release_story(u.path, value)
        mean = f" Did you mean '{u.suggestion}'?" if u.suggestion else ""
        change = None
        if u.suggestion and not doc.has(u.suggestion) and u.suggestion.rpartition(".")[0] == u.section:
            # Renaming a typo inside its own section cannot make a working run worse: the typo
            # is either refused (the run does not start) or ignored (the default is used).
            change = {"op": "rename", "path": u.path, "new_path": u.suggestion, "old": value}
        if (u.section in ("bf16", "bfloat16") and not u.suggestion
                and u.key in table.section_keys("fp16")):
            mean = (" It is an fp16 setting: bf16 has fp32's exponent range and needs no loss "
                    "scaling, so it does nothing here.")
            change = {"op": "delete", "path": u.path, "old": value}
        if rejected:
            msg = (f"'{u.path}' is not a key DeepSpeed {table.release} accepts: {u.reason}."
                   f"{mean} ({story}.)")
            fix = (f"rename '{u.path}' to '{u.suggestion}'" if u.suggestion
                   else f"delete '{u.path}'")
        else:
            effect = ("the whole section is ignored and every key in it takes its default"
                      if isinstance(value, dict) else "the default value is used instead")
            msg = (f"'{u.path}' is not a key DeepSpeed {table.release} reads: {u.reason}, so "
                   f"{effect}.{mean} ({story}.)")
            fix = (f"rename '{u.path}' to '{u.suggestion}'" if u.suggestion
                   else f"delete '{u.path}' or check the DeepSpeed config documentation for the right name")
        yield _finding(msg, path=u.path, fix=fix, change=change)


def unknown_keys_ignored(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Unknown keys the target release silently ignores (warning: the setting has no effect)."""
    yield from _unknown(ctx, rejected=False)


def unknown_keys_rejected(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Unknown or removed keys the target release refuses (error: the run does not start)."""
    yield from _unknown(ctx, rejected=True)


# ------------------------------------------------------------------ DS319 values refused

def values_rejected(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Values the target release's config models refuse (type, range, choices)."""
    doc = _lintable(ctx)
    if doc is None:
        return
    table = dskeys.table_for(ctx.ds_version)
    for bad in table.check_values(doc.data):
        hint = ' (or "auto" under the Trainer)' if ctx.uses_trainer else ""
        yield _finding(
            f"{bad.path} is {_show(bad.value)}: DeepSpeed {table.release} refuses it at "
            f"deepspeed.initialize ({bad.reason}; pydantic ValidationError).",
            path=bad.path,
            fix=f"set {bad.path} to a value that {bad.reason.replace('must be', 'is', 1)}{hint}")


# ---------------------------------------------------------------- DS304-DS307 stage / offload

def offload_param_below_stage3(ctx: Context, rule: Any) -> Iterator[Finding]:
    """offload_param only exists in ZeRO-3; below it DeepSpeed ignores it without a word."""
    dev = _device(ctx.cfg_get("zero_optimization.offload_param.device"))
    stage = _stage(ctx)
    if dev is None or stage is None or stage >= 3:
        return
    yield _finding(
        f"zero_optimization.offload_param (device {_show(dev)}) only exists in ZeRO stage 3, and this "
        f"config uses stage {stage}: DeepSpeed {ctx.ds_version} ignores it silently, so the "
        f"parameters stay on the GPU (expect the GPU memory of stage {stage}, not of "
        f"parameter offload).",
        path="zero_optimization.offload_param",
        fix=f"to offload parameters set zero_optimization.stage from {stage} to 3; otherwise "
            f"delete zero_optimization.offload_param (it does nothing at stage {stage})",
        change={"op": "delete", "path": "zero_optimization.offload_param",
                "old": ctx.cfg_get("zero_optimization.offload_param")})


def offload_optimizer_without_zero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """offload_optimizer with ZeRO disabled (stage 0) does nothing."""
    dev = _device(ctx.cfg_get("zero_optimization.offload_optimizer.device"))
    stage = _stage(ctx)
    if dev is None or stage is None or stage != 0:
        return
    written = ctx.cfg_has("zero_optimization.stage")
    yield _finding(
        f"zero_optimization.offload_optimizer (device {_show(dev)}) needs ZeRO stage 1 or more, and "
        f"the stage is 0{'' if written else ' (zero_optimization.stage is not set; 0 is the default)'}: "
        f"ZeRO is off, so the optimizer states stay on the GPU and the offload does nothing.",
        path="zero_optimization.stage" if written else "zero_optimization.offload_optimizer",
        fix="set zero_optimization.stage from 0 to 2 (ZeRO-2 + optimizer offload, the usual "
            "ZeRO-Offload setup) or 3; or delete zero_optimization.offload_optimizer")


def nvme_without_path(ctx: Context, rule: Any) -> Iterator[Finding]:
    """NVMe offload without nvme_path: DeepSpeed has nowhere to swap."""
    for section in ("offload_param", "offload_optimizer"):
        base = f"zero_optimization.{section}"
        if _device(ctx.cfg_get(f"{base}.device")) != "nvme":
            continue
        p = ctx.cfg_get(f"{base}.nvme_path")
        if isinstance(p, str) and p.strip() and p != "auto":
            continue
        yield _finding(
            f"{base}.device is \"nvme\" but {base}.nvme_path is "
            f"{'missing' if p is None else _show(p)}: ZeRO-Infinity swaps "
            f"{'parameters' if section == 'offload_param' else 'optimizer states'} to files "
            f"under that directory, and with none DeepSpeed fails when it creates the swapper.",
            path=f"{base}.nvme_path" if p is not None else f"{base}.device",
            fix=f"add \"nvme_path\": \"/local_nvme\" to {base} (a directory on a local NVMe "
                f"drive, about 3 GB/s; not a network filesystem), or set device to \"cpu\"")


def nvme_below_stage3(ctx: Context, rule: Any) -> Iterator[Finding]:
    """NVMe optimizer offload (ZeRO-Infinity) needs stage 3."""
    stage = _stage(ctx)
    if stage is None or stage >= 3:
        return
    if _device(ctx.cfg_get("zero_optimization.offload_optimizer.device")) != "nvme":
        return
    yield _finding(
        f"zero_optimization.offload_optimizer.device is \"nvme\" with ZeRO stage {stage}: NVMe "
        f"offload is ZeRO-Infinity, which exists in stage 3 only; stages 1 and 2 offload the "
        f"optimizer to CPU memory only.",
        path="zero_optimization.offload_optimizer.device",
        fix=f"set zero_optimization.stage from {stage} to 3, or set "
            f"zero_optimization.offload_optimizer.device from \"nvme\" to \"cpu\"")


# --------------------------------------------------------------------- DS308 fp16 and bf16

def fp16_and_bf16(ctx: Context, rule: Any) -> Iterator[Finding]:
    """fp16 and bf16 both enabled: DeepSpeed asserts at start-up."""
    if not (_enabled(ctx.cfg_get("fp16.enabled")) and
            (_enabled(ctx.cfg_get("bf16.enabled")) or _enabled(ctx.cfg_get("bfloat16.enabled")))):
        return
    bkey = "bf16" if ctx.cfg_has("bf16.enabled") else "bfloat16"
    gpu_note = ""
    gpus = ctx.env_get("gpus") or []
    ccs = [g.get("compute_capability") for g in gpus if isinstance(g, dict)]
    if ccs and all(isinstance(c, (str, int, float)) for c in ccs):
        try:
            ok = all(float(str(c)) >= 8.0 for c in ccs)
            gpu_note = (" The GPUs in --env are Ampere or newer: prefer bf16." if ok else
                        " The GPUs in --env are older than Ampere (compute capability < 8.0): bf16 "
                        "is not supported there, keep fp16.")
        except ValueError:
            pass
    yield _finding(
        f"fp16.enabled and {bkey}.enabled are both true: the two precisions are exclusive and "
        f"DeepSpeed stops at start-up ('bfloat16 and fp16 modes cannot be simultaneously "
        f"enabled').{gpu_note}",
        path="fp16.enabled",
        fix=f"keep one: set fp16.enabled to false (bf16 needs Ampere or newer GPUs) or "
            f"{bkey}.enabled to false")


# ---------------------------------------------------------------- DS309 batch-size arithmetic

_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def batch_arithmetic(ctx: Context, rule: Any) -> Iterator[Finding]:
    """train_batch_size = micro x accumulation x world size, as DeepSpeed asserts."""
    vals = {k: ctx.cfg_get(k) for k in _BATCH}
    nums = {k: _num(v) for k, v in vals.items()}
    for k, v in vals.items():
        if isinstance(v, float) and not v.is_integer():
            yield _finding(f"{k} is {_show(v)}: a batch size must be a whole number; DeepSpeed "
                           f"divides with it and the batch arithmetic cannot hold.",
                           path=k, fix=f"set {k} to a whole number")
            return
        if nums[k] is not None and nums[k] <= 0:
            yield _finding(f"{k} is {_show(v)}: it must be a positive whole number.",
                           path=k, fix=f"set {k} to a positive whole number (or \"auto\" under the Trainer)")
            return
    tb, mb, gas = (nums[k] for k in _BATCH)
    if tb is None or mb is None:
        return  # DeepSpeed derives the missing one; "auto"/strings are DS310/DS318's business
    world = ctx.world_size
    if gas is not None:
        per_rank = mb * gas
        if world:
            expect = per_rank * world
            if expect != tb:
                yield _finding(
                    f"train_batch_size is {_fmt(tb)} but train_micro_batch_size_per_gpu x "
                    f"gradient_accumulation_steps x world size = {_fmt(mb)} x {_fmt(gas)} x "
                    f"{world} = {_fmt(expect)} (world size {world} from the {ctx.world_size_source}): "
                    f"DeepSpeed stops with 'Check batch related parameters. train_batch_size is not "
                    f"equal to micro_batch_per_gpu * gradient_acc_step * world_size "
                    f"{_fmt(tb)} != {_fmt(mb)} * {_fmt(gas)} * {world}'.",
                    path="train_batch_size",
                    fix=f"set train_batch_size from {_fmt(tb)} to {_fmt(expect)}, or delete it "
                        f"(DeepSpeed computes it), or \"auto\" under the Trainer")
        elif tb % per_rank != 0:
            yield _finding(
                f"train_batch_size {_fmt(tb)} is not a multiple of train_micro_batch_size_per_gpu x "
                f"gradient_accumulation_steps = {_fmt(mb)} x {_fmt(gas)} = {_fmt(per_rank)}: no "
                f"world size can satisfy DeepSpeed's check train_batch_size = micro x accumulation "
                f"x world size.",
                path="train_batch_size",
                fix="delete train_batch_size (DeepSpeed computes it from the other two and the "
                    "number of GPUs), or make it micro x accumulation x number of GPUs")
        else:
            ctx.missing(rule.code, f"train_batch_size {_fmt(tb)} against micro x accumulation x "
                        "world size", "a log with the world size, or --env")
    elif world and tb % (mb * world) != 0:
        yield _finding(
            f"train_batch_size {_fmt(tb)} is not divisible by train_micro_batch_size_per_gpu x "
            f"world size = {_fmt(mb)} x {world}: DeepSpeed cannot derive a whole "
            f"gradient_accumulation_steps.",
            path="train_batch_size",
            fix=f"set train_batch_size to a multiple of {_fmt(mb * world)}")


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


def _auto_effect(path: str, table: dskeys.KeyTable) -> tuple[str, str]:
    """(what DeepSpeed does with "auto" at this path, severity)."""
    if path in _BATCH:
        return ("DeepSpeed keeps the string and crashes at deepspeed.initialize with a TypeError "
                "(it computes with it)", "error")
    if path in ("fp16.enabled", "bf16.enabled"):
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
    doc = _lintable(ctx)
    if doc is None or ctx.uses_trainer is not False or ctx.uses_accelerate:
        return
    table = dskeys.table_for(ctx.ds_version)
    why = ("the training script does not use the Trainer or Accelerate"
           if ctx.script_sources else "the log shows neither the Trainer nor Accelerate")
    for path in _auto_paths(doc.data):
        effect, sev = _auto_effect(path, table)
        yield _finding(
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
    """(value, given explicitly) of a Trainer argument; the Trainer default when not given."""
    for key in (name, name.replace("_", "-")):
        if key in ctx.trainer_args:
            return ctx.trainer_args[key], True
    return TRAINER_DEFAULTS.get(name), False


def _pairs(ctx: Context) -> list[tuple[str, str, Any, bool]]:
    """(DeepSpeed key, Trainer argument(s), Trainer value, explicit) as the Trainer compares them.

    Follows transformers' HfTrainerDeepSpeedConfig.trainer_config_process / _finalize.
    """
    out: list[tuple[str, str, Any, bool]] = []

    def num(v: Any) -> Any:
        n = _numlike(v)
        if n is None:
            return v
        return int(n) if n.is_integer() and not (isinstance(v, str) and "." in v) else n

    mb, mb_x = _arg(ctx, "per_device_train_batch_size")
    gas, gas_x = _arg(ctx, "gradient_accumulation_steps")
    out.append(("train_micro_batch_size_per_gpu", "per_device_train_batch_size", num(mb), mb_x))
    out.append(("gradient_accumulation_steps", "gradient_accumulation_steps", num(gas), gas_x))
    mb_n, gas_n = _numlike(mb), _numlike(gas)
    if ctx.world_size and mb_n is not None and gas_n is not None:
        out.append(("train_batch_size", "world_size x per_device_train_batch_size x "
                    "gradient_accumulation_steps", int(ctx.world_size * mb_n * gas_n), mb_x or gas_x))
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
                _truthy_arg(f16) or _truthy_arg(f16e), f16_x or f16e_x))
    b16, b16_x = _arg(ctx, "bf16")
    b16e, b16e_x = _arg(ctx, "bf16_full_eval")
    out.append(("bf16.enabled", "bf16 (or bf16_full_eval)",
                _truthy_arg(b16) or _truthy_arg(b16e), b16_x or b16e_x))
    ms, ms_x = _arg(ctx, "max_steps")
    ms_n = _numlike(ms)
    if ms_x and (ms_n or 0) > 0:
        out.append(("scheduler.params.total_num_steps", "max_steps", int(ms_n), True))
        ws, ws_x = _arg(ctx, "warmup_steps")
        ws_n = _numlike(ws)
        if ws_x and (ws_n or 0) > 0:
            out.append(("scheduler.params.warmup_num_steps", "warmup_steps", int(ws_n), True))
    return out


def _same(ds_val: Any, hf_val: Any) -> bool:
    """The Trainer's own comparison (``ds_val != hf_val``), with float tolerance."""
    if isinstance(ds_val, list) and isinstance(hf_val, list):
        return len(ds_val) == len(hf_val) and all(_same(a, b) for a, b in zip(ds_val, hf_val))
    if isinstance(ds_val, bool) or isinstance(hf_val, bool):
        return ds_val == hf_val
    a, b = _num(ds_val), _num(hf_val)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return ds_val == hf_val


def _has_string_number(v: Any) -> bool:
    if isinstance(v, list):
        return any(_has_string_number(x) for x in v)
    return isinstance(v, str) and _numlike(v) is not None


def _strip_strings(v: Any) -> Any:
    if isinstance(v, list):
        return [_strip_strings(x) for x in v]
    n = _numlike(v) if isinstance(v, str) else None
    return (int(n) if n is not None and n.is_integer() and "." not in v and "e" not in v.lower()
            else n) if n is not None else v


def trainer_mismatch(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Config values that differ from the Trainer's arguments (the Trainer refuses to start)."""
    # A config the engine printed in the log already passed the Trainer's own check (the
    # engine starts after it), with "auto" values filled in: comparing it again with
    # default arguments can only be wrong.
    if ctx.ds_source == "log":
        return
    if ctx.uses_trainer and ctx.ds is not None and ctx.trainer_args:
        for ds_key, hf_name, hf_val, explicit in _pairs(ctx):
            if not ctx.cfg_has(ds_key):
                continue
            ds_val = ctx.cfg_get(ds_key)
            if ds_val == "auto" or ds_val is None or _same(ds_val, hf_val):
                continue
            shown = _show(ds_val)
            where = (f"--{hf_name.split(' ')[0]} {_show(hf_val)}" if explicit else
                     f"{hf_name} {_show(hf_val)} (the Trainer's default: the command line does "
                     f"not set it)")
            text = (f"{ds_key} is {shown} in the config but the Trainer has {where}; "
                    f"transformers checks this pair when training starts and stops with "
                    f"'Please correct the following DeepSpeed config values that mismatch "
                    f"TrainingArguments values: - ds {ds_key}={ds_val} vs hf {hf_name.split(' ')[0]}="
                    f"{hf_val}'.")
            change = None
            if _has_string_number(ds_val) and _same(_strip_strings(ds_val), hf_val):
                text = (f"{ds_key} is the string {shown} in the config, and the Trainer compares "
                        f"it with the number {_show(hf_val)} from {hf_name}: a string never equals "
                        f"a number, so it reports a mismatch that reads 'ds {ds_key}={ds_val} vs "
                        f"hf {hf_name.split(' ')[0]}={hf_val}' although both print the same. Write "
                        f"the value without quotes.")
                change = {"op": "set", "path": ds_key, "old": ds_val, "new": _strip_strings(ds_val)}
            else:
                # "auto" is what the Trainer wants: it then takes the argument's value.
                change = {"op": "set", "path": ds_key, "old": ds_val, "new": "auto"}
            yield _finding(
                text, path=ds_key, severity="" if explicit else "warning",
                fix=f"set {ds_key} from {shown} to \"auto\" (the Trainer fills in {hf_name}) or "
                    f"to {_show(hf_val)}",
                change=change)
    # Accelerate: its mixed_precision must agree with the DeepSpeed config file it points to.
    acc = ctx.accelerate
    if acc is not None and acc.deepspeed is not None and not acc.deepspeed.synthesized:
        mp = acc.get("mixed_precision")
        ds = acc.deepspeed
        for prec in ("fp16", "bf16"):
            other = "bf16" if prec == "fp16" else "fp16"
            if mp == prec and _enabled(ds.get(f"{other}.enabled")):
                pos = acc.locate("mixed_precision")
                yield _finding(
                    f"The Accelerate config sets mixed_precision: {prec} (line "
                    f"{pos.line if pos else '?'} of {acc.path}) but the DeepSpeed config enables "
                    f"{other}: Accelerate stops with '`--mixed_precision` arg cannot be set to "
                    f"`{prec}` when `{other}` is set in the DeepSpeed config file.'",
                    path=f"{other}.enabled", file=ds.path, line=ds.line(f"{other}.enabled"),
                    fix=f"make them agree: mixed_precision: {other} in {acc.path}, or "
                        f"{prec}.enabled true and {other}.enabled false in {ds.path}")


# ------------------------------------------------------------ DS312 overlap_comm buckets

_DEFAULT_BUCKET = 500_000_000  # DeepSpeed's default reduce/allgather bucket (elements)


def overlap_comm_buckets(ctx: Context, rule: Any) -> Iterator[Finding]:
    """ZeRO-1/2 overlap_comm holds about 4.5 x (allgather + reduce buckets) in 16-bit values."""
    stage = _stage(ctx)
    if stage not in (1, 2) or ctx.cfg_get("zero_optimization.overlap_comm") is not True:
        return
    sizes: dict[str, float] = {}
    notes: list[str] = []
    for key in ("allgather_bucket_size", "reduce_bucket_size"):
        v = ctx.cfg_get(f"zero_optimization.{key}")
        n = _numlike(v)
        if n is not None:
            sizes[key] = n
        elif v == "auto" and key == "reduce_bucket_size" and getattr(ctx.model, "hidden_size", None):
            h = ctx.model.hidden_size
            sizes[key] = float(h * h)
            notes.append(f"reduce_bucket_size \"auto\" = hidden_size^2 = {h}^2 under the Trainer")
        elif v in (None, "auto"):
            sizes[key] = float(_DEFAULT_BUCKET)
            notes.append(f"{key} {'not set' if v is None else 'auto'}: DeepSpeed's default 5e8")
        else:
            return
    need = 4.5 * 2 * (sizes["allgather_bucket_size"] + sizes["reduce_bucket_size"])
    gpu = ctx.gpu_memory_bytes()
    source = "--env" if ctx.env_get("gpus") else "the log"
    if not gpu:
        ctx.missing(rule.code, "the overlap_comm buckets against GPU memory", "--env")
        return
    if need < 0.5 * gpu:
        return
    suggest = 2e8
    after = 4.5 * 2 * 2 * suggest
    extra = f" ({'; '.join(notes)})" if notes else ""
    yield _finding(
        f"ZeRO-{stage} with overlap_comm true keeps about 4.5 x (allgather_bucket_size + "
        f"reduce_bucket_size) 16-bit values in flight: 4.5 x ({sizes['allgather_bucket_size']:.3g} + "
        f"{sizes['reduce_bucket_size']:.3g}) x 2 bytes = {_gb(need)} ({_gib(need)}), "
        f"{need / gpu:.0%} of the {_gib(gpu)} GPU (from {source}){extra}; that leaves too little "
        f"for the model and activations.",
        path="zero_optimization.reduce_bucket_size" if ctx.cfg_has("zero_optimization.reduce_bucket_size")
        else "zero_optimization.overlap_comm",
        fix=f"set zero_optimization.allgather_bucket_size and reduce_bucket_size to 2e8 "
            f"(about {_gb(after)}), or overlap_comm to false")


# ------------------------------------------------------------ DS313 LAMB + optimizer offload

def lamb_with_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    """LAMB has no CPU implementation, so ZeRO-Offload cannot run it."""
    typ = ctx.cfg_get("optimizer.type")
    dev = _device(ctx.cfg_get("zero_optimization.offload_optimizer.device"))
    if not isinstance(typ, str) or "lamb" not in typ.lower() or dev is None:
        return
    yield _finding(
        f"optimizer.type is {_show(typ)} with zero_optimization.offload_optimizer.device {_show(dev)}: "
        f"ZeRO-Offload runs the optimizer step on the CPU and works with optimizers that have "
        f"both a CPU and a GPU implementation, except LAMB, which has none on the CPU.",
        path="optimizer.type",
        fix=f"set optimizer.type from {_show(typ)} to \"AdamW\" (DeepSpeedCPUAdam runs on the CPU), "
            f"or delete zero_optimization.offload_optimizer to keep LAMB")


# ------------------------------------------------------------ DS314 stage-3 16-bit save

def stage3_no_16bit_save(ctx: Context, rule: Any) -> Iterator[Finding]:
    """ZeRO-3 without stage3_gather_16bit_weights_on_model_save: saves hold placeholders."""
    if _stage(ctx) != 3:
        return
    key = "zero_optimization.stage3_gather_16bit_weights_on_model_save"
    old_key = "zero_optimization.stage3_gather_fp16_weights_on_model_save"
    alias = "zero_optimization.gather_16bit_weights_on_model_save"
    for k in (key, old_key, alias):
        v = ctx.cfg_get(k)
        if v is True or v == "true":
            return
    val = ctx.cfg_get(key)
    state = "missing (default false)" if val is None else f"{_show(val)}"
    yield _finding(
        f"ZeRO stage 3 partitions every weight across the GPUs, and {key} is {state}: "
        f"save_model() / save_16bit_model() then write no usable 16-bit weights (only "
        f"placeholders; a 'tensor([1.])' shape is a ZeRO-3 placeholder), and you need "
        f"zero_to_fp32.py on the checkpoint to get the model back.",
        path=key,
        # No automatic change: the gather builds the whole 16-bit model in rank 0's CPU memory at
        # save time, which a run that saves fine today might not have room for.
        fix=f"set {key} to true (costs one gather of the full 16-bit model into rank 0's CPU "
            f"memory at save time)")


# ------------------------------------------------------------ DS315-DS317 PEFT / QLoRA

def _uses_peft(ctx: Context) -> bool | None:
    if any(getattr(s, "uses_peft", False) for s in ctx.scripts):
        return True
    for k in ("use_peft_lora", "use_peft", "lora_r", "lora_rank", "lora_alpha", "finetuning_type",
              "peft_type", "use_lora"):
        if k in ctx.trainer_args:
            v = ctx.trainer_args[k]
            if k == "finetuning_type":
                return str(v).lower() in ("lora", "qlora")
            return _truthy_arg(v) if k.startswith("use") else True
    if ctx.script_sources:
        return any("peft" in src and ("LoraConfig" in src or "get_peft_model" in src)
                   for src in ctx.script_sources.values())
    return None


def fsdp_peft_orig_params(ctx: Context, rule: Any) -> Iterator[Finding]:
    """FSDP + PEFT with fsdp_use_orig_params true: no memory saved on frozen weights."""
    acc = ctx.accelerate
    if acc is None or str(acc.get("distributed_type", "")).upper() != "FSDP":
        return
    v = acc.get("fsdp_config.fsdp_use_orig_params")
    if not (v is True or str(v).lower() == "true"):
        return
    peft = _uses_peft(ctx)
    if peft is None:
        ctx.missing(rule.code, "whether PEFT/LoRA is used with FSDP", "--script")
        return
    if not peft:
        return
    pos = acc.locate("fsdp_config.fsdp_use_orig_params")
    yield _finding(
        "The Accelerate config runs FSDP with fsdp_use_orig_params: true, and the run trains "
        "PEFT adapters: with the original parameters exposed, FSDP keeps full gradients/optimizer "
        "bookkeeping for frozen and trainable weights alike, so PEFT saves little GPU memory "
        "(PEFT's FSDP guide: it must be false, with PEFT's fsdp_auto_wrap_policy wrapping "
        "trainable and frozen parameters apart).",
        path="fsdp_config.fsdp_use_orig_params", file=acc.path, line=pos.line if pos else None,
        fix="set fsdp_config.fsdp_use_orig_params from true to false in the Accelerate config "
            "(and use peft's fsdp_auto_wrap_policy)")


def _qlora(ctx: Context) -> tuple[bool | None, str]:
    """(4-bit quantized training?, where that was seen)."""
    for k in ("use_4bit_quantization", "load_in_4bit"):
        if k in ctx.trainer_args and _truthy_arg(ctx.trainer_args[k]):
            return True, f"--{k}"
    if str(ctx.trainer_args.get("quantization_bit", "")) == "4":
        return True, "--quantization_bit 4"
    q = (ctx.model_config or {}).get("quantization_config")
    if isinstance(q, dict) and (q.get("load_in_4bit") is True or q.get("_load_in_4bit") is True):
        return True, "the model's quantization_config"
    for path, src in ctx.script_sources.items():
        if "load_in_4bit=True" in src.replace(" ", "") or "bnb_4bit_quant_type" in src:
            return True, path
    if ctx.trainer_args or ctx.script_sources or ctx.model_config:
        return False, ""
    return None, ""


def _quant_storage(ctx: Context) -> tuple[str | None, str]:
    """(bnb_4bit_quant_storage dtype, where it was seen)."""
    for k in ("bnb_4bit_quant_storage_dtype", "bnb_4bit_quant_storage"):
        if k in ctx.trainer_args:
            return str(ctx.trainer_args[k]).replace("torch.", ""), f"--{k}"
    for sf in ctx.scripts:
        for d in getattr(sf, "dtypes", ()):
            if d.key == "bnb_4bit_quant_storage" and d.value:
                return d.value, f"{sf.path}:{d.site.line}"
    q = (ctx.model_config or {}).get("quantization_config")
    if isinstance(q, dict) and q.get("bnb_4bit_quant_storage"):
        return str(q["bnb_4bit_quant_storage"]).replace("torch.", ""), "the model's quantization_config"
    return None, ""


def _mixed_fp16(ctx: Context) -> str | None:
    """Where fp16 mixed precision is switched on, or None."""
    if _enabled(ctx.cfg_get("fp16.enabled")):
        return "fp16.enabled in the DeepSpeed config"
    if ctx.acc_get("mixed_precision") == "fp16":
        return "mixed_precision: fp16 in the Accelerate config"
    v = ctx.trainer_args.get("fp16")
    if v is not None and _truthy_arg(v):
        return "--fp16"
    return None


def qlora_storage_dtype(ctx: Context, rule: Any) -> Iterator[Finding]:
    """QLoRA with fp16 mixed precision needs bnb_4bit_quant_storage float32."""
    q, q_where = _qlora(ctx)
    if not q:
        return
    fp16 = _mixed_fp16(ctx)
    if fp16 is None:
        return
    storage, s_where = _quant_storage(ctx)
    if storage is None:
        ctx.missing(rule.code, "the QLoRA bnb_4bit_quant_storage dtype", "--script or --model")
        return
    if storage in ("float32", "fp32"):
        return
    file = line = None
    if fp16.startswith("fp16.enabled"):
        path = "fp16.enabled"
    elif fp16.startswith("mixed_precision") and ctx.accelerate is not None:
        path, file = "mixed_precision", ctx.accelerate.path
        line = ctx.accelerate.line("mixed_precision")
    else:
        # The Trainer's --fp16: a command-line argument, not a config key (so no config line).
        path, file = "fp16", "command line"
    yield _finding(
        f"4-bit QLoRA training ({q_where}) stores the quantized weights as {storage} "
        f"(bnb_4bit_quant_storage, {s_where}) while fp16 mixed precision is on ({fp16}): with fp16 "
        f"automatic mixed precision the storage dtype must be float32 (PEFT's QLoRA guide; "
        f"bfloat16 storage is for pure bf16 training), otherwise the sharded flat parameters mix "
        f"dtypes and the run fails or trains on wrongly cast weights.",
        path=path, file=file, line=line,
        fix=f"set bnb_4bit_quant_storage from {storage} to float32 (torch.float32) where the "
            f"BitsAndBytesConfig is built ({s_where}), or train in bf16 with bfloat16 storage")


def qlora_zero3_init(ctx: Context, rule: Any) -> Iterator[Finding]:
    """QLoRA + ZeRO-3 through Accelerate needs zero3_init_flag: true."""
    acc = ctx.accelerate
    if acc is None or _stage(ctx) != 3:
        return
    q, q_where = _qlora(ctx)
    if q is None:
        ctx.missing(rule.code, "whether the model is loaded in 4 bits (QLoRA)", "--script or --model")
        return
    if not q:
        return
    flag = acc.get("deepspeed_config.zero3_init_flag")
    if flag is True or str(flag).lower() == "true":
        return
    pos = acc.locate("deepspeed_config.zero3_init_flag") or acc.locate("deepspeed_config")
    yield _finding(
        f"4-bit QLoRA ({q_where}) with ZeRO-3 through Accelerate needs "
        f"deepspeed_config.zero3_init_flag: true, and it is "
        f"{'missing' if flag is None else _show(flag)}: without zero.Init every rank loads the "
        f"whole quantized model before DeepSpeed shards it (PEFT's QLoRA + ZeRO-3 guide).",
        path="deepspeed_config.zero3_init_flag", file=acc.path, line=pos.line if pos else None,
        fix="set deepspeed_config.zero3_init_flag to true in the Accelerate config")


# ------------------------------------------------------------ DS318 numbers written as strings

_NUMERIC_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                 "gradient_clipping", "steps_per_print", "zero_optimization.stage",
                 "optimizer.params.lr", "optimizer.params.eps", "optimizer.params.weight_decay",
                 "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps",
                 "scheduler.params.warmup_max_lr", "scheduler.params.warmup_min_lr",
                 "fp16.initial_scale_power", "fp16.loss_scale", "fp16.loss_scale_window",
                 "fp16.hysteresis", "fp16.min_loss_scale")


def numbers_as_strings(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Numeric settings written as strings ("8"): crashes or silent mismatches."""
    doc = _lintable(ctx)
    if doc is None:
        return
    for key in _NUMERIC_KEYS:
        v = doc.get(key)
        if not isinstance(v, str) or v == "auto" or _numlike(v) is None:
            continue
        new = _strip_strings(v)
        if key in _BATCH:
            effect = (f"DeepSpeed computes with it and crashes at deepspeed.initialize with a "
                      f"TypeError (e.g. 'unsupported operand type(s) for //: 'str' and 'int'')")
            sev = "error"
        elif key.startswith(("optimizer.", "scheduler.")) or key == "gradient_clipping":
            effect = "DeepSpeed passes the string on, and the optimizer/engine fails when it computes with it"
            sev = "error"
        else:
            effect = "DeepSpeed's config model converts it, but the Trainer's check compares it with a number and reports a mismatch"
            sev = "warning"
        yield _finding(
            f"{key} is the string {_show(v)}, not the number {_show(new)}: {effect}.",
            path=key, severity=sev, fix=f"write {key}: {_show(new)} (no quotes)",
            change={"op": "set", "path": key, "old": v, "new": new})


# ------------------------------------------------------------ DS320 --config vs the log's config

def _leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data


def config_differs_from_log(ctx: Context, rule: Any) -> Iterator[Finding]:
    """The config given with --config is not the one the logged run used."""
    if ctx.ds is None or ctx.ds_source not in ("config", "accelerate") or not ctx.ds_from_log:
        return
    lf = ctx.log_facts
    ev_map = getattr(lf, "evidence", None) or {}
    evidence = tuple(e for e in (ev_map.get("ds-config-json") or ev_map.get("engine-config"),) if e)
    where = ("the user config the engine printed (json = {...})"
             if getattr(lf, "ds_config_source", None) == "json"
             else "the engine's printed configuration")
    diffs: list[tuple[str, Any, Any]] = []
    missing = object()
    for path, mine in _leaves(ctx.ds.data):
        if mine == "auto" or isinstance(mine, (dict, list)) and not mine:
            continue
        theirs = lookup(ctx.ds_from_log, path, missing)
        if theirs is missing or theirs == "auto":
            continue
        # Accelerate (so the Trainer too) always overwrites steps_per_print with inf
        # (accelerate/utils/dataclasses.py): not a sign of another config.
        if path == "steps_per_print" and isinstance(theirs, float) and math.isinf(theirs):
            continue
        a, b = _numlike(mine), _numlike(theirs)
        if _same(mine, theirs) or (a is not None and b is not None and math.isclose(a, b)):
            continue
        # DeepSpeed normalizes names it prints ("AdamW" -> "adamw", enums as their value).
        if isinstance(mine, str) and isinstance(theirs, str) and \
                mine.strip().lower() == theirs.strip().lower().rpartition(".")[2]:
            continue
        diffs.append((path, mine, theirs))
    for path, mine, theirs in diffs[:10]:
        yield _finding(
            f"{path} is {_show(mine)} in {ctx.ds.path}, but the run in the log used "
            f"{_show(theirs)} ({where}): the log was not produced with this config, or the config "
            f"changed since. Findings that combine the two may not apply.",
            path=path, evidence=evidence,
            fix=f"give the config the logged run really used, or rerun with this one "
                f"({path}: {_show(theirs)} in the log)")
