"""Pre-flight memory: before launch, whether the chosen ZeRO stage and offload fit the GPUs and the
host RAM (DS211), and whether CPU offload is on although the GPUs have room (DS212).

Both use DeepSpeed's own estimator arithmetic (``facts/estimate.py``: parameters, gradients and
optimizer states of a full fine-tune with Adam in mixed precision). The figures leave out
activations and temporary buffers, so a setup "fits" only with headroom left for them. PEFT/QLoRA
runs train a small share of the parameters (the estimator would overstate them): DS211 gives them
``peft_memory``'s figure (frozen base + adapters + activations, ZeRO or FSDP). A log that
already shows a GPU OOM is DS105's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsdoctor.diagnose.checks.activations import ActivationEstimate, activation_estimate
from dsdoctor.diagnose.checks.common import finding, gib, param_count
from dsdoctor.diagnose.checks.memory import _gpus_per_node, usable_ram
from dsdoctor.diagnose.checks.peft_memory import peft_setup_does_not_fit
from dsdoctor.diagnose.checks.qlora import _uses_peft as uses_peft
from dsdoctor.diagnose.checks.runfacts import (
    gpu_memory_bytes,
    offload_device,
    qlora,
    zero_stage,
)
from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import SCOPE_NOTE, EstimateRow, offload_need
from dsdoctor.model import Finding

#: A setup fits when its model states take at most this share of one GPU: the rest is left for
#: activations, CUDA kernels and the allocator (the guide: "CUDA kernels and activations need
#: extra").
FIT_SHARE = 0.8
#: With the activations estimated too, a setup fits when states + activations take at most this
#: share of one GPU (the rest: CUDA context, fragmentation, temporary buffers).
FIT_SHARE_WITH_ACTIVATIONS = 0.9
#: Offload is unneeded when the same stage without offload takes at most this share of one GPU.
ROOM_SHARE = 0.5


@dataclass(frozen=True)
class _Setup:
    stage: int
    offload_optimizer: bool
    offload_param: bool

    @property
    def label(self) -> str:
        off = [w for w, on in (("offload_optimizer", self.offload_optimizer),
                               ("offload_param", self.offload_param)) if on]
        return f"ZeRO-{self.stage}" + (f" + {' + '.join(off)} cpu" if off else " without offload")


#: The guide's order, fastest first (ZeRO-1 is estimated like ZeRO-2).
_LADDER = (_Setup(2, False, False), _Setup(2, True, False), _Setup(3, False, False),
           _Setup(3, True, False), _Setup(3, True, True))


@dataclass(frozen=True)
class _Hardware:
    total: int
    largest: int
    source: str
    gpu: int
    ram: int | None
    per_node: int
    nodes: int
    where: str


def _hardware(ctx: Context, rule: Any) -> _Hardware | None:
    """The model size and the hardware, or None (with a note naming the missing input)."""
    if ctx.has_symptom("gpu-oom") or _adapters_or_fsdp(ctx):
        return None
    # With a log the run already shows how it went: name a missing input only before launch
    ask = not ctx.files
    total, largest, src = param_count(ctx)
    if not total:
        if ask:
            ctx.missing(rule.code, "pre-flight memory (whether the setup fits the GPUs)",
                        "--model PATH")
        return None
    gpu = gpu_memory_bytes(ctx)
    if not gpu:
        if ask:
            ctx.missing(rule.code, "pre-flight memory (whether the setup fits the GPUs)",
                        "--env snapshot.json")
        return None
    per_node, where = _gpus_per_node(ctx)
    nodes = ctx.run.value("nodes") or 1
    return _Hardware(total, largest or 0, src, gpu, usable_ram(ctx)[0], per_node,
                     nodes if isinstance(nodes, int) and nodes > 0 else 1, where)


def _adapters_or_fsdp(ctx: Context) -> bool:
    return bool(uses_peft(ctx) or qlora(ctx).loaded_4bit or ctx.run.value("fsdp"))


def _row(hw: _Hardware, s: _Setup) -> EstimateRow:
    return offload_need(s.stage, hw.total, hw.largest, hw.per_node, hw.nodes,
                        s.offload_optimizer, s.offload_param)


def _fits(hw: _Hardware, row: EstimateRow, act: int = 0) -> bool:
    """States (+ activations when estimated) within the GPU share, CPU side within the RAM."""
    gpu_ok = (row.gpu_bytes + act <= FIT_SHARE_WITH_ACTIVATIONS * hw.gpu if act else
              row.gpu_bytes <= FIT_SHARE * hw.gpu)
    return gpu_ok and (hw.ram is None or row.cpu_bytes <= hw.ram)


def _describe(hw: _Hardware, row: EstimateRow) -> str:
    return f"{gib(row.gpu_bytes)} per GPU and {gib(row.cpu_bytes)} of CPU RAM per node"


def _current(ctx: Context) -> _Setup | None:
    """The run's setup, when the estimator models it (CPU offload or none; not NVMe)."""
    stage = zero_stage(ctx)
    if stage not in (1, 2, 3):
        return None
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    if "nvme" in (opt, par):
        return None
    par_on = par == "cpu" and stage == 3
    return _Setup(3 if stage == 3 else 2, opt == "cpu" or par_on, par_on)


# ------------------------------------------------------------------ DS211 setup does not fit


