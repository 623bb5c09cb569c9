"""One model of the run: what the run *is*, computed once from every source, each fact sourced.

Every rule reads :class:`RunModel` (``ctx.run``) instead of re-deriving the ZeRO stage, the
precision or the world size from its own reading of the inputs, so that two rules can no longer
disagree about the same question. Each answer is a :class:`Known` value: the value, where it came
from (file:line and which kind of source) and how sure we are of it. When two sources disagree
(the config says stage 2, the traceback runs through ``stage3.py``), the model keeps the more
trustworthy one and records a :class:`Conflict`; a rule reports conflicts as a finding of their own.

Sources, most trustworthy first (see ``SOURCE_RANK``): what the log shows the run *did* (traceback
frames, the config the engine printed, banners), the config file given with ``--config``, the
launch command and Trainer arguments, the env snapshot, the model config, a script's AST.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Kinds of source, from the most to the least trustworthy about what the run really did.
SOURCE_KINDS: tuple[str, ...] = (
    "log-frames",  # code the run went through: traceback frames (stage3.py, stage_1_and_2.py,
    # offload code, torch fsdp) and the module DeepSpeed's logger names ([stage3.py:2323:...])
    "log-config",  # the config DeepSpeed printed at start-up
    "log-banner",  # other lines the run printed (PEFT's trainable params, "Creating ... ZeRO stage N
    # optimizer", dist_world_size, Accelerate state, versions, the timeline)
    "config",  # the config file given with --config
    "launch",  # a launch command (runner cmd =, launcher argv, torchrun/accelerate, --script shell)
    "trainer-args",  # Trainer arguments (printed TrainingArguments, the command line, a script)
    "env",  # the env snapshot (--env)
    "model",  # the model's config.json (--model)
    "script",  # the training script's AST (--script)
    "default",  # DeepSpeed's default when nothing sets the value
)
SOURCE_RANK = {k: i for i, k in enumerate(SOURCE_KINDS)}

#: How sure a value is: stated by a source about this run, or inferred from indirect evidence.
CONFIDENCES: tuple[str, ...] = ("stated", "inferred")


@dataclass(frozen=True)
class Source:
    """Where a fact came from: the kind of source, and file:line when there is one."""

    kind: str  # one of SOURCE_KINDS
    file: str | None = None
    line: int | None = None
    detail: str = ""  # the key or the text that states it, e.g. "zero_optimization.stage"

    @property
    def location(self) -> str | None:
        if self.file is None:
            return None
        return f"{self.file}:{self.line}" if self.line else self.file

    def describe(self) -> str:
        """``ds_config.json:7 (zero_optimization.stage)``, or the kind when there is no file."""
        where = self.location or self.kind
        return f"{where} ({self.detail})" if self.detail else where

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.file, "line": self.line, "detail": self.detail}


@dataclass(frozen=True)
class Known(Generic[T]):
    """A value the run model knows, with its source and confidence."""

    value: T
    source: Source
    confidence: str = "stated"  # one of CONFIDENCES

    def to_dict(self) -> dict[str, Any]:
        value: Any = self.value
        if isinstance(value, tuple):
            value = list(value)
        return {"value": value, "source": self.source.to_dict(), "confidence": self.confidence}


@dataclass(frozen=True)
class Conflict:
    """Two sources answer the same question differently (maybe not the same run)."""

    fact: str  # RunModel field name, e.g. "zero_stage"
    kept: Known[Any]
    other: Known[Any]

    def describe(self) -> str:
        return (f"{self.fact}: {self.kept.value!r} from {self.kept.source.describe()} but "
                f"{self.other.value!r} from {self.other.source.describe()}")

    def to_dict(self) -> dict[str, Any]:
        return {"fact": self.fact, "kept": self.kept.to_dict(), "other": self.other.to_dict()}


@dataclass(frozen=True)
class RunModel:
    """What the run is. ``None`` means no source says; a rule then names the input that would."""

    # ZeRO and offload
    zero_stage: Known[int] | None = None
    offload_optimizer: Known[str] | None = None  # "none" | "cpu" | "nvme"
    offload_param: Known[str] | None = None  # "none" | "cpu" | "nvme"
    # precision and the fp16 loss scaler
    precision: Known[str] | None = None  # "fp16" | "bf16" | "fp32"
    initial_scale_power: Known[int] | None = None
    # scale: ranks, GPUs, host
    world_size: Known[int] | None = None
    nodes: Known[int] | None = None
    gpu_name: Known[str] | None = None
    gpu_memory_bytes: Known[int] | None = None  # the smallest GPU's total memory
    cpu_ram_bytes: Known[int] | None = None
    # software
    versions: tuple[tuple[str, Known[str]], ...] = ()  # (package, version), e.g. ("deepspeed", ...)
    # how it trains
    uses_trainer: Known[bool] | None = None
    uses_accelerate: Known[bool] | None = None
    peft: Known[bool] | None = None  # PEFT adapters (LoRA and friends)
    qlora: Known[bool] | None = None  # 4-/8-bit quantized base model under PEFT
    fsdp: Known[bool] | None = None
    launcher: Known[str] | None = None  # "deepspeed" | "torchrun" | "accelerate" | "python"
    ds_config_path: Known[str] | None = None  # the Trainer's --deepspeed path on the command line
    gradient_checkpointing: Known[bool] | None = None
    # model and batch
    model_params: Known[int] | None = None
    trainable_params: Known[int] | None = None
    micro_batch: Known[int] | None = None  # per device
    grad_accum: Known[int] | None = None
    train_batch: Known[int] | None = None
    # progress
    steps_done: Known[int] | None = None
    steps_skipped: Known[int] | None = None  # fp16 overflow skips
    lr_last: Known[float] | None = None
    conflicts: tuple[Conflict, ...] = ()

    def version(self, package: str) -> Known[str] | None:
        for name, known in self.versions:
            if name == package:
                return known
        return None

    def value(self, name: str, default: Any = None) -> Any:
        """The bare value of a field (``run.value("zero_stage")``), or ``default`` when unknown."""
        known = getattr(self, name)
        return default if known is None else known.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name in ("versions", "conflicts"):
                continue
            known = getattr(self, name)
            if known is not None:
                out[name] = known.to_dict()
        out["versions"] = {name: known.to_dict() for name, known in self.versions}
        out["conflicts"] = [c.to_dict() for c in self.conflicts]
        return out


def pick(fact: str, candidates: list[Known[Any]]) -> tuple[Known[Any] | None, list[Conflict]]:
    """The most trustworthy candidate, and a Conflict for every candidate that disagrees with it.

    Candidates of the same rank keep their given order (the first wins).
    """
    present = [c for c in candidates if c is not None]
    if not present:
        return None, []
    ordered = sorted(present, key=lambda k: SOURCE_RANK.get(k.source.kind, len(SOURCE_RANK)))
    kept = ordered[0]
    conflicts = [Conflict(fact, kept, other) for other in ordered[1:] if other.value != kept.value]
    return kept, conflicts


__all__ = ["CONFIDENCES", "Conflict", "Known", "RunModel", "SOURCE_KINDS", "Source", "pick"]
