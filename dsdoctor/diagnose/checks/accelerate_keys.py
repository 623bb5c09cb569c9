"""Values of the Accelerate config file that Accelerate drops or refuses (DS323, DS324).

Accelerate 1.x (``utils/dataclasses.py``, ``DeepSpeedPlugin.__post_init__``): ``zero3_init_flag``
only applies to ZeRO stage 3; with a lower stage it warns "DeepSpeed Zero3 Init flag is only
applicable for ZeRO Stage 3. Setting it to False." ``Accelerator.__init__`` refuses a
``mixed_precision`` outside no/fp8/fp16/bf16 ("Unknown mixed_precision mode").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import ampere_ok, finding, gib1, param_count, show_json
from dsdoctor.diagnose.checks.runfacts import cpu_ram_bytes, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Evidence, Finding

INIT_KEY = "deepspeed_config.zero3_init_flag"
PRECISIONS = ("no", "fp8", "fp16", "bf16")


def _acc_finding(ctx: Context, key: str, message: str, fix: str,
                 evidence: tuple[Evidence, ...] = ()) -> Finding:
    assert ctx.accelerate is not None
    return finding(message, fix=fix, path=key, file=ctx.accelerate.path,
                   line=ctx.accelerate.line(key), evidence=evidence)


def _refusals(ctx: Context) -> tuple[Evidence, ...]:
    """The log's own refusal of the value (accelerate launch / Accelerator()), when it has one."""
    s = ctx.symptom("python-exception")
    if s is None:
        return ()
    return tuple(e for e in s.evidence if "mixed_precision mode" in e.text
                 or "is not a valid PrecisionType" in e.text)[:2]


def _flag(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return None


def _processes_per_node(ctx: Context) -> int | None:
    n = ctx.acc_get("num_processes")
    m = ctx.acc_get("num_machines", 1)
    if isinstance(n, int) and n > 0 and isinstance(m, int) and m > 0:
        return max(1, n // m)
    ws, nodes = ctx.run.value("world_size"), ctx.run.value("nodes", 1)
    if isinstance(ws, int) and ws > 0 and isinstance(nodes, int) and nodes > 0:
        return max(1, ws // nodes)
    return None


def _flag_gates_zero_init(ctx: Context) -> bool:
    """Whether a false zero3_init_flag keeps Transformers from building the model under
    deepspeed.zero.Init: only before Accelerate 1.0, whose DeepSpeedPlugin.set_deepspeed_weakref
    set up the HfDeepSpeedConfig only with the flag; from 1.0 it does so whatever the flag."""
    known = ctx.run.version("accelerate")
    return known is not None and parse_version(str(known.value)) < (1,)


def zero3_init_flag(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS323: zero3_init_flag true below ZeRO-3 (dropped), or false for a model the host cannot hold
    once per process."""
    if ctx.accelerate is None or not ctx.accelerate.has(INIT_KEY):
        return
    flag = _flag(ctx.acc_get(INIT_KEY))
    stage = zero_stage(ctx)
    if flag is None or stage is None:
        return
    if flag and stage < 3:
        yield _acc_finding(
            ctx, INIT_KEY,
            f"{INIT_KEY} is true with ZeRO stage {stage}: deepspeed.zero.Init partitions "
            f"parameters as the model is built, which only ZeRO-3 does, so Accelerate warns "
            f"\"DeepSpeed Zero3 Init flag is only applicable for ZeRO Stage 3. Setting it to "
            f"False.\" and loads the whole model in every process.",
            fix=f"delete {INIT_KEY} (it does nothing at stage {stage}), or set "
                f"deepspeed_config.zero_stage to 3 if the model does not fit one GPU")
        return
    if flag or stage != 3 or not _flag_gates_zero_init(ctx):
        return
    total, _, where = param_count(ctx)
    local = _processes_per_node(ctx)
    if total is None or local is None:
        return
    need = total * 2 * local  # 16-bit weights, loaded whole by every process on the node
    ram = cpu_ram_bytes(ctx)
    if ram is None:
        ctx.missing(rule.code, "whether every process can load the whole model in CPU RAM",
                    "--env")
        return
    if need <= ram:
        return
    yield _acc_finding(
        ctx, INIT_KEY,
        f"{INIT_KEY} is false with ZeRO stage 3: each of the {local} processes on a node loads the "
        f"whole model ({total / 1e9:.1f}B parameters, {where}) before DeepSpeed partitions it, "
        f"about {gib1(need)} of 16-bit weights at once, and the node has {gib1(ram)} of RAM.",
        fix=f"set {INIT_KEY} from false to true (deepspeed.zero.Init builds each parameter "
            f"already partitioned across the GPUs)")


def mixed_precision_value(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS324: mixed_precision outside no/fp8/fp16/bf16 (the guide's 'Set this to True')."""
    if ctx.accelerate is None or not ctx.accelerate.has("mixed_precision"):
        return
    v = ctx.acc_get("mixed_precision")
    if isinstance(v, str) and v.strip().lower() in PRECISIONS:
        return
    off = v is False or v is None or (isinstance(v, str) and v.strip().lower() in ("false", "none", ""))
    if off:
        fix = f"set mixed_precision from {show_json(v)} to no"
    else:
        ok = ampere_ok(ctx)
        fix = (f"set mixed_precision from {show_json(v)} to "
               + ("bf16 (every GPU of the env supports it)" if ok is True else
                  "fp16 (a GPU of this run lacks bf16)" if ok is False else
                  "bf16 on Ampere or newer GPUs (A100, H100, RTX 30xx and later), fp16 on older "
                  "ones (--env tells which)"))
    yield _acc_finding(
        ctx, "mixed_precision",
        f"mixed_precision is {show_json(v)}: Accelerate takes no, fp16, bf16 or fp8 (the guide's "
        f"help text \"Set this to True\" is not a value), so `accelerate launch` stops before "
        f"any process starts (\"ValueError: Unknown mixed_precision mode: ...\"), and so does "
        f"Accelerator() in a script started without it.",
        fix=fix, evidence=_refusals(ctx))
