"""Checks about host and bucket memory: host OOM (DS106), CPU offload against RAM (DS203) and
ZeRO-1/2 overlap_comm buckets (DS312). The GPU OOM ladder (DS105) is in ``oom.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose import verdict
from dsdoctor.diagnose.checks import zero_to_fp32
from dsdoctor.diagnose.checks.common import (
    as_numlike,
    env_gpus,
    finding,
    gb1,
    gib,
    gib1,
    log_facts,
    param_count,
)
from dsdoctor.diagnose.checks.pinned_memory import (
    pin_pushes_past,
    pinned_offload,
    pinned_sentence,
    swap_bytes,
)
from dsdoctor.diagnose.checks.runfacts import (
    DEFAULT_BUCKET,
    cpu_ram_bytes,
    gpu_memory_bytes,
    offload_device,
    overlap_comm_bucket_bytes,
    world_size,
    zero_stage,
)
from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import SCOPE_NOTE, offload_need
from dsdoctor.model import Finding, Symptom

# ------------------------------------------------------------------- RAM a process may use

CGROUP_KEY = "cpu.cgroup_memory_limit_bytes"


def usable_ram(ctx: Context) -> tuple[int | None, str]:
    """(bytes, where) of the RAM the run may use: the container's cgroup limit when the env
    snapshot has one below the host's RAM (the kernel kills at the limit, not at the host total),
    else the host RAM of the run model."""
    ram = cpu_ram_bytes(ctx)
    limit = ctx.env_get(CGROUP_KEY)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 and (
            ram is None or limit < ram):
        host = f" on a host with {gib(ram)}" if ram else ""
        return limit, f"the container's memory limit ({CGROUP_KEY}{host})"
    return ram, ctx.env_source or "env"


# ----------------------------------------------------------------------------- DS106 CPU OOM


def _progress_before(ctx: Context, s: Symptom) -> bool:
    """A training step past 0 or a loss precedes the symptom's first line in its file."""
    first = s.first
    return any(p.file == first.file and p.line < first.line and (p.step or p.loss is not None)
               for p in ctx.timeline)


