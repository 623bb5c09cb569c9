"""Hooks of the symptom diagnoses (DS1xx): from what the log shows to why, and what to change.

Each hook is ``hook(ctx, rule) -> Iterable[Finding]``; the engine fills the rule's code, name,
title and references, and the config line of ``config_path``. Messages carry the numbers the log
and the config give; fixes name the key with its old and new value. The knowledge comes from the
Transformers/PEFT DeepSpeed guides (see /rules/*.yaml references).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterator

from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Evidence, Finding, Symptom

# --------------------------------------------------------------------------------- shared helpers


def finding(message: str, fix: str = "", path: str | None = None, severity: str = "",
            evidence: tuple[Evidence, ...] = (), title: str = "",
            change: dict[str, Any] | None = None, file: str | None = None,
            line: int | None = None) -> Finding:
    """A Finding whose rule/name/title defaults the engine fills in."""
    return Finding(rule="", name="", severity=severity, title=title, message=message, fix=fix,
                   config_path=path, config_line=line, config_file=file, evidence=evidence,
                   fix_change=change)


def truthy(v: Any) -> bool:
    """True for true/"true"/"True"/1/"1"/"yes" (Trainer arguments come typed or as text)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    return isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "on")


def log_facts(ctx: Context) -> Any:
    """The LogFacts of the log (an empty one when there is no log or nothing stated)."""
    if ctx.log_facts is not None:
        return ctx.log_facts
    from dsdoctor.facts.logfacts import LogFacts

    return LogFacts()


def vals(s: Symptom | None, name: str, agg: str = "last") -> Any:
    """One aggregated value of a symptom field (``first``/``last``/``min``/``max``/list)."""
    if s is None:
        return None
    v = s.values.get(name)
    if isinstance(v, dict):
        return v.get(agg)
    if isinstance(v, list):
        return v[0] if v and agg in ("first", "last") else v
    return v


def version_tuple(v: Any) -> tuple[int, ...] | None:
    """(4, 38, 2) for "4.38.2", "4.38.2+cu121", "v4.38.2.dev0"; None when not a version."""
    t = parse_version(v) if isinstance(v, str) else ()
    return t if len(t) >= 2 else None


def gib(b: float | None) -> str:
    """Bytes as GiB with two decimals (DeepSpeed and torch print GiB/GB that way)."""
    return "?" if b is None else f"{b / 2**30:.2f} GiB"


def fmt_scale(x: Any) -> str:
    """A loss scale as an integer power of two when it is one (65536 = 2^16)."""
    if not isinstance(x, (int, float)) or x <= 0 or not math.isfinite(x):
        return str(x)
    p = math.log2(x)
    return f"{int(x)} (2^{int(p)})" if p.is_integer() else f"{x:g}"


def offload_device(ctx: Context, which: str) -> str | None:
    """Device of ``zero_optimization.offload_<which>`` ("cpu"/"nvme") or None when not offloaded.

    An Accelerate config's ``offload_<which>_device`` counts when the DeepSpeed config is silent.
    """
    dev = ctx.cfg_get(f"zero_optimization.offload_{which}.device")
    if dev is None and ctx.accelerate is not None:
        dev = ctx.acc_get(f"deepspeed_config.offload_{which}_device")
    if isinstance(dev, str) and dev.lower() in ("cpu", "nvme"):
        return dev.lower()
    return None


def zero_stage(ctx: Context) -> int | None:
    """ZeRO stage from the DeepSpeed config, else the Accelerate config; None when unknown."""
    if ctx.ds is not None and ctx.cfg_has("zero_optimization.stage"):
        return ctx.zero_stage()
    st = ctx.acc_get("deepspeed_config.zero_stage")
    if isinstance(st, int) and not isinstance(st, bool):
        return st
    return 0 if ctx.ds is not None else None


def trainer_arg(ctx: Context, name: str) -> Any:
    """A Trainer/script argument from --args, the log's command line or the printed dump."""
    return ctx.trainer_args.get(name)


def model_name(ctx: Context) -> str | None:
    """The model name or path: --model's config, else the command line in the log."""
    from dsdoctor.facts.logfacts import MODEL_ARGS

    v = getattr(ctx.model, "name_or_path", None)
    if isinstance(v, str) and v:
        return v
    for key in MODEL_ARGS:
        v = ctx.trainer_args.get(key)
        if isinstance(v, str) and v:
            return v
    return getattr(ctx.model, "path", None)


def _precision_flag(ctx: Context, key: str) -> Any:
    """``fp16.enabled``/``bf16.enabled`` of the DeepSpeed config; None for a config Accelerate
    synthesized from its own keys (the Accelerate key is reported instead)."""
    if ctx.ds is not None and ctx.ds_source == "accelerate" and getattr(ctx.ds, "synthesized", False):
        return None
    return ctx.cfg_get(key)


def fp16_in_use(ctx: Context) -> list[tuple[str, str]]:
    """Where fp16 mixed precision is switched on: [(config_path or argument, description)]."""
    out: list[tuple[str, str]] = []
    en = _precision_flag(ctx, "fp16.enabled")
    if en is True:
        where = "the DeepSpeed config" if ctx.ds_source != "log" else "the engine's printed config"
        out.append(("fp16.enabled", f'"fp16": {{"enabled": true}} in {where}'))
    elif en == "auto" and truthy(trainer_arg(ctx, "fp16")):
        out.append(("fp16.enabled", '"fp16": {"enabled": "auto"} with the Trainer\'s --fp16'))
    mp = ctx.acc_get("mixed_precision")
    if isinstance(mp, str) and mp.lower() == "fp16":
        out.append(("mixed_precision", "mixed_precision: fp16 in the Accelerate config"))
    if truthy(trainer_arg(ctx, "fp16")) and not any(p == "fp16.enabled" for p, _ in out):
        out.append(("fp16", "the Trainer argument --fp16"))
    lmp = log_facts(ctx).accelerate.get("mixed_precision")
    if isinstance(lmp, str) and lmp.lower() == "fp16" and not out:
        out.append(("mixed_precision", "Accelerate's 'Mixed precision type: fp16' in the log"))
    return out


