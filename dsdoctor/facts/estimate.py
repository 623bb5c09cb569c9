"""DeepSpeed's ZeRO-2/ZeRO-3 model-state memory estimators, reproduced from parameter counts.

The arithmetic copies ``estimate_zero2_model_states_mem_needs`` (runtime/zero/stage_1_and_2.py)
and ``estimate_zero3_model_states_mem_needs`` (runtime/zero/stage3.py) of DeepSpeed 0.19.8 line
for line, including where DeepSpeed truncates with ``int()``, so the figures match what DeepSpeed
prints. DeepSpeed is never imported: its ``*_all_live`` variants need a model object, and on a
meta-device model they de-duplicate parameters by storage address (124M counted as 38M), so
dsdoctor takes the counts from the model's config.json instead (see :mod:`dsdoctor.facts.modelinfo`).

The figures cover parameters, gradients and optimizer states only (no activations, no temporary
buffers), and "per CPU" means per node (the host RAM of one node), as in DeepSpeed's table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

GIB = 2**30

#: Printed next to every estimate (the issue asks for it; users misread both points).
SCOPE_NOTE = (
    "cover parameters, gradients and optimizer states only (not activations or temporary "
    "buffers); 'per CPU' means per node (host RAM of one node)"
)


def zero2_mem_needs(
    total_params: int | float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int]:
    """Return ``(cpu_bytes, gpu_bytes)`` exactly as ``estimate_zero2_model_states_mem_needs``."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2 = fp16 params; 18 = fp16 grads(2) + fp32 grads(4) + fp32 params(4) + Adam states(8)
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero3_mem_needs(
    total_params: int | float,
    largest_layer_params: int | float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int, int]:
    """Return ``(cpu_bytes, gpu_bytes, largest_layer_bytes)`` as ``estimate_zero3_model_states_mem_needs``.

    ``cpu_offload`` is optimizer offload, ``cpu_offload_params`` parameter offload (DeepSpeed only
    honours the latter together with the former, and so does this function).
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (total_params * max(4 * num_gpus_per_node, 18 * gpus_factor)
                           * additional_buffer_factor)
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (total_params * max(4 * num_gpus_per_node, 16 * gpus_factor)
                           * additional_buffer_factor)
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), int(largest_layer_memory)


@dataclass(frozen=True)
class EstimateRow:
    """One line of DeepSpeed's table: the memory one option set needs, per node CPU and per GPU."""

    stage: int
    offload_optimizer: str  # "cpu" | "none"
    offload_param: str | None  # "cpu" | "none"; None for ZeRO-2 (no such option)
    zero_init: bool | None  # None for ZeRO-2
    cpu_bytes: int  # per node
    gpu_bytes: int  # per GPU

    @property
    def options(self) -> str:
        """The options column as DeepSpeed prints it (device names padded to 4 like 'none')."""
        opt = f"{self.offload_optimizer:4}"
        if self.stage == 2:
            return f"offload_optimizer={opt}"
        return (f"offload_param={self.offload_param:4}, offload_optimizer={opt}, "
                f"zero_init={1 if self.zero_init else 0}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_gib"] = round(self.cpu_bytes / GIB, 2)
        d["gpu_gib"] = round(self.gpu_bytes / GIB, 2)
        d["options"] = self.options
        return d