def setup_does_not_fit(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS211: the chosen stage/offload needs more GPU memory than one GPU has, before launch."""
    steps = ctx.run.value("steps_done")
    if isinstance(steps, int) and steps > 0:
        return  # the log shows training steps: the setup did fit
    if uses_peft(ctx) or qlora(ctx).loaded_4bit:
        if not ctx.has_symptom("gpu-oom"):  # an OOM the log shows is DS105's
            yield from peft_setup_does_not_fit(ctx, rule)
        return
    cur = _current(ctx)
    if cur is None:
        return
    hw = _hardware(ctx, rule)
    if hw is None:
        return
    row = _row(hw, cur)
    est = activation_estimate(ctx)
    act = est.bytes_for() if est is not None else 0
    if row.gpu_bytes + act <= hw.gpu:
        return
    ram = (f"{gib(hw.ram)} ({usable_ram(ctx)[1]})" if hw.ram is not None
           else "unknown (give --env)")
    states_alone = row.gpu_bytes > hw.gpu
    text = (f"{cur.label} on {hw.nodes} node(s) x {hw.per_node} GPU(s) ({hw.where}) needs "
            f"{_describe(hw, row)} for {hw.total:,} parameters ({hw.source}), by DeepSpeed's "
            f"estimator ({row.options.strip()}); one GPU has {gib(hw.gpu)}, so "
            + ("the model states alone do not fit" if states_alone else
               f"with the {gib(act)} of activations the GPU is full")
            + f" and the run will stop with a CUDA OOM. The figures {SCOPE_NOTE}. "
            + (f"Activation estimate: {est.describe()}. " if est is not None else
               "Activations are not counted (--model with heads and a sequence-length argument "
               "such as --max_seq_length would let dsdoctor estimate them). ")
            + f"Host RAM: {ram}.")
    fix, change = _lighter_fix(ctx, hw, cur, row, est)
    yield finding(text, fix=fix + ".", path="zero_optimization.stage", change=change)


def _lighter_fix(ctx: Context, hw: _Hardware, cur: _Setup, row: EstimateRow,
                 est: ActivationEstimate | None) -> tuple[str, dict[str, Any] | None]:
    """The first rung of the guide's ladder that fits: gradient checkpointing, then the lightest
    ZeRO stage/offload; with neither, more GPUs or a smaller micro batch."""
    if est is not None and est.checkpointing is not True and _fits(hw, row, est.bytes_for(True)):
        return (f"turn on gradient checkpointing (--gradient_checkpointing true, or "
                f"model.gradient_checkpointing_enable()): activations drop to about "
                f"{gib(est.bytes_for(True))} and {cur.label} then fits"), None
    act = est.bytes_for(True) if est is not None else 0
    lighter = [(s, r) for s in _LADDER for r in (_row(hw, s),) if _fits(hw, r, act)]
    if lighter:
        s, r = lighter[0]
        gc = ("turn on gradient checkpointing and " if est is not None
              and est.checkpointing is not True else "")
        share = FIT_SHARE_WITH_ACTIVATIONS if act else FIT_SHARE
        return (f"{gc}use the lightest setup that fits: {s.label} ({_describe(hw, r)}, with "
                f"{'the activations ' if act else ''}at most {share:.0%} of the GPU"
                f"{'' if act else ' so activations have room'})"), _change(ctx, cur, s)
    more = (" or a smaller micro batch (activations scale with it)" if est is not None else "")
    return ("no ZeRO stage/CPU offload fits these GPUs and this RAM: add GPUs or nodes (ZeRO-3 "
            "divides the states by the GPU count), or offload to NVMe (ZeRO-Infinity)" + more), None

def _change(ctx: Context, cur: _Setup, new: _Setup) -> dict[str, Any] | None:
    """The config edit for a stage change alone (offload edits are said in words: the device
    sections may not exist yet)."""
    if new.offload_optimizer == cur.offload_optimizer and new.offload_param == cur.offload_param \
            and new.stage != cur.stage and ctx.cfg_has("zero_optimization.stage"):
        return {"op": "set", "path": "zero_optimization.stage",
                "old": ctx.cfg_get("zero_optimization.stage"), "new": new.stage}
    return None


# ------------------------------------------------------------------ DS212 offload not needed


def offload_not_needed(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS212: CPU offload is on, but the same stage without offload leaves half the GPU free."""
    cur = _current(ctx)
    if cur is None or not (cur.offload_optimizer or cur.offload_param):
        return
    hw = _hardware(ctx, rule)
    if hw is None:
        return
    plain = _Setup(cur.stage, False, False)
    row = _row(hw, plain)
    if row.gpu_bytes > ROOM_SHARE * hw.gpu:
        return
    on = [p for p, o in (("offload_param", cur.offload_param),
                         ("offload_optimizer", cur.offload_optimizer)) if o]
    yield finding(
        f"ZeRO-{cur.stage} offloads to CPU ({', '.join(on)}), but without offload the model states "
        f"take {gib(row.gpu_bytes)} per GPU ({hw.total:,} parameters, {hw.source}; "
        f"{hw.nodes} node(s) x {hw.per_node} GPU(s)), {row.gpu_bytes / hw.gpu:.0%} of the "
        f"{gib(hw.gpu)} GPU. The Transformers guide: with enough GPU memory, disable CPU/NVMe "
        f"offload, it only slows the run (every step moves states over PCIe). The figures "
        f"{SCOPE_NOTE}; if activations (long sequences, big batches) fill the rest, keep it.",
        fix=f"set zero_optimization.{'.device and zero_optimization.'.join(on)}.device to "
            f"\"none\" (or delete the section)",
        path=f"zero_optimization.{on[-1]}.device", severity="info")


__all__ = ["setup_does_not_fit", "offload_not_needed", "FIT_SHARE", "ROOM_SHARE"]
