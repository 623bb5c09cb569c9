"""QLoRA with FSDP (the PEFT FSDP guide, "QLoRA and FSDP"): the package versions that shard 4-bit
weights (DS226), loading the base model on rank 0's CPU only (DS227), and parameter offload for a
model whose 4-bit shards fill the GPUs (DS228). ZeRO-3's counterparts are DS209/DS210/DS317.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, gpu_total_bytes, param_count
from dsdoctor.diagnose.checks.qlora import guide_minimums, packages_below_minimum
from dsdoctor.diagnose.checks.runfacts import qlora, world_size
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

LOADING_KEY = "fsdp_config.fsdp_cpu_ram_efficient_loading"
OFFLOAD_KEY = "fsdp_config.fsdp_offload_params"
ENV_VAR = "FSDP_CPU_RAM_EFFICIENT_LOADING"
#: The 4-bit shards of one GPU may take this share of it before parameter offload is advised.
SHARD_SHARE = 0.5


def _qlora_fsdp(ctx: Context) -> bool:
    return bool(ctx.run.value("fsdp")) and bool(qlora(ctx).loaded_4bit)


def _acc(ctx: Context, key: str, message: str, fix: str) -> Finding:
    assert ctx.accelerate is not None
    return finding(message, fix=fix, path=key, file=ctx.accelerate.path,
                   line=ctx.accelerate.line(key))


def _yaml(v: Any) -> str:
    """A value as the Accelerate YAML writes it (false, not False)."""
    return str(v).lower() if isinstance(v, bool) else repr(v)


def _true(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() in ("true", "1", "yes"))


def qlora_fsdp_versions(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS226: QLoRA + FSDP with packages older than the guide's minimums."""
    if not _qlora_fsdp(ctx):
        return
    old, none_known = packages_below_minimum(ctx)
    if none_known:
        ctx.missing(rule.code, "package versions for QLoRA + FSDP", "--env snapshot.json")
    if not old:
        return
    yield finding(
        f"PEFT's FSDP guide asks for {guide_minimums(ctx)} for QLoRA with FSDP (the 4-bit weights "
        f"sharded through their quant-storage dtype); older here: "
        f"{', '.join(f'{p} {v} ({where}; {need})' for p, v, where, need in old)}.",
        fix="upgrade: pip install -U " + " ".join(p for p, *_ in old))


def qlora_fsdp_ram_efficient_loading(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS227: QLoRA + FSDP without CPU-RAM-efficient loading (every rank loads the whole model)."""
    if not _qlora_fsdp(ctx):
        return
    if ctx.accelerate is not None and ctx.acc_get("distributed_type") == "FSDP":
        v = ctx.acc_get(LOADING_KEY)
        if _true(v):
            return
        state = "not set" if v is None else _yaml(v)
        yield _acc(
            ctx, LOADING_KEY if ctx.accelerate.has(LOADING_KEY) else "distributed_type",
            f"QLoRA with FSDP and {LOADING_KEY} {state}: every rank loads the whole base model "
            f"into CPU RAM before FSDP shards it, instead of rank 0 alone (the others get their "
            f"shards from it); the PEFT guide's QLoRA + FSDP config sets it to true.",
            fix=(f"set {LOADING_KEY} from {_yaml(v)} to true" if v is not None else
                 "add fsdp_cpu_ram_efficient_loading: true under fsdp_config")
            + " (FSDP1 also needs fsdp_sync_module_states: true; Accelerate turns it on itself)")
        return
    if _trainer_fsdp(ctx):
        yield from _trainer_ram_efficient_loading(ctx, rule)
        return
    env_vars = ctx.env_get("env_vars")
    if not isinstance(env_vars, dict):
        ctx.missing(rule.code, f"whether {ENV_VAR} is set for QLoRA + FSDP without an Accelerate "
                    "config", "--env snapshot.json (taken in the launch shell)")
        return
    v = env_vars.get(ENV_VAR)
    if _true(v):
        return
    yield finding(
        f"QLoRA with FSDP launched without an Accelerate config, and the environment "
        f"({ctx.env_source}) has {ENV_VAR} {'unset' if v is None else repr(v)}: every rank loads "
        f"the whole base model into CPU RAM before FSDP shards it. Without the Accelerate "
        f"launcher this variable is how the PEFT guide turns on rank-0-only loading.",
        fix=f"export {ENV_VAR}=true in the launch script before torchrun/python")


def _trainer_fsdp(ctx: Context) -> bool:
    v = ctx.trainer_args.get("fsdp")
    return v not in (None, False, "", "None", "false", "False", [])


def _trainer_ram_efficient_loading(ctx: Context, rule: Any) -> Iterator[Finding]:
    """The Trainer's --fsdp: TrainingArguments writes FSDP_CPU_RAM_EFFICIENT_LOADING itself from
    fsdp_config's cpu_ram_efficient_loading (default "false"), so an exported value is overwritten."""
    cfg = ctx.trainer_args.get("fsdp_config")
    if isinstance(cfg, str) and cfg.strip():
        ctx.missing(rule.code, f"cpu_ram_efficient_loading in --fsdp_config {cfg}", "the fsdp_config JSON")
        return
    cfg = cfg if isinstance(cfg, dict) else {}
    v = cfg.get("cpu_ram_efficient_loading", cfg.get("fsdp_cpu_ram_efficient_loading"))
    if _true(v):
        return
    exported = ctx.env_get(f"env_vars.{ENV_VAR}")
    yield finding(
        f"QLoRA with the Trainer's --fsdp and fsdp_config cpu_ram_efficient_loading "
        f"{'not set' if v is None else _yaml(v)}: TrainingArguments sets {ENV_VAR} from it "
        f"(\"false\" when unset)"
        + (f", overwriting the exported {ENV_VAR}={exported}" if exported is not None else "")
        + ", so every rank loads the whole base model into CPU RAM before FSDP shards it.",
        fix="set \"cpu_ram_efficient_loading\": true in --fsdp_config (the Trainer overwrites an "
            f"exported {ENV_VAR})")


def qlora_fsdp_offload_params(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS228: QLoRA + FSDP whose 4-bit shards fill the GPUs while fsdp_offload_params is off."""
    if not _qlora_fsdp(ctx) or ctx.accelerate is None or _true(ctx.acc_get(OFFLOAD_KEY)):
        return
    total, _, src = param_count(ctx)
    gpu, gpu_src = gpu_total_bytes(ctx)
    n = world_size(ctx)
    if not total or not gpu or not n:
        return
    shard = total * 0.5 / n  # 4-bit weights, FULL_SHARD across the ranks
    if shard <= SHARD_SHARE * gpu:
        return
    v = ctx.acc_get(OFFLOAD_KEY)
    yield _acc(
        ctx, OFFLOAD_KEY if ctx.accelerate.has(OFFLOAD_KEY) else "distributed_type",
        f"QLoRA with FSDP on {n} GPUs: the 4-bit base weights of {total:,} parameters ({src}) "
        f"take about {gib(shard)} per GPU once sharded, over {SHARD_SHARE:.0%} of the "
        f"{gib(gpu)} GPU ({gpu_src}), before the gathered layer, the LoRA states and the "
        f"activations. The PEFT guide's 70B-on-2x24GB recipe offloads the parameters "
        f"(fsdp_offload_params: true).",
        fix=(f"set {OFFLOAD_KEY} from {_yaml(v)} to true" if v is not None else
             "add fsdp_offload_params: true under fsdp_config")
        + " (slower steps: the shards live in CPU RAM)")
