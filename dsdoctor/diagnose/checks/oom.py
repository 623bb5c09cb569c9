"""The GPU out-of-memory ladder (DS105): from what the OOM message says to the run's next rung.

The ladder starts where the run stands (``runfacts.stage_known``: the config, the config DeepSpeed
printed, or ZeRO-3 frames in the traceback), never at a rung the run has already passed, and never
asks for a value the run already has. When the stage is unknown the fix says which input would
tell (``runfacts.NEED_STAGE``) instead of guessing a rung.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsdoctor.diagnose.checks.common import (
    finding,
    gib,
    gpu_total_bytes,
    param_count,
    trainer_arg,
    truthy,
    vals,
)
from dsdoctor.diagnose.checks.runfacts import (
    NEED_STAGE,
    offload_device,
    overlap_comm_bucket_bytes,
    stage_known,
    stage_source,
    world_size,
)
from dsdoctor.facts.context import Context
from dsdoctor.logs.formats import convert
from dsdoctor.model import Finding, Symptom

#: DeepSpeed's memory ladder, fastest first: (label, stage, offload opt, offload param).
LADDER = (("ZeRO-2", 2, False, False), ("ZeRO-2 + offload_optimizer to CPU", 2, True, False),
          ("ZeRO-3", 3, False, False), ("ZeRO-3 + offload_optimizer to CPU", 3, True, False),
          ("ZeRO-3 + offload_optimizer + offload_param to CPU", 3, True, True))

#: DeepSpeed's defaults of the stage-3 knobs the ladder lowers, and the value it lowers them to.
STAGE3_DEFAULT = 1e9
STAGE3_LOWER = 1e8

# torch >= 2.1 lists every process that holds memory on the failing GPU ("Process 105400 has
# 76.92 GiB memory in use."), and its own usage as "this process has X memory in use". The
# gpu-oom symptom already matched the line; this reads the rest of that same line.
_PROCESS = re.compile(r"Process (?P<pid>\d+) has (?P<size>\d+(?:\.\d+)? ?(?:[KMGT]iB|bytes|B)) "
                      r"memory in use")


@dataclass(frozen=True)
class OomNumbers:
    """Every number one OOM message gives (None when that torch release does not print it)."""

    tried: int | None
    total: int | None
    free: int | None
    allocated: int | None
    processes: tuple[tuple[int, int], ...]  # (pid, bytes) of every process listed on the GPU
    gpu: int | None


def oom_numbers(s: Symptom) -> OomNumbers:
    """The numbers of the first OOM message that lists most (several messages: the richest)."""
    procs: tuple[tuple[int, int], ...] = ()
    for ev in s.evidence:
        found = tuple((int(m.group("pid")), convert(m.group("size"), "bytes") or 0)
                      for m in _PROCESS.finditer(ev.text))
        if len(found) > len(procs):
            procs = found

    def num(name: str, agg: str = "max") -> int | None:
        v = vals(s, name, agg)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return OomNumbers(num("tried_bytes"), num("total_bytes"), num("free_bytes", "min"),
                      num("allocated_bytes"), procs, num("gpu", "first"))


def _size(b: int) -> str:
    """Sizes as torch prints them: MiB under a GiB, else GiB."""
    if b == 0:
        return "0 bytes"
    return f"{b / 2**20:.2f} MiB" if b < 2**30 else gib(b)


def _describe(n: OomNumbers, s: Symptom, total: int | None) -> str:
    head = "CUDA out of memory"
    if n.tried is not None:
        head += f" while allocating {_size(n.tried)}"
    if total:
        head += f" on a {gib(total)} GPU" + (f" (GPU {n.gpu})" if n.gpu is not None else "")
    if n.free is not None:
        head += f" with {_size(n.free)} free"
    head += f" (line {s.first.line}" + (f", {s.count} times" if s.count > 1 else "") + ")."
    if n.allocated is not None:
        head += f" PyTorch itself had {gib(n.allocated)} allocated."
    if len(n.processes) >= 2:
        listed = ", ".join(f"{pid}: {_size(b)}" for pid, b in n.processes)
        head += (f" {len(n.processes)} processes hold memory on this one GPU ({listed}): several "
                 "ranks (or another job) share the GPU, so each gets a fraction of it.")
    return head


def _fmt_size(v: Any) -> str:
    """Bucket-like sizes as DeepSpeed configs write them: 5e8, 1e9, 123456."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if v >= 1e5:
        mant, _, exp = f"{v:e}".partition("e")
        m = float(mant)
        if m == round(m, 2):
            return f"{m:g}e{int(exp)}"
    return f"{v:g}"


def _model_states_gpu(ctx: Context, stage: int, opt: bool, param: bool) -> int | None:
    from dsdoctor.facts.estimate import offload_need

    total, largest, _ = param_count(ctx)
    if not total:
        return None
    row = offload_need(stage, total, largest or 0, world_size(ctx) or 1, 1, opt, param)
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


