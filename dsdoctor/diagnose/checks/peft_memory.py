"""Pre-flight memory of a LoRA/QLoRA run (DS211's PEFT branch): the frozen base weights (16-bit,
or 4-bit for QLoRA; sharded by ZeRO-3 and FSDP FULL_SHARD), the adapters with their fp32
gradients and Adam states, and the activations when the inputs allow an estimate
(``facts/estimate.py``: :func:`peft_states`, :func:`lora_llama_params`).

DeepSpeed's estimator does not apply: it counts gradients and optimizer states for every
parameter, while PEFT trains well under 1% of them. The figure is a floor (``PEFT_NOTE`` says
what it leaves out and what the PEFT guides measured), so the check only fires when even the
floor does not fit one GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsdoctor.diagnose.checks.activations import ActivationEstimate, activation_estimate
from dsdoctor.diagnose.checks.common import finding, gib, param_count
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.diagnose.checks.memory import _gpus_per_node
from dsdoctor.diagnose.checks.runfacts import (
    gpu_memory_bytes,
    offload_device,
    qlora,
    world_size,
    zero_stage,
)
from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import PEFT_NOTE, PeftStates, lora_llama_params, peft_states
from dsdoctor.model import Finding

#: States + activations fit when they take at most this share of one GPU (as for DS211).
FIT_SHARE = 0.9
#: PEFT's defaults when the run does not say: LoraConfig(r=8), Llama's target modules.
DEFAULT_RANK = 8
DEFAULT_TARGETS = "q_proj,v_proj"
_LLAMA_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")


@dataclass(frozen=True)
class _Peft:
    total: int
    source: str
    trainable: int
    trainable_where: str
    gpus: int
    gpu: int
    four_bit: bool
    sharded: bool
    how: str  # "ZeRO-3", "FSDP FULL_SHARD", "ZeRO-2" ...

    def states(self, four_bit: bool | None = None, sharded: bool | None = None) -> PeftStates:
        return peft_states(self.total, self.trainable, self.gpus,
                           self.four_bit if four_bit is None else four_bit,
                           self.sharded if sharded is None else sharded)


def _trainable(ctx: Context) -> tuple[int | None, str]:
    """Adapter parameters: PEFT's own log line, else LoRA on a Llama-style config.json."""
    n = ctx.run.value("trainable_params")
    if isinstance(n, int) and n > 0:
        return n, f"trainable params from {ctx.run.trainable_params.source.describe()}"  # type: ignore[union-attr]
    raw = ctx.model_config or {}
    if not all(isinstance(raw.get(k), int) for k in _LLAMA_KEYS):
        return None, ""
    rank_arg, targets_arg = run_arg(ctx, "lora_r"), run_arg(ctx, "lora_target_modules")
    try:
        rank = int(rank_arg[0]) if rank_arg else DEFAULT_RANK
    except (TypeError, ValueError):
        return None, ""
    targets = str(targets_arg[0]) if targets_arg else DEFAULT_TARGETS
    heads = raw["num_attention_heads"]
    kv_raw = raw.get("num_key_value_heads")
    kv = kv_raw if isinstance(kv_raw, int) else heads
    n = lora_llama_params(raw["hidden_size"], raw["intermediate_size"], heads, kv,
                          raw["num_hidden_layers"], rank, targets)
    said = (f"r={rank} ({rank_arg[1] if rank_arg else 'PEFT default, assumed'}), targets "
            f"{targets} ({targets_arg[1] if targets_arg else 'PEFT default for Llama, assumed'})")
    return (n, f"LoRA {said}") if n > 0 else (None, "")


def _sharding(ctx: Context) -> tuple[bool, str] | None:
    """(base sharded, how), or None when the base is offloaded or the setup is unknown."""
    if ctx.run.value("fsdp"):
        acc = ctx.accelerate
        strategy = str(acc.get("fsdp_config.fsdp_sharding_strategy") or "FULL_SHARD") if acc else "FULL_SHARD"
        if acc is not None and str(acc.get("fsdp_config.fsdp_offload_params")).lower() == "true":
            return None  # the shards live in CPU RAM (DS228's advice)
        full = strategy.upper() in ("FULL_SHARD", "1", "HYBRID_SHARD", "4")
        return full, f"FSDP {strategy}"
    stage = zero_stage(ctx)
    if stage is None:
        return None
    if stage == 3 and offload_device(ctx, "param"):
        return None
    return stage == 3, f"ZeRO-{stage}"