def cpu_oom_killed(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS106: the OS killed a rank for host memory (-9, OOM killer, allocator failure)."""
    s = ctx.symptom("cpu-oom")
    if s is None:
        return
    from dsdoctor.facts.estimate import SCOPE_NOTE, offload_need

    lf = log_facts(ctx)
    quoted = f"line {s.first.line}: {s.first.text[:100]!r}{'...' if len(s.first.text) > 100 else ''}"
    # A bare SIGKILL is the OOM killer's signature, not its proof (issue 19): say so, and how to tell.
    sigkill_only = verdict.sigkill_only(s)
    title = "A rank was killed by SIGKILL (host RAM is the usual reason)" if sigkill_only else ""
    bits = [f"A rank was killed by SIGKILL ({quoted}) and nothing in the log says why: the kernel's "
            "OOM killer does that when host RAM runs out, and so do a scheduler's cancel or "
            "preemption, a health checker or a person (`dmesg -T | grep -i oom` and `sacct -j JOB "
            "-o State,ExitCode` tell which). If it was the OOM killer:" if sigkill_only else
            f"A process ran out of host (CPU) RAM ({quoted})."]
    fixes: list[str] = []
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    stage = zero_stage(ctx)
    total, largest, src = param_count(ctx)
    ram, ram_src = usable_ram(ctx)
    conversion = zero_to_fp32.conversion_run(ctx, s)
    if conversion:  # the offline conversion, not a training rank (checks/zero_to_fp32.py)
        yield zero_to_fp32.conversion_killed(ctx, rule, s, conversion, total, src, ram)
        return
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
            bits.append(f"The node has {gib(ram)} ({ram_src}).")
    elif opt == "cpu" or par == "cpu":
        ctx.missing(rule.code, "the RAM the offload needs", "--model PATH")
    if (opt == "cpu" or par == "cpu") and not isinstance(ram, int):
        ctx.missing(rule.code, "CPU RAM against the offload", "--env snapshot.json")
    if opt == "cpu" or par == "cpu":
        # CPU offload moves state *into* host RAM: never answer a host OOM with more of it.
        held = " and ".join(w for w, d in (("optimizer states", opt), ("parameters", par))
                            if d == "cpu")
        bits.append(f"CPU offload adds host memory: the offloaded {held} live in this RAM, "
                    "on top of what each rank loads.")
        pinned = pinned_offload(ctx, stage or 2, total or 0, lf.nodes or 1) if total else None
        if pinned is not None:  # S22: pinned pages cannot go to swap
            bits.append(pinned_sentence(pinned))
            swap = swap_bytes(ctx)
            if swap:
                fixes.append(f"set {' and '.join(pinned.keys)} to false so the offload buffers "
                             f"are pageable and can spill to the node's {gib(swap)} of swap "
                             "(slower copies, but no kill)")
            elif swap is None:
                ctx.missing(rule.code, "whether swap could hold the pinned offload buffers",
                            "--env snapshot.json")
        fixes.append(("move offload_param back to GPU first, then " if par == "cpu" else "")
                     + 'offload to NVMe instead of CPU (ZeRO-3, device "nvme" with nvme_path)')
    need_config = ctx.ds is None and opt is None and par is None
    # Loading the model is start-up: a bare SIGKILL after training steps is not explained by it.
    at_load = not (sigkill_only and _progress_before(ctx, s))
    if total and not (stage and stage >= 3) and at_load:
        n = world_size(ctx) or 1
        bits.append(f"Every rank loads the whole model into RAM before DeepSpeed partitions it "
                    f"({n} rank(s) x {total * 4 / 2**30:.1f} GiB in fp32, the Transformers 4 default; "
                    "half that in a 16-bit dtype).")
    if at_load:
        fixes.append("with ZeRO-3, create TrainingArguments (Trainer) or HfDeepSpeedConfig "
                     "(own loop) before from_pretrained so the model is loaded already "
                     "partitioned (zero.Init), and load in the checkpoint's dtype (torch_dtype; "
                     "the default from Transformers 5)")
    else:
        bits.append("The run had trained (a step or a loss before the kill), so loading the "
                    "model is not what ran out.")
    fixes.append("fewer ranks per node loading at once, or more RAM/swap" if at_load
                 else "fewer ranks per node, or more RAM/swap")
    if need_config:
        fixes.append("give --config ds_config.json to know whether the run offloads to CPU "
                     "(offload adds host memory)")
    yield finding(" ".join(bits), fix="; ".join(fixes) + ".",
                  path="zero_optimization.offload_optimizer.device" if opt == "cpu" else None,
                  evidence=s.evidence, title=title)


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
    ws = world_size(ctx)
    if ws and (lf.nodes or 1) == 1:
        return ws, "world size"
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
    ram, ram_src = usable_ram(ctx)
    if not isinstance(ram, int) or ram <= 0:
        ctx.missing(rule.code, "CPU RAM against the offload estimate", "--env snapshot.json")
        return
    gpn, gpn_src = _gpus_per_node(ctx)
    nodes = ctx.run.value("nodes") or 1
    # The HF Trainer / Accelerate use zero.Init under ZeRO-3; an own loop needs HfDeepSpeedConfig.
    zero_init = True
    if stage >= 3 and ctx.scripts and not ctx.run.value("uses_trainer") \
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
                 f"more than {gib(row.cpu_bytes)} of RAM"
                 + (f" (or a container memory limit above it: {CGROUP_KEY} is {gib(ram)})"
                    if ram_src.startswith("the container") else ""))
    path = ("zero_optimization.offload_param.device" if par == "cpu"
            else "zero_optimization.offload_optimizer.device")
    pin_note = ""
    pinned = pinned_offload(ctx, stage, total, nodes)
    if pinned is not None:  # S22: page-locked buffers cannot spill to swap
        pin_note = " " + pinned_sentence(pinned)
        swap = swap_bytes(ctx)
        if swap and pin_pushes_past(row.cpu_bytes, ram, swap, ram_src.startswith("the container")):
            pin_note += (f" The need fits RAM + swap ({gib(ram + swap)}): pageable buffers could "
                         "spill to swap, pinned ones cannot, so pinning turns a slow, swapping run "
                         "into a killed one.")
            fixes.insert(0, f"set {' and '.join(pinned.keys)} to false (slower host-GPU copies; "
                            "the offload buffers then page to swap instead of the rank being killed)")
            path = pinned.keys[0]
    yield finding(
        f"ZeRO-{stage} offloads the {what} to CPU. By DeepSpeed's estimator "
        f"(estimate_zero{3 if stage >= 3 else 2}_model_states_mem_needs, {row.options.strip()}) "
        f"that needs {gib(row.cpu_bytes)} of CPU RAM per node for {total:,} parameters ({src}) "
        f"on {nodes} node(s) x {gpn} GPU(s) ({gpn_src}), but the node has {gib(ram)} "
        f"({ram_src}). These estimates {SCOPE_NOTE}.{pin_note}{seen}",
        fix="; ".join(fixes) + ".", path=path, severity=sev,
        evidence=oom.evidence if oom is not None else ())


# ------------------------------------------------------------ DS312 overlap_comm buckets



#: DS312 warns when the overlap_comm buckets take this share of the GPU or more.
BUCKET_SHARE_LIMIT = 0.6


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
            sizes[key] = float(DEFAULT_BUCKET)
            notes.append(f"{key} {'not set' if v is None else 'auto'}: DeepSpeed's default 5e8")
        else:
            return
    need = overlap_comm_bucket_bytes(sizes["allgather_bucket_size"], sizes["reduce_bucket_size"])
    gpu = gpu_memory_bytes(ctx)
    known_gpu = ctx.run.gpu_memory_bytes
    source = "--env" if known_gpu is not None and known_gpu.source.kind == "env" else "the log"
    if not gpu:
        ctx.missing(rule.code, "the overlap_comm buckets against GPU memory", "--env")
        return
    # The guide lowers the buckets on GPUs of 8 GB or less and keeps the 5e8 defaults (9 GB) on
    # 16 GB cards (56%); from 60% of the GPU too little is left for the model and activations.
    if need < BUCKET_SHARE_LIMIT * gpu:
        return
    suggest = 2e8
    after = overlap_comm_bucket_bytes(suggest, suggest)
    if max(sizes.values()) > suggest:
        fix = (f"set zero_optimization.allgather_bucket_size and reduce_bucket_size to 2e8 "
               f"(about {gb1(after)}), or overlap_comm to false")
    else:  # the buckets are already small: only overlap_comm is left to change
        fix = "set zero_optimization.overlap_comm to false (the buckets are already 2e8 or less)"
    extra = f" ({'; '.join(notes)})" if notes else ""
    yield finding(
        f"ZeRO-{stage} with overlap_comm true keeps about 4.5 x (allgather_bucket_size + "
        f"reduce_bucket_size) 16-bit values in flight: 4.5 x ({sizes['allgather_bucket_size']:.3g} + "
        f"{sizes['reduce_bucket_size']:.3g}) x 2 bytes = {gb1(need)} ({gib1(need)}), "
        f"{need / gpu:.0%} of the {gib1(gpu)} GPU (from {source}){extra}; that leaves too little "
        f"for the model and activations.",
        path="zero_optimization.reduce_bucket_size" if ctx.cfg_has("zero_optimization.reduce_bucket_size")
        else "zero_optimization.overlap_comm",
        fix=fix)


# ------------------------------------------------------------ DS215 one GPU, large buckets

SINGLE_GPU_BUCKET = 2e8


def _bucket_elements(ctx: Context, rule: Any, key: str, v: Any) -> float | None:
    """The bucket the run uses. The Trainer and Accelerate fill an "auto" reduce_bucket_size
    with hidden_size^2 at every ZeRO stage (often far below 2e8); plain DeepSpeed drops "auto"
    and keeps its default 5e8 (DS310's finding)."""
    if v is None:
        return float(DEFAULT_BUCKET)
    if v != "auto":
        return as_numlike(v)
    plain = ctx.run.value("uses_trainer") is False and not ctx.uses_accelerate
    if key != "reduce_bucket_size" or plain:
        return float(DEFAULT_BUCKET)
    h = getattr(ctx.model, "hidden_size", None)
    if isinstance(h, int) and h > 0:
        return float(h * h)
    ctx.missing(rule.code, '"auto" reduce_bucket_size (the Trainer fills hidden_size^2)', "--model PATH")
    return None


def single_gpu_buckets(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS215: ZeRO-2 on one GPU with buckets above the guide's 2e8."""
    if zero_stage(ctx) != 2 or world_size(ctx) != 1:
        return
    # Advice for a run meant for one GPU: not when another input shows more ranks (a resume on
    # fewer ranks is DS119's), nor while a failure is what the log is about
    if any(c.fact == "world_size" for c in ctx.run.conflicts) or ctx.has_symptom("checkpoint-error"):
        return
    big = []
    for key in ("allgather_bucket_size", "reduce_bucket_size"):
        v = ctx.cfg_get(f"zero_optimization.{key}")
        n = _bucket_elements(ctx, rule, key, v)
        if n is not None and n > SINGLE_GPU_BUCKET:
            big.append((key, v, n))
    if not big:
        return
    said = ", ".join(f"{k} {'not set (default 5e8)' if v is None else v}"
                     + (f" (= hidden_size^2 = {n:,.0f})" if v == "auto" and n != DEFAULT_BUCKET else "")
                     for k, v, n in big)
    path = "zero_optimization." + big[-1][0]
    yield finding(
        f"ZeRO-2 on a single GPU (world size 1) with {said}. The Transformers DeepSpeed guide "
        "sets allgather_bucket_size and reduce_bucket_size to 2e8 on one GPU for better "
        "performance: there is nothing to overlap with other ranks, and smaller buckets leave "
        "more GPU memory for the batch.",
        path=path,
        fix="set " + " and ".join(f"zero_optimization.{k}" for k, _, _ in big) + " to 2e8",
        severity="info",
        change={"op": "set", "path": path, "old": big[-1][1], "new": 2e8}
        if big[-1][1] is not None and big[-1][1] != "auto" else None)