def _bucket_step(ctx: Context, stage: int, total: int | None) -> str | None:
    """ZeRO-1/2 with overlap_comm: the buckets' share of the GPU, from the one bucket formula."""
    if stage not in (1, 2) or ctx.cfg_get("zero_optimization.overlap_comm") is not True or not total:
        return None
    ag = ctx.cfg_get("zero_optimization.allgather_bucket_size", 5e8)
    rb = ctx.cfg_get("zero_optimization.reduce_bucket_size", 5e8)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ag, rb)):
        return None
    buf = overlap_comm_bucket_bytes(ag, rb)
    if buf <= 0.25 * total:
        return None
    lower = ("lower both to 2e8, or set overlap_comm false" if max(ag, rb) > 2e8
             else "set overlap_comm false")
    return (f"overlap_comm with allgather_bucket_size {_fmt_size(ag)} + reduce_bucket_size "
            f"{_fmt_size(rb)} holds about {buf / 1e9:.1f} GB (4.5 x the buckets in 16-bit values) "
            f"of a {gib(total)} GPU: {lower}")


def _stage3_steps(ctx: Context, opt: str | None, par: str | None, config_known: bool,
                  step_frame: str | None) -> tuple[list[str], str | None]:
    """The rungs after ZeRO-3 that this run has not taken yet, and the key of the first one."""
    steps: list[str] = []
    path = None
    maybe = "" if config_known else " (if not on already: give --config to know)"
    if not par:
        steps.append('add "offload_param": {"device": "cpu", "pin_memory": true}'
                     + ("" if opt else ' and "offload_optimizer": {"device": "cpu"}')
                     + " to zero_optimization" + maybe)
        path = "zero_optimization"
    live = ctx.cfg_get("zero_optimization.stage3_max_live_parameters", STAGE3_DEFAULT)
    reuse = ctx.cfg_get("zero_optimization.stage3_max_reuse_distance", STAGE3_DEFAULT)
    high = [(k, v) for k, v in (("stage3_max_live_parameters", live),
                                ("stage3_max_reuse_distance", reuse))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > STAGE3_LOWER]
    if high:
        shown = " and ".join(f"zero_optimization.{k} ({_fmt_size(v)}"
                             + ("" if config_known else ", DeepSpeed's default") + ")"
                             for k, v in high)
        steps.append(f"lower {shown} to {_fmt_size(STAGE3_LOWER)}")
        path = path or f"zero_optimization.{high[0][0]}"
    sub = ctx.cfg_get("zero_optimization.sub_group_size", STAGE3_DEFAULT)
    sub_high = isinstance(sub, (int, float)) and not isinstance(sub, bool) and sub > STAGE3_LOWER
    if step_frame is not None and sub_high:
        steps.insert(0, f"the OOM is in the optimizer step ({step_frame}): lower "
                        f"zero_optimization.sub_group_size ({_fmt_size(sub)}) to 1e8 first")
        path = "zero_optimization.sub_group_size"
    elif sub_high:
        steps.append(f"if the OOM is in the optimizer step, lower sub_group_size ({_fmt_size(sub)}) "
                     "to 1e8")
    if opt != "nvme" or par != "nvme":
        steps.append("then NVMe offload (ZeRO-Infinity: offload_param/offload_optimizer "
                     'device "nvme" with nvme_path), or more GPUs')
    else:
        steps.append("then more GPUs (the run already offloads to NVMe)")
    return steps, path


def _batch_step(ctx: Context) -> str | None:
    """Halve the per-device batch (and double accumulation), unless it is already 1."""
    micro = ctx.run.value("micro_batch")
    if micro == 1:
        return None  # nothing left to halve
    if isinstance(micro, int) and micro > 1:
        accum = ctx.run.value("grad_accum")
        more = (f" and gradient_accumulation_steps from {accum} to {accum * 2}"
                if isinstance(accum, int) and accum > 0 else " with more gradient accumulation")
        return f"train_micro_batch_size_per_gpu from {micro} to {max(1, micro // 2)}{more}"
    return "a smaller per-device batch with more gradient accumulation"


#: vLLM's engine found no GPU memory left for its KV cache (formats/accelerator-allocators.yaml):
#: not the trainer's ZeRO ladder but vLLM's own budget, a fraction of the whole GPU from which
#: memory that other processes already hold (a colocated trainer) is taken first.
VLLM_NO_CACHE = "vllm-no-cache-blocks"
VLLM_CACHE_FIX = (
    "raise gpu_memory_utilization (the share of the whole GPU vLLM may fill, 0.9 by default) if "
    "the GPU has room; when a trainer shares the GPU with the rollout "
    "engine (colocated RL), the trainer's memory counts against that share: shrink the trainer's "
    "footprint (ZeRO-3, offload, a smaller batch) or give vLLM a GPU of its own")


