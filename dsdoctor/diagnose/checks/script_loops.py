"""Training-loop calls in a script that bypass Accelerate (DS220) or save an FSDP model in shards
that from_pretrained cannot load (DS221).

The calls are read from the script's AST (never imported or run) by facts/loopcalls.py, in
scriptcheck's one visit of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.facts.context import Context
from dsdoctor.facts.loopcalls import LoopCalls, loop_calls
from dsdoctor.model import Evidence, Finding


def _scripts(ctx: Context) -> Iterator[LoopCalls]:
    seen = {sf.path: sf.loop_calls for sf in ctx.scripts}  # found by scriptcheck's one parse
    for path, text in ctx.script_sources.items():
        if not path.endswith(".py") and "import " not in text:
            continue
        calls = seen.get(path) or loop_calls(path, text)
        if calls is not None:
            yield calls


def _ev(path: str, site: tuple[int, str]) -> Evidence:
    return Evidence(file=path, line=site[0], text=site[1])


def _deepspeed_in_use(ctx: Context) -> str | None:
    """Why DeepSpeed drives this Accelerate run, or None when no input says so."""
    dt = ctx.acc_get("distributed_type")
    if isinstance(dt, str) and dt.upper() == "DEEPSPEED" and ctx.accelerate is not None:
        return f"distributed_type DEEPSPEED in {ctx.accelerate.path}"
    if ctx.ds is not None and ctx.ds_source in ("config", "log"):
        return "a DeepSpeed config" + (f" ({ctx.ds.path})" if ctx.ds_source == "config" else
                                       " printed in the log")
    for sc in ctx.scripts:
        if "DeepSpeedPlugin" in ctx.script_sources.get(sc.path, ""):
            return f"DeepSpeedPlugin in {sc.path}"
    return None


# ------------------------------------------------------------- DS220 loss.backward() + Accelerate

def backward_bypasses_accelerate(ctx: Context, rule: Any) -> Iterator[Finding]:
    """loss.backward() in a loop whose model went through accelerator.prepare()."""
    for calls in _scripts(ctx):
        if not calls.prepares or not calls.bare_backward or calls.acc_backward:
            continue
        ds = _deepspeed_in_use(ctx)
        first = calls.bare_backward[0]
        # Accelerate's DeepSpeed wrappers make optimizer.step()/zero_grad()/scheduler.step() no-ops:
        # engine.step() runs only inside accelerator.backward (utils/deepspeed.py).
        what = ("the optimizer.step() and zero_grad() of an optimizer prepared for DeepSpeed do "
                "nothing (DeepSpeed's engine steps only inside accelerator.backward), so the "
                f"weights never change and Accelerate raises no error ({ds})" if ds else
                "Accelerate's division of the loss by gradient_accumulation_steps and its fp16 "
                "loss scaling are skipped, and under DeepSpeed (give the Accelerate config with "
                "--config to know) the weights would never change")
        yield finding(
            f"{calls.path}:{first[0]} calls {first[1]!r} on a model prepared by "
            f"accelerator.prepare() ({calls.path}:{calls.prepares[0][0]}), and the script never "
            f"calls accelerator.backward(): {what}.",
            severity="error" if ds else "warning",
            fix=f"replace {first[1]!r} at {calls.path}:{first[0]} with accelerator.backward(loss) "
                f"(the loss tensor goes in as the argument)",
            evidence=(_ev(calls.path, first), _ev(calls.path, calls.prepares[0])))


# ------------------------------------------------------ DS221 FSDP sharded save + save_model

STATE_KEY = "fsdp_config.fsdp_state_dict_type"
VERSION_KEY = "fsdp_config.fsdp_version"


def _sharded_state(ctx: Context) -> tuple[str, str] | None:
    """(config path, why) when the Accelerate FSDP plugin's state dict type is SHARDED_STATE_DICT:
    written so, or left out with fsdp_version 2 (Accelerate >= 1.6 then defaults to sharded,
    FullyShardedDataParallelPlugin.set_state_dict_type), else None."""
    if ctx.accelerate is None:
        return None
    state = ctx.acc_get(STATE_KEY)
    if isinstance(state, str):
        if state.strip().upper() != "SHARDED_STATE_DICT":
            return None
        return STATE_KEY, (f"{STATE_KEY} is SHARDED_STATE_DICT ({ctx.accelerate.path}:"
                           f"{ctx.accelerate.line(STATE_KEY)})")
    if state is None and str(ctx.acc_get(VERSION_KEY, "")).strip() == "2":
        return VERSION_KEY, (f"{VERSION_KEY} is 2 and {STATE_KEY} is not set "
                             f"({ctx.accelerate.path}): Accelerate then uses SHARDED_STATE_DICT")
    return None


def fsdp_sharded_final_save(ctx: Context, rule: Any) -> Iterator[Finding]:
    """FSDP with a sharded state dict and trainer.save_model() without switching to
    FULL_STATE_DICT: Trainer.save_model() then writes no model weights."""
    sharded = _sharded_state(ctx)
    if sharded is None or ctx.accelerate is None:
        return
    path, why = sharded
    for calls in _scripts(ctx):
        if not calls.save_model or calls.full_state_dict:
            continue
        save = calls.save_model[-1]
        yield finding(
            f"{why}, and {calls.path}:{save[0]} saves with {save[1]!r} without switching to "
            f"FULL_STATE_DICT first: under FSDP the Trainer's save_model() writes the model only "
            f"with FULL_STATE_DICT, so this save writes no model weights at all (the sharded "
            f"checkpoints hold them, but from_pretrained cannot load those).",
            path=path, file=ctx.accelerate.path, line=ctx.accelerate.line(path),
            fix=f"before {save[1]!r} at {calls.path}:{save[0]} add: if trainer.is_fsdp_enabled: "
                f"trainer.accelerator.state.fsdp_plugin.set_state_dict_type(\"FULL_STATE_DICT\") "
                f"(keep SHARDED_STATE_DICT for the intermediate checkpoints)",
            evidence=(_ev(calls.path, save),))
