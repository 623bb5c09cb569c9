"""Checks about memory: the GPU OOM ladder (DS105), host OOM (DS106), CPU offload against RAM
(DS203) and ZeRO-1/2 overlap_comm buckets (DS312).
"""

from __future__ import annotations

from typing import Any, Iterator

from dsdoctor.diagnose.checks.common import (
    as_numlike,
    env_gpus,
    finding,
    gb1,
    gib,
    gib1,
    gpu_total_bytes,
    log_facts,
    param_count,
    trainer_arg,
    truthy,
    vals,
)
from dsdoctor.diagnose.checks.runfacts import (
    cpu_ram_bytes,
    gpu_memory_bytes,
    offload_device,
    world_size,
    zero_stage,
)
from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import SCOPE_NOTE, offload_need
from dsdoctor.model import Finding, Symptom

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
    gpus = world_size(ctx) or 1
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
    ram = cpu_ram_bytes(ctx)
    launch = lf.best_launch()
    script = (launch.script if launch else None) or ""
    if "zero_to_fp32" in script or any("zero_to_fp32" in e.text for e in s.evidence):
        bits.append("zero_to_fp32.py needs about twice the final fp32 weights in RAM.")
        fixes.append("run zero_to_fp32.py on a machine with more RAM, or save 16-bit weights "
                     "directly (stage3_gather_16bit_weights_on_model_save: true)")
    if (opt == "cpu" or par == "cpu") and total:
        gpus = ctx.env_get("gpus")
        per_node = len(gpus) if isinstance(gpus, list) and gpus else (world_size(ctx) or 1)
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
        n = world_size(ctx) or 1
        bits.append(f"Every rank loads the whole model into RAM before DeepSpeed partitions it "
                    f"({n} rank(s) x {total * 4 / 2**30:.1f} GiB in fp32).")
    fixes.append("with ZeRO-3, create TrainingArguments (Trainer) or HfDeepSpeedConfig "
                 "(own loop) before from_pretrained so the model is loaded already partitioned "
                 "(zero.Init), and load in the checkpoint's dtype (torch_dtype)")
    fixes.append("fewer ranks per node loading at once, or more RAM/swap")
    yield finding(" ".join(bits), fix="; ".join(fixes) + ".",
                  path="zero_optimization.offload_optimizer.device" if opt == "cpu" else None,
                  evidence=s.evidence)


# ------------------------------------------------------------ DS203 offload exceeds CPU RAM


def _gpus_per_node(ctx: Context) -> tuple[int, str]:
    gpus = env_gpus(ctx)
    if gpus:
        return len(gpus), "env snapshot"
    for f in ctx.facts_named("launcher-nodes"):
        n = f.values.get("num_local_procs")
        if isinstance(n, int) and n > 0:
            return n, "launcher log"
    lf = log_facts(ctx)
    if world_size(ctx) and (lf.nodes or 1) == 1:
        return world_size(ctx), "world size"
    return 1, "assumed (give --env)"