@dataclass(frozen=True)
class Estimate:
    """DeepSpeed's estimator table for one stage and hardware setup."""

    stage: int
    total_params: int
    largest_layer_params: int | None
    num_gpus_per_node: int
    num_nodes: int
    additional_buffer_factor: float
    rows: tuple[EstimateRow, ...]

    def row(self, offload_optimizer: bool, offload_param: bool = False,
            zero_init: bool = True) -> EstimateRow:
        """The row for one option set (``offload_param``/``zero_init`` ignored for ZeRO-2)."""
        want_opt = "cpu" if offload_optimizer else "none"
        for r in self.rows:
            if r.offload_optimizer != want_opt:
                continue
            if self.stage == 2:
                return r
            if r.offload_param == ("cpu" if offload_param else "none") and r.zero_init == zero_init:
                return r
        raise KeyError("DeepSpeed's estimator has no row for param offload without "
                       "optimizer offload")

    def header(self) -> str:
        """DeepSpeed's three header lines."""
        nodes = "nodes" if self.num_nodes > 1 else "node"
        gpus = "GPUs" if self.num_gpus_per_node > 1 else "GPU"
        sw = f"SW: Model with {int(self.total_params / 1e6)}M total params"
        if self.stage == 3:
            sw += f", {int((self.largest_layer_params or 0) / 1e6)}M largest layer params"
        return ("Estimated memory needed for params, optim states and gradients for a:\n"
                f"HW: Setup with {self.num_nodes} {nodes}, {self.num_gpus_per_node} {gpus} "
                f"per node.\n{sw}.")

    def table(self) -> str:
        """The table exactly as DeepSpeed's ``*_all_cold`` prints it."""
        lines = [self.header(), "  per CPU  |  per GPU |   Options"]
        for r in self.rows:
            lines.append(f" {r.cpu_bytes / GIB:7.2f}GB | {r.gpu_bytes / GIB:6.2f}GB | {r.options}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "total_params": self.total_params,
            "largest_layer_params": self.largest_layer_params,
            "num_gpus_per_node": self.num_gpus_per_node,
            "num_nodes": self.num_nodes,
            "additional_buffer_factor": self.additional_buffer_factor,
            "rows": [r.to_dict() for r in self.rows],
            "note": SCOPE_NOTE,
        }


def _check(total_params: float, num_gpus_per_node: int, num_nodes: int) -> None:
    if total_params <= 0:
        raise ValueError("total_params must be positive")
    if num_gpus_per_node < 1 or num_nodes < 1:
        raise ValueError("num_gpus_per_node and num_nodes must be >= 1")


def estimate_zero2(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                   additional_buffer_factor: float = 1.5) -> Estimate:
    """The rows of ``estimate_zero2_model_states_mem_needs_all_cold`` (offload cpu, then none)."""
    _check(total_params, num_gpus_per_node, num_nodes)
    rows = []
    for cpu_offload in (True, False):
        cpu, gpu = zero2_mem_needs(total_params, num_gpus_per_node, num_nodes, cpu_offload,
                                   additional_buffer_factor)
        rows.append(EstimateRow(2, "cpu" if cpu_offload else "none", None, None, cpu, gpu))
    return Estimate(2, int(total_params), None, num_gpus_per_node, num_nodes,
                    additional_buffer_factor, tuple(rows))


def estimate_zero3(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1,
                   num_nodes: int = 1, additional_buffer_factor: float = 1.5) -> Estimate:
    """The six rows of ``estimate_zero3_model_states_mem_needs_all_cold``, in DeepSpeed's order."""
    _check(total_params, num_gpus_per_node, num_nodes)
    rows = []
    for cpu_offload in (True, False):
        for cpu_offload_params in (True, False):
            if not cpu_offload and cpu_offload_params:
                continue  # DeepSpeed skips it: param offload requires optimizer offload
            for zero_init in (True, False):
                cpu, gpu, _ = zero3_mem_needs(total_params, largest_layer_params,
                                              num_gpus_per_node, num_nodes, cpu_offload,
                                              cpu_offload_params, zero_init,
                                              additional_buffer_factor)
                rows.append(EstimateRow(3, "cpu" if cpu_offload else "none",
                                        "cpu" if cpu_offload_params else "none", zero_init,
                                        cpu, gpu))
    return Estimate(3, int(total_params), int(largest_layer_params), num_gpus_per_node,
                    num_nodes, additional_buffer_factor, tuple(rows))


def offload_need(stage: int, total_params: int, largest_layer_params: int | None,
                 num_gpus_per_node: int, num_nodes: int, offload_optimizer: bool,
                 offload_param: bool, zero_init: bool = True) -> EstimateRow:
    """The estimator row matching a configuration (stage 1 is estimated like stage 2)."""
    if stage >= 3:
        est = estimate_zero3(total_params, largest_layer_params or 0, num_gpus_per_node, num_nodes)
        return est.row(offload_optimizer, offload_param and offload_optimizer, zero_init)
    est = estimate_zero2(total_params, num_gpus_per_node, num_nodes)
    return est.row(offload_optimizer)