def bf16_in_use(ctx: Context) -> list[tuple[str, str]]:
    """Where bf16 is switched on: [(config_path or argument, description)]."""
    out: list[tuple[str, str]] = []
    en = _precision_flag(ctx, "bf16.enabled")
    if en is True or (en == "auto" and truthy(trainer_arg(ctx, "bf16"))):
        out.append(("bf16.enabled", '"bf16": {"enabled": true} in the DeepSpeed config'))
    mp = ctx.acc_get("mixed_precision")
    if isinstance(mp, str) and mp.lower() == "bf16":
        out.append(("mixed_precision", "mixed_precision: bf16 in the Accelerate config"))
    if truthy(trainer_arg(ctx, "bf16")) and not out:
        out.append(("bf16", "the Trainer argument --bf16"))
    return out


def bf16_model(ctx: Context) -> str | None:
    """Why the model is known to be bf16-pretrained, or None."""
    m = ctx.model
    if m is not None:
        if getattr(m, "dtype", None) == "bfloat16":
            return f"its config.json says torch_dtype bfloat16 ({getattr(m, 'path', '')})"
        fam = getattr(m, "bf16_family", None)
        if fam:
            return f"it is a {fam} model, a family pretrained in bf16"
    from dsdoctor.facts.modelinfo import bf16_family

    name = model_name(ctx)
    if name:
        fam = bf16_family(name)
        if fam:
            return f"{name} is a {fam} model, a family pretrained in bf16"
    return None


def param_count(ctx: Context) -> tuple[int | None, int | None, str]:
    """(total params, largest layer params, where from) from --model, else the log."""
    m = ctx.model
    pc = getattr(m, "params", None) if m is not None else None
    if pc is not None:
        return pc.total, pc.largest_layer, f"computed from {getattr(m, 'path', 'config.json')}"
    n = log_facts(ctx).num_params
    if isinstance(n, int) and n > 0:
        return n, None, "stated in the log"
    return None, None, ""


def gpu_total_bytes(ctx: Context) -> tuple[int | None, str]:
    """Memory of one GPU: the OOM message's total capacity, else the env snapshot, else the log."""
    t = vals(ctx.symptom("gpu-oom"), "total_bytes", "max")
    if isinstance(t, (int, float)) and t > 0:
        return int(t), "the OOM message"
    g = ctx.gpu_memory_bytes()
    if g:
        return g, "the env snapshot"
    for gpu in log_facts(ctx).gpus:
        if isinstance(gpu.get("total_bytes"), int):
            return gpu["total_bytes"], "nvidia-smi in the log"
    return None, ""


def script_evidence(site: Any, path: str) -> Evidence:
    """Evidence pointing at a line of a training script."""
    return Evidence(file=path, line=site.line, text=site.text)


# ------------------------------------------------------------------------- DS101 / DS102: fp16


#: More overflows than this, or a scale this low, is not the start-up search of the scaler.
_BURST_MAX = 50
_LOW_SCALE = 8.0


def _lowest_scale(s: Symptom) -> Any:
    """The lowest loss scale the overflows reached (the next scale, else the attempted one)."""
    low = vals(s, "next_scale", "min")
    return vals(s, "attempted_scale", "min") if low is None else low


def _overflow_summary(s: Symptom) -> str:
    first = vals(s, "attempted_scale", "first")
    low = _lowest_scale(s)
    span = f" (lines {s.first.line}-{s.last.line})" if s.last.line != s.first.line else \
        f" (line {s.first.line})"
    txt = f"{s.count} fp16 overflow(s){span}"
    if first is not None:
        txt += f"; the loss scale went from {fmt_scale(first)} down to {fmt_scale(low)}"
    return txt


def _steps_after(ctx: Context, ev: Evidence) -> int:
    return sum(1 for p in ctx.timeline if p.file == ev.file and p.line > ev.line)


def is_collapse(ctx: Context) -> bool:
    """The scaler gave up or is about to: minimum reached, or a long run of overflows."""
    if ctx.has_symptom("loss-scale-collapse"):
        return True
    s = ctx.symptom("fp16-overflow")
    if s is None:
        return False
    low = _lowest_scale(s)
    return s.count > _BURST_MAX or (isinstance(low, (int, float)) and low <= _LOW_SCALE)