def _vllm_no_cache_blocks(s: Symptom) -> Finding:
    msg = (f"vLLM found no GPU memory left for its KV cache blocks (line {s.first.line}): after "
           "the model's weights and the profiled activations, its share of the GPU "
           "(gpu_memory_utilization) was used up.")
    return finding(msg, fix="Next: " + VLLM_CACHE_FIX + ".", evidence=s.evidence)


def gpu_out_of_memory(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS105: CUDA OOM, with the next rung of the memory ladder for this run."""
    s = ctx.symptom("gpu-oom")
    if s is None:
        return
    if set(s.patterns) == {VLLM_NO_CACHE}:
        yield _vllm_no_cache_blocks(s)
        return
    numbers = oom_numbers(s)
    total, total_src = gpu_total_bytes(ctx)
    head = _describe(numbers, s, total)
    steps: list[str] = []
    path = None
    known = stage_known(ctx)
    stage = known.value if known is not None else None
    config_known = ctx.ds is not None
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    total_params, _, src = param_count(ctx)
    step_frame = _optimizer_step_frame(ctx, s)
    if len(numbers.processes) >= 2:
        steps.append(f"give each rank its own GPU: {len(numbers.processes)} processes share GPU "
                     f"{numbers.gpu if numbers.gpu is not None else ''} (check --num_gpus/"
                     "--include, CUDA_VISIBLE_DEVICES and torch.cuda.set_device(local_rank)), "
                     "or stop the other job")
    if known is not None and known.source.kind not in ("config", "default"):
        head += f" The run is at ZeRO stage {stage} ({stage_source(ctx)})."
        # The config's stage, where it disagrees: a conflict the run model kept (frames outrank
        # the config), or the model's own answer when the frames came from the fallback.
        written = next((c.other for c in ctx.run.conflicts
                        if c.fact == "zero_stage" and c.other.value != stage), None)
        if written is None and ctx.run.zero_stage is not None:
            written = ctx.run.zero_stage
        if written is not None and written.value != stage:
            head += (f" The config given says stage {written.value} "
                     f"({written.source.describe()}): maybe not the config of this run.")
    states = ""
    if stage is not None and stage >= 2 and total_params and config_known:
        need = _model_states_gpu(ctx, stage, bool(opt), bool(par))
        if need is not None:
            states = (f" DeepSpeed's estimator puts the parameters, gradients and optimizer "
                      f"states alone at {gib(need)} per GPU for this setup "
                      f"({total_params:,} parameters {src}; activations come on top).")
    bucket = _bucket_step(ctx, stage or 0, total)
    if bucket is not None:
        steps.append(bucket)
        path = "zero_optimization.allgather_bucket_size"
    # Activations are not partitioned by any ZeRO stage (only the model states are), so
    # checkpointing them is a rung at ZeRO-3 too, not one the run passed by reaching stage 3;
    # but an OOM in the optimizer step comes after the backward freed the activations.
    gc = trainer_arg(ctx, "gradient_checkpointing")
    if not truthy(gc) and step_frame is None:
        steps.append("enable gradient checkpointing (--gradient_checkpointing, or "
                     "model.gradient_checkpointing_enable()): activations are often the "
                     "largest part" + ("" if gc is not None else " (if it is not on already)"))
    if stage is None:
        steps.append(NEED_STAGE + " and so the next rung of the ZeRO ladder")
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
    else:
        more, p3 = _stage3_steps(ctx, opt, par, config_known, step_frame)
        steps.extend(more)
        path = path or p3
    if step_frame is not None and (stage is None or stage < 3):
        head += f" It happened in the optimizer step ({step_frame})."
    if any(sc.generate_calls for sc in ctx.scripts):
        steps.append("in generate(), fewer beams (num_beams) and a smaller batch")
    batch = _batch_step(ctx)
    if batch:
        steps.append(batch)
    # Which ladder rung would fit the model states in half the GPU (room for activations).
    if total and total_params and stage is not None and config_known:
        for label, st, o, p in LADDER:
            if (st, o, p) <= (stage, bool(opt), bool(par)):
                continue
            need = _model_states_gpu(ctx, st, o, p)
            if need is not None and need < 0.5 * total:
                steps.insert(0, f"by DeepSpeed's estimator, {label} needs {gib(need)} per GPU for "
                                "the model states: the first rung that leaves half the GPU "
                                "for activations")
                break
    if VLLM_NO_CACHE in s.patterns:
        steps.append("for the vLLM engine that found no room for its KV cache: "
                     + VLLM_CACHE_FIX)
    src_note = f" (GPU size from {total_src})" if total_src else ""
    fix = "Next: " + steps[0] + "."
    if len(steps) > 1:
        fix = "Next: " + steps[0] + ". Then: " + "; ".join(steps[1:]) + "."
    yield finding(head + states + src_note, fix=fix, path=path, evidence=s.evidence)


__all__ = ["LADDER", "OomNumbers", "gpu_out_of_memory", "oom_numbers"]