def offload_exceeds_cpu_ram(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS203: DeepSpeed's estimator says the configured CPU offload needs more RAM than a node has."""
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    stage = zero_stage(ctx) or 0
    if par == "cpu" and stage < 3:
        par = None  # offload_param exists only in ZeRO-3 (DS304 reports it)
    if opt != "cpu" and par != "cpu":
        return
    total, largest, src = param_count(ctx)
    if not total:
        ctx.missing(rule.code, "the parameter count for DeepSpeed's offload estimate",
                    "--model PATH")
        return
    ram = cpu_ram_bytes(ctx)
    if not isinstance(ram, int) or ram <= 0:
        ctx.missing(rule.code, "CPU RAM against the offload estimate", "--env snapshot.json")
        return
    gpn, gpn_src = _gpus_per_node(ctx)
    nodes = log_facts(ctx).nodes or 1
    # The HF Trainer / Accelerate use zero.Init under ZeRO-3; an own loop needs HfDeepSpeedConfig.
    zero_init = True
    if stage >= 3 and ctx.scripts and not ctx.uses_trainer \
            and not any(sc.hf_ds_configs or sc.uses_accelerate for sc in ctx.scripts):
        zero_init = False
    row = offload_need(stage, total, largest or 0, gpn, nodes, opt == "cpu", par == "cpu",
                       zero_init)
    if row.cpu_bytes <= ram:
        return
    oom = ctx.symptom("cpu-oom")
    sev = "error" if oom is not None else "warning"
    what = ("optimizer states and parameters" if par == "cpu" else "optimizer states")
    seen = (f" The log shows the kill: line {oom.first.line}." if oom is not None else "")
    fixes = []
    if stage >= 3 and par == "cpu":
        fixes.append('offload the parameters to NVMe instead ("offload_param": {"device": '
                     '"nvme", "nvme_path": "/local_nvme"}) or keep them on GPU')
    if stage >= 3:
        fixes.append("NVMe offload for the optimizer states (ZeRO-Infinity: "
                     '"offload_optimizer": {"device": "nvme", "nvme_path": ...})')
    else:
        fixes.append("ZeRO-3 (whose CPU need is split across nodes) with NVMe offload")
    fixes.append("more nodes (ZeRO-3 divides the CPU need by the node count), or a node with "
                 f"more than {gib(row.cpu_bytes)} of RAM")
    path = ("zero_optimization.offload_param.device" if par == "cpu"
            else "zero_optimization.offload_optimizer.device")
    yield finding(
        f"ZeRO-{stage} offloads the {what} to CPU. By DeepSpeed's estimator "
        f"(estimate_zero{3 if stage >= 3 else 2}_model_states_mem_needs, {row.options.strip()}) "
        f"that needs {gib(row.cpu_bytes)} of CPU RAM per node for {total:,} parameters ({src}) "
        f"on {nodes} node(s) x {gpn} GPU(s) ({gpn_src}), but the node has {gib(ram)} "
        f"({ctx.env_source or 'env'}). These estimates {SCOPE_NOTE}.{seen}",
        fix="; ".join(fixes) + ".", path=path, severity=sev,
        evidence=oom.evidence if oom is not None else ())


# ------------------------------------------------------------ DS312 overlap_comm buckets

_DEFAULT_BUCKET = 500_000_000  # DeepSpeed's default reduce/allgather bucket (elements)


def overlap_comm_buckets(ctx: Context, rule: Any) -> Iterator[Finding]:
    """ZeRO-1/2 overlap_comm holds about 4.5 x (allgather + reduce buckets) in 16-bit values."""
    stage = zero_stage(ctx)
    if stage not in (1, 2) or ctx.cfg_get("zero_optimization.overlap_comm") is not True:
        return
    sizes: dict[str, float] = {}
    notes: list[str] = []
    for key in ("allgather_bucket_size", "reduce_bucket_size"):
        v = ctx.cfg_get(f"zero_optimization.{key}")
        n = as_numlike(v)
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
    gpu = gpu_memory_bytes(ctx)
    known_gpu = ctx.run.gpu_memory_bytes
    source = "--env" if known_gpu is not None and known_gpu.source.kind == "env" else "the log"
    if not gpu:
        ctx.missing(rule.code, "the overlap_comm buckets against GPU memory", "--env")
        return
    if need < 0.5 * gpu:
        return
    suggest = 2e8
    after = 4.5 * 2 * 2 * suggest
    extra = f" ({'; '.join(notes)})" if notes else ""
    yield finding(
        f"ZeRO-{stage} with overlap_comm true keeps about 4.5 x (allgather_bucket_size + "
        f"reduce_bucket_size) 16-bit values in flight: 4.5 x ({sizes['allgather_bucket_size']:.3g} + "
        f"{sizes['reduce_bucket_size']:.3g}) x 2 bytes = {gb1(need)} ({gib1(need)}), "
        f"{need / gpu:.0%} of the {gib1(gpu)} GPU (from {source}){extra}; that leaves too little "
        f"for the model and activations.",
        path="zero_optimization.reduce_bucket_size" if ctx.cfg_has("zero_optimization.reduce_bucket_size")
        else "zero_optimization.overlap_comm",
        fix=f"set zero_optimization.allgather_bucket_size and reduce_bucket_size to 2e8 "
            f"(about {gb1(after)}), or overlap_comm to false")
