"""What the run is, as the checks read it: the run model (``ctx.run``) and nothing else.

Every check asks these functions for the ZeRO stage, offload, precision, world size, memory,
versions and QLoRA instead of reading the config, the env snapshot or the scripts its own way, so
two checks can no longer answer the same question differently. Lints of the config file's own
keys (unknown, duplicated, quoted numbers) read the config document instead: they lint the file.

Two readings are here until the run model states them itself (the "runmodel" work adds traceback
frames and QLoRA from scripts to ``facts/run_build.py``); each is used only when ``ctx.run`` is
silent, so it disappears by itself once the model knows:

- the stage a traceback shows (``ds-frame`` facts through ``deepspeed/runtime/zero/stage3.py``);
- 4-bit loading seen in Trainer arguments, the model's quantization_config or a script.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsdoctor.facts.context import Context
from dsdoctor.facts.run import SOURCE_RANK, Known, Source

#: The one line a check prints when the ZeRO stage is unknown: which input would tell.
NEED_STAGE = ("give --config ds_config.json (or a log that includes the config DeepSpeed prints "
              "at start-up) to know the ZeRO stage")


def stage_known(ctx: Context) -> Known[int] | None:
    """The run's ZeRO stage with its source: the run model, else a ZeRO-3 traceback frame.

    A config (file or printed) without ``zero_optimization.stage`` runs stage 0 (DeepSpeed's
    default); with no config at all the stage is unknown (None).
    """
    known = ctx.run.zero_stage
    frames = _stage_from_frames(ctx)
    # What the failing run executed outranks what a config says (run.SOURCE_RANK); the run model
    # records the disagreement as a conflict of its own.
    if frames is not None and (known is None or (
            SOURCE_RANK.get(known.source.kind, len(SOURCE_RANK)) > SOURCE_RANK["log-frames"]
            and known.value != frames.value)):
        return frames
    if known is not None:
        return known
    if ctx.ds is not None:
        return Known(0, Source("default", None, None, "zero_optimization.stage"), "inferred")
    return None


def _stage_from_frames(ctx: Context) -> Known[int] | None:
    """Stage 3 when the log's traceback runs through deepspeed/runtime/zero/stage3.py."""
    for f in ctx.facts_named("ds-frame"):
        if f.values.get("module") == "stage3":
            ev = f.evidence
            return Known(3, Source("log-frames", ev.file, ev.line, "stage3.py in the traceback"),
                         "inferred")
    return None


def zero_stage(ctx: Context) -> int | None:
    """The run's ZeRO stage, or None when no input tells (then say :data:`NEED_STAGE`)."""
    known = stage_known(ctx)
    return None if known is None else known.value


def stage_source(ctx: Context) -> str:
    """Where the stage came from, for a message: ``ds_config.json:7`` or ``the traceback (line 3)``."""
    known = stage_known(ctx)
    if known is None:
        return ""
    src = known.source
    if src.kind == "log-frames":
        return f"stage3.py frames in the traceback, log line {src.line}"
    if src.kind == "log-config":
        return "the config DeepSpeed printed"
    if src.kind == "default":
        return "DeepSpeed's default: the config sets no stage"
    return src.location or src.kind


def offload_device(ctx: Context, which: str) -> str | None:
    """``"cpu"``/``"nvme"`` when the run offloads ``which`` (optimizer/param), else None."""
    dev = ctx.run.value(f"offload_{which}")
    return dev if dev in ("cpu", "nvme") else None


def precision(ctx: Context) -> str | None:
    """``"fp16"``/``"bf16"``/``"fp32"`` of the run, or None when no input says."""
    p = ctx.run.value("precision")
    return p if isinstance(p, str) else None


def world_size(ctx: Context) -> int | None:
    n = ctx.run.value("world_size")
    return n if isinstance(n, int) and n > 0 else None


def cpu_ram_bytes(ctx: Context) -> int | None:
    n = ctx.run.value("cpu_ram_bytes")
    return n if isinstance(n, int) and n > 0 else None


def gpu_memory_bytes(ctx: Context) -> int | None:
    n = ctx.run.value("gpu_memory_bytes")
    return n if isinstance(n, int) and n > 0 else None


def initial_scale_power(ctx: Context) -> Known[int] | None:
    return ctx.run.initial_scale_power


def package_version(ctx: Context, name: str) -> tuple[str | None, str]:
    """A package's version from the run model, with where it came from (``env``/``log``)."""
    known = ctx.run.version(name)
    if known is None:
        return None, ""
    return known.value, "env" if known.source.kind == "env" else "log"


# ------------------------------------------------------------------------- QLoRA (4-bit) runs

def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return v is True or (isinstance(v, int) and not isinstance(v, bool) and v == 1)


@dataclass(frozen=True)
class QLoRA:
    """Whether the base model is loaded in 4 bits, and where that was seen."""

    loaded_4bit: bool | None  # None: no input could tell
    where: str = ""


def qlora(ctx: Context) -> QLoRA:
    """Is this a QLoRA (4-bit base model) run? One answer for every check (DS208-DS210, DS316-317)."""
    known = ctx.run.qlora
    if known is not None:
        return QLoRA(bool(known.value), known.source.describe())
    ta = ctx.trainer_args
    for k in ("use_4bit_quantization", "load_in_4bit"):
        if k in ta and _truthy(ta[k]):
            return QLoRA(True, f"--{k}")
    if str(ta.get("quantization_bit", "")) == "4":
        return QLoRA(True, "--quantization_bit 4")
    q = (ctx.model_config or {}).get("quantization_config")
    if isinstance(q, dict) and (q.get("load_in_4bit") is True or q.get("_load_in_4bit") is True):
        return QLoRA(True, "the model's quantization_config")
    for sc in ctx.scripts:
        for d in getattr(sc, "dtypes", ()):
            if str(getattr(d, "key", "")).startswith("bnb_4bit"):
                return QLoRA(True, f"{sc.path}:{d.site.line}")
    for path, src in ctx.script_sources.items():
        flat = src.replace(" ", "")
        if "load_in_4bit=True" in flat or "bnb_4bit_quant_type" in src:
            return QLoRA(True, path)
    if ta or ctx.script_sources or ctx.model_config:
        return QLoRA(False)
    return QLoRA(None)


# ------------------------------------------------------------------ overlap_comm bucket memory

#: DeepSpeed's default allgather/reduce bucket (elements).
DEFAULT_BUCKET = 500_000_000


def overlap_comm_bucket_bytes(allgather: float, reduce: float, bytes_per_element: int = 2) -> float:
    """GPU memory ZeRO-1/2 holds for communication with ``overlap_comm: true``.

    Counts what the Transformers DeepSpeed guide counts: about 4.5 x (allgather_bucket_size +
    reduce_bucket_size) elements in flight, each a 16-bit value (2 bytes): 5e8 + 5e8 -> 9 GB.
    """
    return 4.5 * (allgather + reduce) * bytes_per_element


__all__ = ["DEFAULT_BUCKET", "NEED_STAGE", "QLoRA", "cpu_ram_bytes", "gpu_memory_bytes",
           "initial_scale_power", "offload_device", "overlap_comm_bucket_bytes", "package_version",
           "precision", "qlora", "stage_known", "stage_source", "world_size", "zero_stage"]
