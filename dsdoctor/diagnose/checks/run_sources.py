"""Checks that read the run model's own findings: sources that disagree about the run.

DS321: two sources answer a question that matters (ZeRO stage, offload, precision, world size)
differently, e.g. the traceback runs through ``stage3.py`` but ``ds_config.json`` says stage 2:
the log and the config may not come from the same run, and advice built on either may not fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.facts.context import Context
from dsdoctor.facts.run import Conflict, Known
from dsdoctor.model import Evidence, Finding

#: The facts whose disagreement changes the diagnosis (and the advice).
MATTERS = ("zero_stage", "offload_optimizer", "offload_param", "precision", "world_size")
#: Sources not compared here: Trainer arguments vs config is DS311's finding, an env snapshot's
#: GPU count is not the run's world size, defaults and model/script facts state no run setting.
_NOT_COMPARED = {"trainer-args", "env", "default", "model", "script"}
_CODE_OF = {"zero_stage": {3: "ZeRO-3 code", 2: "ZeRO-1/2 code", 1: "ZeRO-1/2 code"},
            "offload_optimizer": "optimizer offload code",
            "offload_param": "parameter offload code",
            "precision": "the {} optimizer"}


_BY = {"log-frames": "the traceback frames", "log-config": "the config DeepSpeed printed",
       "log-banner": "the log", "config": "the config file", "launch": "the launch command"}


def _value(fact: str, value: Any) -> str:
    if fact == "zero_stage":
        return f"stage {value}"
    if fact in ("offload_optimizer", "offload_param"):
        return f"{fact}.device {value}"
    if fact == "world_size":
        return f"{value} ranks"
    return str(value)


def _says(fact: str, k: Known[Any]) -> str:
    """``the log comes from ZeRO-3 code (stage3.py:947 in step, train.log:67)`` or
    ``ds_config.json:7 says stage 2``."""
    src = k.source
    where = src.location or src.kind
    if src.kind == "log-frames":
        code = _CODE_OF.get(fact)
        what = code.get(k.value, "DeepSpeed code") if isinstance(code, dict) else \
            (code.format(k.value) if isinstance(code, str) else "DeepSpeed code")
        return f"the log comes from {what} ({src.detail}, {where})"
    label = {"log-config": "the config DeepSpeed printed", "log-banner": "the log",
             "launch": "the launch command"}.get(src.kind, "")
    at = f"{label} at {where}" if label and src.location else (label or where)
    return f"{at} says {_value(fact, k.value)}"


def _matters(c: Conflict) -> bool:
    kinds = {c.kept.source.kind, c.other.source.kind}
    if c.fact not in MATTERS or kinds & _NOT_COMPARED:
        return False
    # config file vs the config the engine printed is DS320's finding (config-differs-from-log)
    return kinds != {"config", "log-config"}


def _evidence(ctx: Context, c: Conflict) -> tuple[Evidence, ...]:
    """The log lines behind either side (the facts the scanner read there)."""
    at: dict[tuple[str | None, int | None], Evidence] = {
        (f.evidence.file, f.evidence.line): f.evidence for f in ctx.facts}
    out: list[Evidence] = []
    for k in (c.kept, c.other):
        ev = at.get((k.source.file, k.source.line))
        if ev is not None and ev not in out:
            out.append(ev)
    return tuple(out)


def run_sources_disagree(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS321: two sources disagree about the stage, offload, precision or world size."""
    seen: set[tuple[str, Any, Any]] = set()
    # A checkpoint saved on N ranks and resumed on M is DS119's cause: the two world sizes are
    # two runs on purpose, not a mix-up of inputs (one cause, one problem).
    resumed = ctx.has_symptom("checkpoint-error")
    for c in ctx.run.conflicts:
        if not _matters(c) or (c.fact, c.kept.value, c.other.value) in seen:
            continue
        if resumed and c.fact == "world_size":
            continue
        seen.add((c.fact, c.kept.value, c.other.value))
        cfg = next((k for k in (c.kept, c.other) if k.source.kind == "config"), None)
        yield Finding(
            rule="", name="", severity="", title="",
            message=f"{_says(c.fact, c.kept)} but {_says(c.fact, c.other)}: is this the same run? "
                    f"dsdoctor goes by {_BY[c.kept.source.kind]} (closer to what the run did); "
                    "findings that mix the two may not apply.",
            fix="give dsdoctor the config, launch script and log of the same run (or rerun with "
                "the config you gave)",
            config_path=cfg.source.detail if cfg is not None else None,
            config_line=cfg.source.line if cfg is not None else None,
            config_file=cfg.source.file if cfg is not None else None,
            evidence=_evidence(ctx, c))


__all__ = ["MATTERS", "run_sources_disagree"]