# ------------------------------------------------------------------------- fits on this machine

@dataclass(frozen=True)
class Hardware:
    """The machine an estimate is checked against; a size not known is None."""

    gpu_memory_bytes: int | None  # per GPU (the smallest of the node's)
    host_ram_bytes: int | None  # per node (a cgroup limit when one is set)
    gpu_name: str | None = None
    source: str = ""  # where the sizes come from: "--gpu-memory", "env.json", "this machine"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RowFit:
    """Whether one estimator row's model states fit: on the GPU, in the node's RAM (None: the
    size is not known)."""

    gpu: bool | None
    cpu: bool | None

    @property
    def fits(self) -> bool | None:
        """False when either does not fit, True when both are known and fit, else None."""
        if self.gpu is False or self.cpu is False:
            return False
        return True if (self.gpu and self.cpu) else None

    @property
    def label(self) -> str:
        """"fits", "no: GPU", "no: GPU, RAM", "GPU fits (RAM ?)" ..."""
        short = [what for what, ok in (("GPU", self.gpu), ("RAM", self.cpu)) if ok is False]
        if short:
            return "no: " + ", ".join(short)
        if self.fits:
            return "fits"
        unknown = [what for what, ok in (("GPU", self.gpu), ("RAM", self.cpu)) if ok is None]
        return f"fits ({', '.join(unknown)} ?)" if len(unknown) < 2 else "?"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "cpu": self.cpu, "fits": self.fits}


def row_fit(row: EstimateRow, hw: Hardware) -> RowFit:
    """The row's per-GPU need against the GPU's memory, its per-node need against the RAM."""
    gpu = None if hw.gpu_memory_bytes is None else row.gpu_bytes <= hw.gpu_memory_bytes
    cpu = None if hw.host_ram_bytes is None else row.cpu_bytes <= hw.host_ram_bytes
    return RowFit(gpu, cpu)


def hardware_from_env(snap: dict[str, Any], source: str) -> Hardware:
    """The GPU memory (the smallest GPU: it fills first) and the RAM of an env snapshot."""
    gpus = [g for g in snap.get("gpus") or [] if isinstance(g, dict)
            and isinstance(g.get("memory_total_bytes"), (int, float)) and g["memory_total_bytes"] > 0]
    small = min(gpus, key=lambda g: g["memory_total_bytes"]) if gpus else None
    cpu_section = snap.get("cpu")
    cpu: dict[str, Any] = cpu_section if isinstance(cpu_section, dict) else {}
    ram = [v for v in (cpu.get("ram_total_bytes"), cpu.get("cgroup_memory_limit_bytes"))
           if isinstance(v, (int, float)) and v > 0]
    return Hardware(int(small["memory_total_bytes"]) if small else None,
                    int(min(ram)) if ram else None,
                    str(small.get("name")) if small and small.get("name") else None, source)


# ------------------------------------------------------------------------- activation memory

#: What an activation figure leaves out (printed next to it).
ACTIVATION_NOTE = (
    "leave out allocator fragmentation, the CUDA context (about 0.5-1 GiB per GPU), temporary "
    "buffers and DeepSpeed's communication buckets"
)


@dataclass(frozen=True)
class Activations:
    """Activation memory of one micro-batch on one GPU (data parallel, no tensor parallelism).

    Per transformer layer, in 16-bit training, Korthikanti et al. 2022 ("Reducing Activation
    Recomputation in Large Transformer Models", table 2, t=1) count ``s*b*h*(34 + 5*a*s/h)``
    bytes: 34*s*b*h for the layer's inputs, projections, MLP and dropout masks, and
    ``5*a*s^2*b`` for the attention scores, softmax and its dropout mask, which fused attention
    (SDPA/flash, Transformers' default) never stores. Full gradient checkpointing keeps only each
    layer's 16-bit input (2*s*b*h) and recomputes one layer at a time (that layer's full share).
    The LM head's logits count 6*s*b*V (16-bit logits and their fp32 copy for the loss).
    """

    per_layer_bytes: int  # one layer, fused attention
    scores_per_layer_bytes: int  # the attention-score term eager attention adds per layer
    layers: int
    logits_bytes: int
    checkpoint_input_bytes: int  # one layer's kept input under gradient checkpointing

    def total(self, checkpointing: bool, eager_attention: bool = False) -> int:
        layer = self.per_layer_bytes + (self.scores_per_layer_bytes if eager_attention else 0)
        if checkpointing:
            return self.layers * self.checkpoint_input_bytes + layer + self.logits_bytes
        return self.layers * layer + self.logits_bytes