def _peft_setup(ctx: Context) -> _Peft | None:
    total, _, source = param_count(ctx)
    gpu = gpu_memory_bytes(ctx)
    shard = _sharding(ctx)
    trainable, where = _trainable(ctx)
    if not (total and gpu and shard and trainable):
        return None
    gpus = world_size(ctx) or _gpus_per_node(ctx)[0] * (ctx.run.value("nodes") or 1)
    return _Peft(total, source, trainable, where, gpus, gpu, qlora(ctx).loaded_4bit is True,
                 shard[0], shard[1])


def peft_setup_does_not_fit(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS211 for LoRA/QLoRA: even the floor (frozen base + adapters + activations) overflows."""
    p = _peft_setup(ctx)
    if p is None:
        return
    st = p.states()
    est = activation_estimate(ctx)
    act = est.bytes_for() if est is not None else 0
    if st.total + act <= p.gpu:
        return
    kind = "QLoRA (4-bit base)" if p.four_bit else "LoRA (16-bit base)"
    spread = (f"sharded over {p.gpus} GPUs" if p.sharded else
              f"whole on every GPU ({p.how} does not shard parameters)")
    text = (f"{kind} with {p.how}: the frozen base weights of {p.total:,} parameters ({p.source}) "
            f"take {gib(st.base_bytes)} per GPU ({spread}), the {p.trainable:,} adapter parameters "
            f"({p.trainable_where}) with their fp32 gradients and Adam states "
            f"{gib(st.adapter_bytes)}"
            + (f", and the activations {gib(act)} ({est.describe()})" if est is not None else
               " (activations not counted: give a sequence-length argument such as --max_seq_len)")
            + f": {gib(st.total + act)} against {gib(p.gpu)} on one GPU, so the run will stop with a "
              f"CUDA OOM. These figures {PEFT_NOTE}.")
    yield finding(text, fix=_peft_fix(p, est) + ".",
                  path=None if p.how.startswith("FSDP") else "zero_optimization.stage")


def _peft_fix(p: _Peft, est: ActivationEstimate | None) -> str:
    """The guide's ladder for adapters: checkpointing, shard the base, 4-bit base, offload."""
    act_gc = est.bytes_for(True) if est is not None else 0
    fits = lambda st, act: st.total + act <= FIT_SHARE * p.gpu  # noqa: E731
    if est is not None and est.checkpointing is not True and fits(p.states(), act_gc):
        return (f"turn on gradient checkpointing (--gradient_checkpointing True): activations "
                f"drop to about {gib(act_gc)} and the run fits")
    gc = "turn on gradient checkpointing and " if est is not None and est.checkpointing is not True else ""
    if not p.sharded and fits(p.states(sharded=True), act_gc):
        return (f"{gc}shard the frozen base: ZeRO-3 (zero_stage: 3) or FSDP FULL_SHARD brings it "
                f"to {gib(p.states(sharded=True).base_bytes)} per GPU")
    if not p.four_bit and fits(p.states(four_bit=True, sharded=True), act_gc):
        return (f"{gc}load the base in 4 bits (QLoRA: --use_4bit_quantization True, "
                f"bnb_4bit_quant_storage matching torch_dtype) with ZeRO-3 or FSDP: about "
                f"{gib(p.states(four_bit=True, sharded=True).total)} of states per GPU")
    more = " or a smaller micro batch (activations scale with it)" if est is not None else ""
    return (f"{gc}offload the frozen base to CPU (ZeRO-3 offload_param cpu, or "
            f"fsdp_offload_params: true) or add GPUs (sharded states divide by their count)" + more)


__all__ = ["peft_setup_does_not_fit", "DEFAULT_RANK", "DEFAULT_TARGETS"]