def fp16_overflow_warmup(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS101: a short burst of overflows while the dynamic scaler searches (normal)."""
    s = ctx.symptom("fp16-overflow")
    if s is None or is_collapse(ctx) or ctx.has_symptom("nan-loss"):
        return
    after = _steps_after(ctx, s.last)
    tail = (f" Training went on: {after} progress line(s) after the last overflow."
            if after else "")
    power = ctx.cfg_get("fp16.initial_scale_power")
    start = f" (fp16.initial_scale_power {power})" if isinstance(power, int) else ""
    yield finding(
        f"{_overflow_summary(s)}{start}. A few skipped steps at the start of fp16 training are "
        f"the dynamic loss scaler searching for a scale that fits; it recovered.{tail}",
        fix="Nothing to do. If it keeps happening later in training, see DS102.",
        evidence=s.evidence)


def loss_scale_collapse(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS102: the scaler cannot find a scale (minimum reached or a long run of overflows)."""
    if not is_collapse(ctx):
        return
    parts: list[str] = []
    ev: list[Evidence] = []
    col = ctx.symptom("loss-scale-collapse")
    ovf = ctx.symptom("fp16-overflow")
    if ovf is not None:
        parts.append(_overflow_summary(ovf))
        ev.extend(ovf.evidence)
    if col is not None:
        parts.append(f"the scaler reached its minimum {col.count} time(s) (line {col.first.line}"
                     f": {col.first.text[:120]!r})")
        ev[:0] = col.evidence
    why = ("This is not the start-up search: the scale keeps halving because the fp16 "
           "gradients overflow whatever the scale, so every step is skipped (the model does "
           "not learn) or the run stops")
    power = ctx.cfg_get("fp16.initial_scale_power")
    bf16 = bf16_model(ctx)
    fixes = []
    path = None
    if bf16:
        fixes.append(f"train in bf16 instead of fp16 ({bf16}): "
                     '"bf16": {"enabled": true}, "fp16": {"enabled": false} (Ampere or newer), '
                     "or fp32")
    if ctx.cfg_has("fp16"):
        path = "fp16.initial_scale_power"
        old = power if isinstance(power, int) else 16
        fixes.append(f'raise fp16.initial_scale_power from {old} to 32 (the guide\'s fix when '
                     "the scaler cannot find a scale)")
    else:
        fixes.append("raise fp16.initial_scale_power to 32 in the DeepSpeed config")
    if not bf16:
        fixes.append("or switch to bf16 (Ampere or newer GPUs) / fp32")
    yield finding("; ".join(parts) + f". {why}.",
                  fix="; ".join(fixes) + ".", path=path, evidence=tuple(ev[:8]))


# ------------------------------------------------------------------------------- DS103 nan-loss


def nan_loss(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS103: NaN/inf loss or gradient norm, with the causes this run makes likely."""
    s = ctx.symptom("nan-loss")
    if s is None:
        return
    causes: list[str] = []
    fixes: list[str] = []
    path = None
    bf16 = bf16_model(ctx)
    fp16 = fp16_in_use(ctx)
    if bf16 and fp16:
        causes.append(f"the model was pretrained in bf16 ({bf16}) and runs in fp16 "
                      f"({fp16[0][1]}): its activations exceed fp16's range (max 65504)")
        fixes.append("train in bf16 (Ampere or newer) or fp32, not fp16")
        path = fp16[0][0]
    elif fp16:
        causes.append(f"fp16 mixed precision ({fp16[0][1]})")
        path = fp16[0][0]
    ovf = ctx.symptom("fp16-overflow")
    if ovf is not None and ovf.first.file == s.first.file and ovf.first.line < s.first.line:
        causes.append(f"{ovf.count} fp16 overflow(s) came first (line {ovf.first.line})")
    lr = trainer_arg(ctx, "learning_rate")
    if lr is None:
        lr = ctx.cfg_get("optimizer.params.lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr >= 1e-3:
        causes.append(f"a high learning rate ({lr:g})")
        fixes.append(f"lower the learning rate (now {lr:g}) or add warmup")
    clip = ctx.cfg_get("gradient_clipping")
    if ctx.ds is not None and (clip in (None, 0, 0.0)):
        fixes.append("set gradient_clipping (e.g. 1.0)")
    if bf16 is None and fp16 and not ctx.model:
        fixes.append("check the model's pretraining dtype: pass --model PATH (config.json "
                     "torch_dtype)")
    if not causes:
        causes.append("no precision or learning-rate cause is visible in the inputs given")
    if not fixes:
        fixes.append("check the data for empty/all-masked batches, lower the learning rate, "
                     "and compare with a run in fp32")
    where = f"first at line {s.first.line}" + (f", {s.count} times" if s.count > 1 else "")
    yield finding(f"The loss or gradient norm became NaN/inf ({where}). Likely cause(s): "
                  + "; ".join(causes) + ".", fix="; ".join(fixes) + ".", path=path,
                  severity="error", evidence=s.evidence)


# ------------------------------------------------------------------------- DS104 loss stuck at 0

_ZERO_MIN = 3


def loss_stuck_at_zero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS104: the loss is exactly 0 for several logged steps."""
    s = ctx.symptom("loss-zero")
    if s is None or s.count < _ZERO_MIN:
        return
    notes = []
    nan = ctx.symptom("nan-loss")
    if nan is not None:
        notes.append(f"the gradient norm is NaN too ({nan.count} line(s)): the weights are "
                     "probably NaN already and the loss is reported as 0")
    fp16 = fp16_in_use(ctx)
    bf16 = bf16_model(ctx)
    if fp16 and bf16:
        notes.append(f"a bf16-pretrained model runs in fp16 ({bf16})")
    extra = (" " + "; ".join(notes) + ".") if notes else ""
    yield finding(
        f"The loss is exactly 0 on {s.count} logged steps (first at line {s.first.line}).{extra} "
        "A real loss is never exactly 0: either every label is masked (-100, e.g. a prompt "
        "template that masks the answer, or sequences truncated before the answer), or the "
        "model produces NaN/inf that the logger shows as 0.",
        fix="Check a batch: count labels != -100; if the gradient norm is NaN, see DS103 "
            "(fp16 vs bf16, learning rate).",
        path=fp16[0][0] if (fp16 and bf16) else None, evidence=s.evidence)


# ------------------------------------------------------------------------ DS105 GPU OOM ladder


#: DeepSpeed's memory ladder, fastest first: (label, stage, offload opt, offload param).
_LADDER = (("ZeRO-2", 2, False, False), ("ZeRO-2 + offload_optimizer to CPU", 2, True, False),
           ("ZeRO-3", 3, False, False), ("ZeRO-3 + offload_optimizer to CPU", 3, True, False),
           ("ZeRO-3 + offload_optimizer + offload_param to CPU", 3, True, True))


def _model_states_gpu(ctx: Context, stage: int, opt: bool, param: bool) -> int | None:
    from dsdoctor.facts.estimate import offload_need

    total, largest, _ = param_count(ctx)
    if not total:
        return None
    gpus = ctx.world_size or 1
    row = offload_need(stage, total, largest or 0, gpus, 1, opt, param)
    return row.gpu_bytes


_STEP_FUNCS = {"_optimizer_step", "step", "_take_model_step", "unscale_and_clip_grads",
               "_optimizer_states_and_gradient_swap_in", "_prepare_fp32_grad_for_sub_group",
               "_reassign_or_swap_out_partitioned_parameters"}


def _optimizer_step_frame(ctx: Context, s: Symptom) -> str | None:
    """'stage3.py _optimizer_step, line N' when a DeepSpeed optimizer-step frame precedes the OOM."""
    ooms = [(e.file, e.line) for e in s.evidence]
    for f in ctx.facts_named("ds-frame"):
        func = f.values.get("func")
        if func not in _STEP_FUNCS:
            continue
        ev = f.evidence
        if any(ev.file == fl and abs(ev.line - ln) <= 200 for fl, ln in ooms):
            return f"{f.values.get('module')}.py {func}, log line {ev.line}"
    return None


def gpu_out_of_memory(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS105: CUDA OOM, with the next rung of the memory ladder for this config."""
    s = ctx.symptom("gpu-oom")
    if s is None:
        return
    tried = vals(s, "tried_bytes", "max")
    total, total_src = gpu_total_bytes(ctx)
    head = "CUDA out of memory"
    if isinstance(tried, (int, float)):
        head += f" while allocating {gib(tried)}"
    if total:
        head += f" on a {gib(total)} GPU"
    head += f" (line {s.first.line}" + (f", {s.count} times" if s.count > 1 else "") + ")."
    steps: list[str] = []
    path = None
    stage = zero_stage(ctx)
    opt = offload_device(ctx, "optimizer")
    par = offload_device(ctx, "param")
    gc = trainer_arg(ctx, "gradient_checkpointing")
    total_params, _, src = param_count(ctx)
    step_frame = _optimizer_step_frame(ctx, s)
    sub = ctx.cfg_get("zero_optimization.sub_group_size", 1e9)
    # Where the model states alone stand (DeepSpeed's estimator), when the size is known.
    states = ""
    if stage is not None and stage >= 2 and total_params:
        need = _model_states_gpu(ctx, stage, bool(opt), bool(par))
        if need is not None:
            states = (f" DeepSpeed's estimator puts the parameters, gradients and optimizer "
                      f"states alone at {gib(need)} per GPU for this setup "
                      f"({total_params:,} parameters {src}; activations come on top).")
    # ZeRO-2 overlap_comm buckets on a small GPU.
    if stage == 2 and ctx.cfg_get("zero_optimization.overlap_comm") is True and total:
        ag = ctx.cfg_get("zero_optimization.allgather_bucket_size", 5e8)
        rb = ctx.cfg_get("zero_optimization.reduce_bucket_size", 5e8)
        if isinstance(ag, (int, float)) and isinstance(rb, (int, float)):
            buf = 4.5 * (ag + rb)
            if buf > 0.25 * total:
                steps.append(f"overlap_comm with allgather_bucket_size {_num(ag)} + "
                             f"reduce_bucket_size {_num(rb)} reserves about {buf / 1e9:.1f} GB "
                             f"(4.5x the buckets) of a {gib(total)} GPU: lower both to 2e8, or "
                             "set overlap_comm false")
                path = "zero_optimization.allgather_bucket_size"
    if not truthy(gc) and (stage is None or stage < 3):
        steps.append("enable gradient checkpointing (--gradient_checkpointing, or "
                      "model.gradient_checkpointing_enable()): activations are often the "
                      "largest part")
    if stage is None:
        steps.append("use DeepSpeed ZeRO: stage 2, then stage 2 with offload_optimizer, then "
                      "stage 3 with offload_param (pass --config to get the exact next step)")
    elif stage < 2:
        steps.append(f"zero_optimization.stage {stage} -> 2 (partitions gradients too)")
        path = path or "zero_optimization.stage"
    elif stage == 2 and not opt:
        steps.append('add "offload_optimizer": {"device": "cpu", "pin_memory": true} to '
                     "zero_optimization (moves the optimizer states to CPU RAM)")
        path = path or "zero_optimization"
    elif stage == 2:
        steps.append("zero_optimization.stage 2 -> 3 (partitions the parameters too)")
        path = path or "zero_optimization.stage"
    elif stage >= 3 and not par:
        steps.append('add "offload_param": {"device": "cpu", "pin_memory": true}'
                     + ("" if opt else ' and "offload_optimizer": {"device": "cpu"}')
                     + " to zero_optimization")
        path = path or "zero_optimization"
    else:
        live = ctx.cfg_get("zero_optimization.stage3_max_live_parameters", 1e9)
        reuse = ctx.cfg_get("zero_optimization.stage3_max_reuse_distance", 1e9)
        steps.append(f"lower zero_optimization.stage3_max_live_parameters ({_num(live)}) and "
                     f"stage3_max_reuse_distance ({_num(reuse)}) to 1e8")
        if step_frame is None:
            steps.append(f"if the OOM is in the optimizer step, lower sub_group_size "
                         f"({_num(sub)}) to 1e8")
        steps.append("then NVMe offload (ZeRO-Infinity: offload_param/offload_optimizer "
                     'device "nvme" with nvme_path), or more GPUs')
        path = path or "zero_optimization.stage3_max_live_parameters"
    if step_frame is not None and stage is not None and stage >= 3:
        steps.insert(0, f"the OOM is in the optimizer step ({step_frame}): lower "
                        f"zero_optimization.sub_group_size ({_num(sub)}) to 1e8 first")
        path = "zero_optimization.sub_group_size"
    elif step_frame is not None:
        head += f" It happened in the optimizer step ({step_frame})."
    if any(sc.generate_calls for sc in ctx.scripts):
        steps.append("in generate(), fewer beams (num_beams) and a smaller batch")
    steps.append("a smaller per-device batch with more gradient accumulation")
    # Which ladder rung would fit the model states in half the GPU (room for activations).
    if total and total_params and stage is not None:
        for label, st, o, p in _LADDER:
            if (st, o, p) <= (stage, bool(opt), bool(par)):
                continue
            need = _model_states_gpu(ctx, st, o, p)
            if need is not None and need < 0.5 * total:
                steps.insert(0, f"by DeepSpeed's estimator, {label} needs {gib(need)} per GPU for "
                                "the model states: the first rung that leaves half the GPU "
                                "for activations")
                break
    src_note = f" (GPU size from {total_src})" if total_src else ""
    yield finding(head + states + src_note, fix="Next: " + steps[0] + ". Then: "
                  + "; ".join(steps[1:]) + "." if len(steps) > 1 else "Next: " + steps[0] + ".",
                  path=path, evidence=s.evidence)


def _num(v: Any) -> str:
    """Bucket-like sizes as DeepSpeed configs write them: 5e8, 1e9, 123456."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if v >= 1e5:
        mant, _, exp = f"{v:e}".partition("e")
        m = float(mant)
        if m == round(m, 2):
            return f"{m:g}e{int(exp)}"
    return f"{v:g}"


# ----------------------------------------------------------------------------- DS106 CPU OOM


def cpu_oom_killed(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS106: the OS killed a rank for host memory (-9, OOM killer, allocator failure)."""
    s = ctx.symptom("cpu-oom")
    if s is None:
        return
    from dsdoctor.facts.estimate import SCOPE_NOTE, offload_need

    lf = log_facts(ctx)
    bits = [f"A process ran out of host (CPU) RAM (line {s.first.line}: "
            f"{s.first.text[:100]!r}{'...' if len(s.first.text) > 100 else ''})."]
    fixes: list[str] = []
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    stage = zero_stage(ctx)
    total, largest, src = param_count(ctx)
    ram = ctx.env_get("cpu.ram_total_bytes")
    launch = lf.best_launch()
    script = (launch.script if launch else None) or ""
    if "zero_to_fp32" in script or any("zero_to_fp32" in e.text for e in s.evidence):
        bits.append("zero_to_fp32.py needs about twice the final fp32 weights in RAM.")
        fixes.append("run zero_to_fp32.py on a machine with more RAM, or save 16-bit weights "
                     "directly (stage3_gather_16bit_weights_on_model_save: true)")
    if (opt == "cpu" or par == "cpu") and total:
        gpus = ctx.env_get("gpus")
        per_node = len(gpus) if isinstance(gpus, list) and gpus else (ctx.world_size or 1)
        row = offload_need(stage or 2, total, largest or 0, per_node, lf.nodes or 1,
                           opt == "cpu", par == "cpu")
        bits.append(f"The config offloads to CPU ({'optimizer' if opt else ''}"
                    f"{' + ' if opt and par else ''}{'parameters' if par else ''}); DeepSpeed's "
                    f"estimator says that needs {gib(row.cpu_bytes)} of RAM per node for "
                    f"{total:,} parameters ({src}); these figures {SCOPE_NOTE} (see DS203).")
        if isinstance(ram, int):
            bits.append(f"The node has {gib(ram)}.")
    elif opt == "cpu" or par == "cpu":
        ctx.missing(rule.code, "the RAM the offload needs", "--model PATH")
    if (opt == "cpu" or par == "cpu") and not isinstance(ram, int):
        ctx.missing(rule.code, "CPU RAM against the offload", "--env snapshot.json")
    if opt == "cpu" or par == "cpu":
        fixes.append("offload less (offload_param back to GPU first), or NVMe offload "
                     '(ZeRO-3, device "nvme" with nvme_path) instead of CPU')
    if total and not (stage and stage >= 3):
        n = ctx.world_size or 1
        bits.append(f"Every rank loads the whole model into RAM before DeepSpeed partitions it "
                    f"({n} rank(s) x {total * 4 / 2**30:.1f} GiB in fp32).")
    fixes.append("with ZeRO-3, create TrainingArguments (Trainer) or HfDeepSpeedConfig "
                 "(own loop) before from_pretrained so the model is loaded already partitioned "
                 "(zero.Init), and load in the checkpoint's dtype (torch_dtype)")
    fixes.append("fewer ranks per node loading at once, or more RAM/swap")
    yield finding(" ".join(bits), fix="; ".join(fixes) + ".",
                  path="zero_optimization.offload_optimizer.device" if opt == "cpu" else None,
                  evidence=s.evidence)


# ------------------------------------------------------------------------ DS107 hang/timeouts


_TIMEOUT_TEXT = re.compile(r"timed out|timeout|watchdog|store based barrier|NCCL", re.I)


def collective_timeout(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS107: a collective or barrier timed out; rank the causes this run makes likely."""
    s = ctx.symptom("hang")
    if s is None:
        return
    op = vals(s, "op", "first")
    timeout = vals(s, "timeout_ms", "max")
    ws = vals(s, "world_size", "max")
    joined = vals(s, "joined", "min")
    lost_peer = any(re.search(r"closed by peer|connection reset|lost peer", e.text, re.I)
                    for e in s.evidence)
    head = (f"A collective lost its peer: the connection to another rank closed (line "
            f"{s.first.line}" if lost_peer else
            f"A collective operation or barrier timed out (line {s.first.line}")
    if op:
        head += f", op {op}"
    if isinstance(timeout, (int, float)):
        head += f", timeout {timeout / 1000:g} s"
    head += ")."
    causes: list[str] = []
    fixes: list[str] = []
    path = None
    # 1. A rank that died first: the others wait for it until the timeout.
    hang_lines = {(e.file, e.line) for e in s.evidence}
    consequence = False
    for kind in ("gpu-oom", "cpu-oom", "python-exception"):
        other = ctx.symptom(kind)
        if other is None:
            continue
        if kind == "python-exception":
            # The timeout itself is raised as an exception: only another error counts.
            own = [e for e in other.evidence if (e.file, e.line) not in hang_lines
                   and not _TIMEOUT_TEXT.search(e.text)]
            if not own:
                continue
            where = own[0]
        else:
            where = other.first
        causes.append(f"another rank failed ({kind} at line {where.line}) and the others "
                      "lost it or waited for it until the timeout; fix that failure")
        consequence = True
        break
    # 2. Store barrier: not all workers started.
    if isinstance(ws, int) and isinstance(joined, int) and joined < ws:
        causes.append(f"only {joined} of {ws} workers reached the rendezvous: some ranks never "
                      "started (another node not launched, wrong hostfile or MASTER_ADDR, "
                      "blocked port, or a rank crashed during start-up)")
        fixes.append("check that every node runs the launcher with the same MASTER_ADDR/"
                     "MASTER_PORT and that the port is reachable from all nodes")
    elif isinstance(ws, int) and isinstance(joined, int) and joined > ws:
        causes.append(f"{joined} workers registered at a rendezvous for world_size={ws}: "
                      "another job uses the same MASTER_ADDR:MASTER_PORT, or keys of an earlier "
                      "run were left in the store")
        fixes.append("give each job its own MASTER_PORT (and make sure stale processes of "
                     "earlier runs are gone)")
    # 3. ZeRO-3 generate without synced_gpus.
    stage = zero_stage(ctx)
    gen = [g for sc in ctx.scripts for g in sc.generate_without_sync()]
    if stage == 3 and gen:
        causes.append(f"ZeRO-3 with generate() called without synced_gpus=True "
                      f"({len(gen)} call(s) in the script): a rank that finishes generating "
                      "early stops joining the parameter all-gathers (see DS202)")
        fixes.append("pass synced_gpus=True to generate() (Transformers >= 4.28 does it "
                     "by itself only when it knows ZeRO-3 is on: HfDeepSpeedConfig, Trainer, "
                     "Accelerate)")
    elif stage == 3 and op and "ALLGATHER" in str(op).upper():
        causes.append("an all-gather under ZeRO-3 (parameter gathering): ranks took different "
                      "code paths, e.g. generate() without synced_gpus=True, or a forward "
                      "skipped on one rank")
        fixes.append("make every rank run the same forward passes; generate(..., "
                     "synced_gpus=True)")
    elif stage == 3 and not ctx.scripts:
        ctx.missing(rule.code, "generate() calls without synced_gpus", "--script train.py")
    elif stage is None and op and "ALLGATHER" in str(op).upper():
        causes.append("an all-gather timed out; under ZeRO-3 that is parameter gathering, and "
                      "the classic cause is generate() without synced_gpus=True on one rank "
                      "(give --config and --script to check)")
        ctx.missing(rule.code, "the ZeRO stage behind the all-gather", "--config ds_config.json")
    if not causes:
        causes.append("a slow step (checkpoint saving, evaluation or data loading on one "
                      "rank) longer than the timeout, or a network problem between GPUs/nodes")
    fixes.append("rerun with NCCL_DEBUG=INFO (and TORCH_DISTRIBUTED_DEBUG=DETAIL) to see which "
                 "rank is missing; if a step is legitimately long, raise the timeout "
                 "(Trainer --ddp_timeout, deepspeed.init_distributed(timeout=...))")
    # A peer lost because another rank died is fully explained by that rank's finding.
    if consequence and lost_peer:
        return
    # A timeout that only follows another rank's failure is a consequence, not the problem.
    yield finding(head + " Likely: " + "; ".join(causes) + ".", fix="; ".join(fixes) + ".",
                  path=path, evidence=s.evidence, severity="warning" if consequence else "")


# --------------------------------------------------------------------- DS108 op build failure


def op_build_failure(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS108: a DeepSpeed op failed to build/load: CUDA mismatch, no CUDA_HOME, ninja, ..."""
    s = ctx.symptom("op-build-failure")
    if s is None:
        return
    text = " ".join(e.text for e in s.evidence)
    inst = vals(s, "cuda_installed", "first")
    torch_cuda = vals(s, "cuda_torch", "first")
    op = vals(s, "op", "first")
    lf = log_facts(ctx)
    msgs: list[str] = []
    fixes: list[str] = []
    if inst and torch_cuda:
        msgs.append(f"the CUDA toolkit found (nvcc {inst}) does not match the CUDA torch was "
                    f"built with ({torch_cuda})")
        fixes.append(f"install CUDA toolkit {torch_cuda} and point CUDA_HOME at it, or install "
                     f"the torch build for CUDA {inst}; for a minor-version mismatch only, "
                     "DS_SKIP_CUDA_CHECK=1 skips the check")
    if "CUDA_HOME" in text or "cuda_home" in text.lower():
        msgs.append("CUDA_HOME is not set or has no nvcc: DeepSpeed cannot compile its CUDA ops")
        fixes.append("install the CUDA toolkit (nvcc) matching torch and export "
                     "CUDA_HOME=/usr/local/cuda-X.Y, or use a CUDA devel container")
    symbol = vals(s, "symbol", "first")
    if symbol:
        # The op was built; the process loads an older libstdc++ first (conda's or a package's).
        msgs.append(f"op {op or '?'} was built but cannot be loaded: the libstdc++ loaded first "
                    f"lacks {symbol}")
        fixes.append("make the process load a libstdc++ at least as new as the compiler that "
                     "built the op (conda install -c conda-forge libstdcxx-ng, or put the system "
                     "libstdc++ first with LD_PRELOAD), then delete the op's folder under "
                     "~/.cache/torch_extensions and let it rebuild")
    if "ninja" in text.lower():
        msgs.append("the JIT build needs ninja")
        fixes.append("pip install ninja (and a C++ compiler)")
    if op and not symbol:
        msgs.append(f"op {op!r} failed to build")
    if not fixes:
        fixes.append("read the compiler error above the failure")
    fixes.append("or pre-build the ops at install time: DS_BUILD_OPS=1 (or e.g. "
                 "DS_BUILD_CPU_ADAM=1) pip install deepspeed --no-build-isolation --no-cache-dir, "
                 "then check with ds_report")
    vers = []
    torch_v = ctx.env_get("packages.torch") or lf.version("torch")
    ds_v = ctx.env_get("packages.deepspeed") or lf.version("deepspeed")
    if torch_v:
        vers.append(f"torch {torch_v}")
    if ds_v:
        vers.append(f"deepspeed {ds_v}")
    for which, v in lf.cuda.items():
        vers.append(f"{which} {v}")
    ver = f" Versions: {', '.join(vers)}." if vers else ""
    if not vers:
        ctx.missing(rule.code, "the torch/CUDA/DeepSpeed versions", "--env snapshot.json")
    yield finding("DeepSpeed op build failed: " + "; ".join(msgs or ["see the log"]) + "." + ver,
                  fix="; ".join(fixes) + ".", evidence=s.evidence)


# ------------------------------------------------------------- DS109 Trainer/DeepSpeed mismatch


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(str(a).strip().strip("'\"")) == float(str(b).strip().strip("'\""))
    except ValueError:
        return False


def trainer_mismatch_in_log(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS109: Transformers/Accelerate refused the config against the arguments."""
    s = ctx.symptom("config-mismatch")
    if s is None:
        return
    ds_keys = s.values.get("ds_key") or []
    ds_vals = s.values.get("ds_value") or []
    hf_keys = s.values.get("hf_key") or []
    hf_vals = s.values.get("hf_value") or []
    ds_keys = ds_keys if isinstance(ds_keys, list) else [ds_keys]
    ds_vals = ds_vals if isinstance(ds_vals, list) else [ds_vals]
    hf_keys = hf_keys if isinstance(hf_keys, list) else [hf_keys]
    hf_vals = hf_vals if isinstance(hf_vals, list) else [hf_vals]
    # Values are aggregated as distinct lists: pair them per evidence line where possible.
    pairs = []
    for e in s.evidence:
        if " vs hf " in e.text and e.text.lstrip("- ").startswith("ds "):
            left, _, right = e.text.lstrip("- ").partition(" vs hf ")
            dk, _, dv = left[3:].partition("=")
            hk, _, hv = right.rpartition("=")
            pairs.append((dk.strip(), dv.strip(), hk.strip(), hv.strip(), e))
    if not pairs and ds_keys and "mixed_precision" not in hf_keys:
        for i, dk in enumerate(ds_keys):
            pairs.append((dk, ds_vals[i] if i < len(ds_vals) else "?",
                          hf_keys[i] if i < len(hf_keys) else "?",
                          hf_vals[i] if i < len(hf_vals) else "?", s.first))
    seen = set()
    for dk, dv, hk, hv, e in pairs:
        if (dk, dv, hk, hv) in seen:
            continue
        seen.add((dk, dv, hk, hv))
        if _same_number(dv, hv):
            msg = (f"The Trainer reports ds {dk}={dv} vs hf {hk}={hv}: the same number. Your "
                   f"JSON writes {dk} as a string (\"{dv}\"), and the Trainer compares the "
                   f"string \"{dv}\" with the number {hv}, so it calls them different.")
            fix = f"Write {dk} as a number: {dv} without quotes (or \"auto\")."
        else:
            msg = (f"The Trainer refused the DeepSpeed config: {dk}={dv} in the config but "
                   f"{hk}={hv} from the Trainer arguments.")
            fix = (f'Set {dk} to "auto" so the Trainer fills it from its arguments, or make '
                   f"both say the same value.")
        yield finding(msg, fix=fix, path=dk if dk and "|" not in dk else None, evidence=(e,))
    if not pairs:
        hk = s.values.get("hf_key")
        hv = s.values.get("hf_value")
        dk = s.values.get("ds_key")
        hk = hk[0] if isinstance(hk, list) and hk else hk
        hv = hv[0] if isinstance(hv, list) and hv else hv
        dk = dk[0] if isinstance(dk, list) and dk else dk
        if hk and dk:
            msg = (f"Accelerate refused the run: --{hk} {hv} contradicts {dk} in the DeepSpeed "
                   "config file.")
            fix = (f'Make them agree: set --{hk} to match the config, or set the config\'s '
                   f'{dk} section to "auto"/remove it and keep --{hk}.')
        else:
            msg = "The Trainer/Accelerate refused the DeepSpeed config against its arguments."
            fix = 'Use "auto" in the DeepSpeed config for values the Trainer sets.'
        yield finding(msg + f" (line {s.first.line})", fix=fix,
                      path=dk if isinstance(dk, str) else None, evidence=s.evidence)


# ----------------------------------------------------------------- DS110 batch-size assertion


def batch_size_assertion(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS110: DeepSpeed's train_batch_size = micro x accumulation x world assertion failed."""
    s = ctx.symptom("batch-size-mismatch")
    if s is None:
        return
    tb = vals(s, "train_batch", "last")
    mi = vals(s, "micro", "last")
    ac = vals(s, "accum", "last")
    wo = vals(s, "world", "last")
    if not all(isinstance(x, int) for x in (tb, mi, ac, wo)):
        yield finding(f"DeepSpeed's batch-size check failed (line {s.first.line}).",
                      fix="Make train_batch_size = train_micro_batch_size_per_gpu x "
                          "gradient_accumulation_steps x number of GPUs, or set them to \"auto\".",
                      path="train_batch_size", evidence=s.evidence)
        return
    prod = mi * ac * wo
    msg = (f"DeepSpeed requires train_batch_size = micro batch x gradient accumulation x world "
           f"size, but got {tb} != {mi} x {ac} x {wo} = {prod} (line {s.first.line}).")
    if tb % (mi * ac) == 0 and tb // (mi * ac) != wo:
        msg += (f" {tb} would fit {tb // (mi * ac)} GPUs: the run had {wo} rank(s); was the "
                "launcher given fewer GPUs than the config assumes?")
    change = None
    if ctx.cfg_get("train_batch_size") == tb:
        change = {"path": "train_batch_size", "old": tb, "new": prod}
    fix = (f"Set train_batch_size to {prod} (or \"auto\" with the Trainer), or remove it and "
           "let DeepSpeed compute it from the other two.")
    yield finding(msg, fix=fix, path="train_batch_size", evidence=s.evidence, change=change)


# --------------------------------------------------------- DS111 offload with client optimizer


def offload_client_optimizer(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS111: ZeRO-Offload refused a client (non-DeepSpeed) optimizer."""
    s = ctx.symptom("offload-client-optimizer")
    if s is None:
        return
    opt = vals(s, "optimizer", "first")
    what = f" ({opt})" if opt else ""
    ds_v = ctx.env_get("packages.deepspeed") or log_facts(ctx).version("deepspeed")
    old = ""
    dsv = version_tuple(ds_v)
    if dsv is not None and dsv < (0, 8, 3):
        old = (f" DeepSpeed {ds_v} is older than 0.8.3, which added "
               "zero_force_ds_cpu_optimizer: upgrade, or use a config optimizer.")
    yield finding(
        f"ZeRO-Offload was given a client optimizer{what}; DeepSpeed only trusts its own "
        f"CPU optimizer (DeepSpeedCPUAdam) with offload_optimizer (line {s.first.line}).{old}",
        fix='Define the optimizer in the DeepSpeed config ("optimizer": {"type": "AdamW", '
            '"params": {...}}, "auto" values with the Trainer) instead of passing one, or add '
            '"zero_force_ds_cpu_optimizer": false (DeepSpeed >= 0.8.3) to use yours on CPU.',
        path="zero_force_ds_cpu_optimizer", evidence=s.evidence)


# ------------------------------------------------------------------------ DS112 port in use


def port_in_use(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS112: the rendezvous port is taken (often a previous run's ranks still alive)."""
    s = ctx.symptom("port-in-use")
    if s is None:
        return
    port = vals(s, "port", "first")
    p = port if isinstance(port, int) else 29500
    launch = log_facts(ctx).best_launch()
    launcher = launch.launcher if launch else None
    flag = {"deepspeed": f"deepspeed --master_port {p + 1} ...",
            "torchrun": f"torchrun --master_port {p + 1} ...",
            "accelerate": f"accelerate launch --main_process_port {p + 1} ..."}.get(
        launcher or "", f"--master_port {p + 1} (deepspeed/torchrun), --main_process_port "
                        f"{p + 1} (accelerate), or MASTER_PORT={p + 1}")
    yield finding(
        f"The rendezvous port {p if isinstance(port, int) else '(29500 by default)'} is already "
        f"in use (line {s.first.line}): another job, or ranks of an earlier run that did not "
        "exit, hold it.",
        fix=f"Stop the old processes (lsof -i :{p} / nvidia-smi), or use another port: {flag}.",
        path="master_port", evidence=s.evidence)


# -------------------------------------------------------------------- DS113 rank exited non-zero

_MORE_SPECIFIC = ("gpu-oom", "cpu-oom", "hang", "op-build-failure", "config-mismatch",
                  "batch-size-mismatch", "offload-client-optimizer", "port-in-use", "nan-loss",
                  "loss-scale-collapse", "nccl-error", "cuda-error", "shm-exhausted", "disk-full",
                  "job-time-limit", "checkpoint-error")
_SIGNALS = {6: "SIGABRT (an abort: a C++ assertion or a failed CUDA/NCCL call)",
            7: "SIGBUS (often /dev/shm too small in a container: docker --shm-size or --ipc=host)",
            9: "SIGKILL (usually the kernel's OOM killer)",
            11: "SIGSEGV (a segmentation fault in a C++/CUDA extension)",
            15: "SIGTERM (stopped by the launcher after another rank failed, or by the scheduler)"}


def rank_exited_nonzero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS113: a rank exited non-zero and nothing more specific explains it."""
    s = ctx.symptom("launcher-nonzero-exit")
    if s is None or any(ctx.has_symptom(k) for k in _MORE_SPECIFIC):
        return
    code = vals(s, "exit_code", "first")
    sig = vals(s, "signal_num", "first")
    if not isinstance(sig, int) and isinstance(code, int) and code < 0:
        sig = -code
    what = f"exit code {code}" if code is not None else "a non-zero exit code"
    if isinstance(sig, int):
        what += f" = signal {sig}" + (f", {_SIGNALS[sig]}" if sig in _SIGNALS else "")
    exc = ctx.symptom("python-exception")
    cause = ""
    ev = list(s.evidence)
    if exc is not None:
        types = exc.values.get("exc_type") or []
        t = types[0] if isinstance(types, list) and types else types
        cause = (f" The first Python exception in the log is {t} at line {exc.first.line}: "
                 f"{exc.first.text[:160]!r}; the rank exit is its consequence.")
        ev[:0] = exc.evidence[:2]
    yield finding(f"A rank exited with {what} (line {s.first.line}).{cause}",
                  fix=("Fix the exception above (it is the cause; the launcher only reports "
                       "it)." if exc is not None else
                       "Look for the first traceback or error printed by the failing rank "
                       "before this line (run with --enable_each_rank_log or per-rank logs if "
                       "it is missing)."),
                  evidence=tuple(ev[:8]))