def activation_memory(hidden: int, layers: int, heads: int, seq: int, micro_batch: int,
                      vocab: int | None) -> Activations:
    """The activation estimate for a decoder-style transformer (see :class:`Activations`)."""
    if min(hidden, layers, heads, seq, micro_batch) <= 0:
        raise ValueError("hidden, layers, heads, seq and micro_batch must be positive")
    sbh = seq * micro_batch * hidden
    return Activations(per_layer_bytes=34 * sbh,
                       scores_per_layer_bytes=5 * heads * seq * seq * micro_batch,
                       layers=layers,
                       logits_bytes=6 * seq * micro_batch * (vocab or 0),
                       checkpoint_input_bytes=2 * sbh)


# ------------------------------------------------------------------------- LoRA / QLoRA states


#: What a LoRA/QLoRA figure leaves out (printed next to it): the PEFT guides measured more.
PEFT_NOTE = (
    "are a floor: they leave out the layers ZeRO-3/FSDP gathers ahead of use (prefetch), a "
    "4-bit layer's dequantized copy during its matmul, allocator caching and the CUDA context; "
    "the PEFT guides measured 64 GB (ZeRO-3) and 72-80 GB (FSDP) per GPU for Llama-70B LoRA on "
    "8xH100 (micro batch 8 x 2048) and 36.6 GB for QLoRA + ZeRO-3 on 2 GPUs (micro batch 2)"
)


def lora_llama_params(hidden: int, intermediate: int, heads: int, kv_heads: int, layers: int,
                      rank: int, targets: str = "all-linear") -> int:
    """LoRA parameters of a Llama-style decoder: ``rank * (fan_in + fan_out)`` per adapted linear.

    ``all-linear`` adapts q/k/v/o and gate/up/down in every layer (PEFT leaves the LM head out);
    otherwise ``targets`` names modules (``q_proj,v_proj``, PEFT's default for Llama).
    """
    kv = hidden // heads * kv_heads
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
              "o_proj": (hidden, hidden), "gate_proj": (hidden, intermediate),
              "up_proj": (hidden, intermediate), "down_proj": (intermediate, hidden)}
    names = list(shapes) if targets.strip() == "all-linear" else [
        t.strip() for t in targets.replace("[", "").replace("]", "").replace("'", "").split(",")]
    per_layer = sum(rank * (shapes[n][0] + shapes[n][1]) for n in names if n in shapes)
    return per_layer * layers


@dataclass(frozen=True)
class PeftStates:
    """Per-GPU model states of a LoRA/QLoRA run, in bytes.

    The frozen base is 16-bit (2 bytes a parameter) or 4-bit (0.5 bytes; bitsandbytes' absmax
    constants add about 0.5 bit more, 0.127 with nested quantization, counted here as 0.53
    bytes); ZeRO-3 and FSDP's FULL_SHARD divide it by the GPU count, ZeRO-1/2 and DDP keep it
    whole on every GPU. The adapters train in fp32 with Adam: weights 4 + gradients 4 + two
    moments 8 = 16 bytes a parameter, divided by the GPU count when sharded.
    """

    base_bytes: int
    adapter_bytes: int
    sharded_over: int

    @property
    def total(self) -> int:
        return self.base_bytes + self.adapter_bytes


def peft_states(total_params: int, trainable_params: int, gpus: int, four_bit: bool,
                sharded: bool) -> PeftStates:
    """The per-GPU states of a LoRA (``four_bit`` False) or QLoRA run (see :class:`PeftStates`)."""
    if total_params <= 0 or trainable_params < 0 or gpus <= 0:
        raise ValueError("parameter counts and the GPU count must be positive")
    div = gpus if sharded else 1
    per_param = 0.53 if four_bit else 2.0
    return PeftStates(int(total_params * per_param / div), int(trainable_params * 16 / div), div)
