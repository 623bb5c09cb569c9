"""DeepSpeed's model parallelism and low-precision master weights, and the RL weight sync:

- DS130: AutoTP's first-batch check found different data on the ranks of one tensor-parallel group;
- DS131: a batch whose sequence length the Ulysses sequence-parallel size does not divide;
- DS132: fp16/bf16 master weights refused without ZeRO-Offload and DeepSpeedCPUAdam (the log);
- DS133: a vLLM worker failed while receiving the trainer's weights;
- DS242: AutoTP training with packages older than DeepSpeed's AutoTP training blog asks for;
- DS330: bf16 master weights configured without optimizer offload (before launch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, lintable, show_json, version_tuple
from dsdoctor.diagnose.checks.runfacts import offload_device, package_version, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Finding

TP_KEY = "tensor_parallel.autotp_size"
#: DeepSpeed's AutoTP training blog (blogs/huggingface-tp/README.md, "Requirements").
AUTOTP_MINIMUMS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("deepspeed", (0, 16, 4)), ("transformers", (4, 50, 1)), ("accelerate", (1, 6, 0)))
#: Accelerate shards the dataloader by data-parallel rank (process_index // tp size) from 1.6.0.
ACCELERATE_TP_DATALOADER = (1, 6, 0)
MASTER_KEY = "bf16.bf16_master_weights_and_grads"
STATES_KEY = "bf16.bf16_optimizer_states"
#: bf16_master_weights_and_grads exists from DeepSpeed 0.18.3 (runtime/precision_config.py).
MASTER_KEY_SINCE = (0, 18, 3)


def _dotted(t: tuple[int, ...]) -> str:
    return ".".join(map(str, t))


def _autotp_size(ctx: Context) -> int | None:
    v = ctx.cfg_get(TP_KEY)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ----------------------------------------------------------------- DS130 AutoTP data consistency

def autotp_data_inconsistency(ctx: Context, rule: Any) -> Iterator[Finding]:
    facts = ctx.facts_named("autotp-data-inconsistent")
    if not facts:
        return
    tp = _autotp_size(ctx)
    acc, where = package_version(ctx, "accelerate")
    acc_t = version_tuple(acc)
    group = f"the {tp} ranks of each tensor-parallel group" if tp else "the ranks of a tensor-parallel group"
    fixes = []
    if acc_t is not None and acc_t < ACCELERATE_TP_DATALOADER:
        fixes.append(f"upgrade Accelerate from {acc} ({where}) to 1.6.0 or later: from 1.6.0 it "
                     f"shards the Trainer's and prepare()'s dataloader by data-parallel rank "
                     f"(process index // autotp_size), so a TP group reads one batch")
    fixes.append("with your own dataloader, sample by data-parallel rank, not by global rank "
                 "(e.g. DistributedSampler(num_replicas=world_size // autotp_size, rank=global_rank "
                 "// autotp_size) with one seed), and keep random per-rank transforms out of it")
    yield finding(
        f"DeepSpeed's AutoTP compared the first batch across {group} (tensor parallelism splits "
        f"each layer, so every rank of a group must compute on the same tokens) and found it "
        f"differs: the dataloader gives each rank its own data, as plain data parallelism does.",
        fix="; ".join(fixes), path=TP_KEY if ctx.cfg_has(TP_KEY) else None,
        evidence=(facts[0].evidence,))


# ----------------------------------------------------------------- DS131 Ulysses sequence length

def ulysses_seqlen_not_divisible(ctx: Context, rule: Any) -> Iterator[Finding]:
    facts = ctx.facts_named("ulysses-seqlen-not-divisible")
    if not facts:
        return
    f = facts[0]
    seqlen, sp = f.values.get("seqlen"), f.values.get("sp_size")
    if not isinstance(seqlen, int) or not isinstance(sp, int) or sp < 1:
        return
    padded = -(-seqlen // sp) * sp
    yield finding(
        f"Ulysses sequence parallelism splits every batch into {sp} equal slices along the "
        f"sequence, one per rank of the sequence-parallel group, and this batch had {seqlen} "
        f"tokens ({seqlen} % {sp} = {seqlen % sp}). Batches padded to the longest sample (or "
        f"packed) have a length that changes from batch to batch, so the run can stop at any step.",
        fix=f"pad every batch to a multiple of {sp} (the collator's pad_to_multiple_of={sp}, "
            f"or a multiple of it; this batch would become {padded} tokens), also for packed "
            f"sequences; a fixed seq_length must be divisible by {sp} as well",
        evidence=(f.evidence,))


# ----------------------------------------------------------------- DS132 master weights (log)

def master_weights_need_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    facts = ctx.facts_named("master-weights-need-offload")
    if not facts:
        return
    f = facts[0]
    stage, opt = f.values.get("stage"), f.values.get("optimizer")
    offloaded = str(f.values.get("offload", "")).lower() == "true"
    key = "fp16.fp16_master_weights_and_grads" if ctx.cfg_get(
        "fp16.fp16_master_weights_and_grads") is True else MASTER_KEY
    what = (f"the optimizer is {opt}, not DeepSpeedCPUAdam" if offloaded else
            "zero_optimization.offload_optimizer is not on")
    yield finding(
        f"DeepSpeed keeps 16-bit master weights and gradients ({key}) only with ZeRO-Offload "
        f"and DeepSpeedCPUAdam (the fp32 optimizer states stay on the CPU), and here {what}, "
        f"so ZeRO-{stage}'s optimizer refused to start.",
        fix=("set zero_optimization.offload_optimizer.device to \"cpu\" and let DeepSpeed build "
             "its AdamW (an optimizer section of type AdamW, no client optimizer), or remove "
             f"{key}" + ("; with bf16, bf16.bf16_optimizer_states true keeps bf16 states on the "
                         "GPU without offload" if key == MASTER_KEY else "")),
        path=key if ctx.cfg_has(key) else None, evidence=(f.evidence,))


# ----------------------------------------------------------------- DS133 vLLM weight sync

def vllm_weight_sync_failed(ctx: Context, rule: Any) -> Iterator[Finding]:
    facts = ctx.facts_named("vllm-weight-sync-failed")
    if not facts:
        return
    f = facts[0]
    ds, where = package_version(ctx, "deepspeed")
    ds_t = version_tuple(ds)
    notes = []
    if ds_t is not None and ds_t >= (0, 17, 3):
        notes.append(f"DeepSpeed {ds} ({where}) binds its NCCL communicator to the rank's GPU "
                     f"(init_process_group(device_id=...), from 0.17.3), which open-instruct "
                     f"found to hang its weight-sync group")
    yield finding(
        f"A vLLM worker failed in {f.values.get('method', 'update_weight')}: the trainer's rank 0 "
        f"broadcasts each parameter over a separate NCCL group it built with the vLLM workers, "
        f"and the workers' side of that broadcast failed (the NCCL WARN lines before it name the "
        f"transport)." + (f" {notes[0]}." if notes else ""),
        fix="set NCCL_CUMEM_ENABLE=0 in the trainer's environment where the vLLM release sets it "
            "in its own workers (older releases do; SkyRL#143 matched it); use the vLLM version "
            "your RL framework pins (OpenRLHF asks for 0.9.5 with vLLM 0.16+); with DeepSpeed 0.17.3+ "
            "initialise torch.distributed yourself without device_id before deepspeed.initialize",
        evidence=(f.evidence,))


# ----------------------------------------------------------------- DS242 AutoTP versions

def autotp_package_versions(ctx: Context, rule: Any) -> Iterator[Finding]:
    tp = _autotp_size(ctx)
    if tp is None or tp <= 1:
        return
    old: list[str] = []
    unknown = 0
    for pkg, minimum in AUTOTP_MINIMUMS:
        v, where = package_version(ctx, pkg)
        if pkg == "deepspeed" and v is None and ctx.ds_version_source != "default":
            v, where = ctx.ds_version, ctx.ds_version_source
        t = version_tuple(v)
        if t is None:
            unknown += 1
            continue
        if t < minimum:
            old.append(f"{pkg} {v} ({where}; needs >= {_dotted(minimum)})")
    if unknown == len(AUTOTP_MINIMUMS):
        ctx.missing(rule.code, "package versions for AutoTP training", "--env snapshot.json")
    if not old:
        return
    yield finding(
        f"{TP_KEY} is {tp} (AutoTP training), and DeepSpeed's AutoTP training guide asks for "
        f"deepspeed >= 0.16.4, transformers >= 4.50.1 and accelerate >= 1.6.0; older here: "
        f"{', '.join(old)}. Accelerate before 1.6.0 does not shard the dataloader by "
        f"tensor-parallel group, so the first step stops on 'Data inconsistency within the TP "
        f"group' (DS130).",
        fix="upgrade: pip install -U " + " ".join(o.split()[0] for o in old),
        path=TP_KEY)


# ----------------------------------------------------------------- DS330 bf16 master weights

def bf16_master_weights_without_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    if lintable(ctx) is None or ctx.cfg_get(MASTER_KEY) is not True:
        return
    if parse_version(ctx.ds_version) < MASTER_KEY_SINCE:
        return  # the key is unknown there (DS302 says so)
    if ctx.facts_named("master-weights-need-offload"):
        return  # the log shows the assertion itself: DS132 tells it with the log's line
    stage = zero_stage(ctx)
    if stage == 0:
        yield finding(
            f"{MASTER_KEY} is true at ZeRO stage 0: DeepSpeed's config check asserts "
            f"\"Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.\"",
            fix=f"set zero_optimization.stage to 1, 2 or 3 with optimizer offload, or remove {MASTER_KEY}",
            path=MASTER_KEY)
        return
    if ctx.cfg_get(STATES_KEY) is True:
        return  # bf16 optimizer states may stay on the GPU without offload
    if offload_device(ctx, "optimizer") == "cpu":
        return
    dev = ctx.cfg_get("zero_optimization.offload_optimizer.device")
    state = (f"zero_optimization.offload_optimizer.device is {show_json(dev)}" if dev is not None
             else "the config has no optimizer offload")
    yield finding(
        f"{MASTER_KEY} is true and {state}: DeepSpeed keeps bf16 master weights with fp32 "
        f"optimizer states only under ZeRO-Offload with DeepSpeedCPUAdam, so the ZeRO optimizer "
        f"asserts at deepspeed.initialize (\"Master weights feature requires ZeRO-N Offload "
        f"with DeepSpeedCPUAdam\").",
        fix=("add zero_optimization.offload_optimizer {\"device\": \"cpu\"} (DeepSpeed then builds "
             "DeepSpeedCPUAdam for an AdamW optimizer section), or set "
             f"{STATES_KEY} true to keep bf16 optimizer states on the GPU, or remove {MASTER_KEY}"),
        path=MASTER_KEY)


#: DeepSpeed's Muon: from 0.17.6 (config.py); up to 0.19.6 it trains silently without Newton-Schulz
#: at ZeRO stage 0 (DeepSpeed#8441) and under ZeRO-3 with a model built in zero.Init (#8438).
MUON_SINCE = (0, 17, 6)
MUON_FIXED = (0, 19, 7)
#: before 0.18.9 deepspeed.initialize asserts that Muon is not compatible with ZeRO-3 (engine.py:1706
#: at v0.18.8): a loud refusal, not a silent run
MUON_ZERO3_SINCE = (0, 18, 9)
#: what in a script or run builds the model under deepspeed.zero.Init at ZeRO-3
ZERO_INIT_MARKERS = ("zero.Init", "HfDeepSpeedConfig")


def muon_silently_inactive(ctx: Context, rule: Any) -> Iterator[Finding]:
    opt = ctx.cfg_get("optimizer.type")
    if lintable(ctx) is None or not isinstance(opt, str) or opt.lower() != "muon":
        return
    if not MUON_SINCE <= parse_version(ctx.ds_version) < MUON_FIXED:
        return
    stage = zero_stage(ctx)
    if stage == 0:
        yield finding(
            f"optimizer.type is Muon at ZeRO stage 0 on DeepSpeed {ctx.ds_version}: before 0.19.7 "
            "nothing runs Muon's Newton-Schulz step without a ZeRO optimizer, so the matrices "
            "train with plain SGD - no error, and the loss still falls.",
            fix="upgrade DeepSpeed to 0.19.7 or later, or set zero_optimization.stage to 1 or 2",
            path="optimizer.type")
        return
    built_in_zero_init = bool(ctx.uses_trainer) or any(
        marker in text for text in ctx.script_sources.values() for marker in ZERO_INIT_MARKERS)
    if stage == 3 and built_in_zero_init and parse_version(ctx.ds_version) >= MUON_ZERO3_SINCE:
        yield finding(
            f"optimizer.type is Muon at ZeRO-3 on DeepSpeed {ctx.ds_version} with the model built "
            "under deepspeed.zero.Init (the Trainer, Accelerate or a live HfDeepSpeedConfig do "
            "that at ZeRO-3): before 0.19.7 every partitioned parameter looks 1-D, none is given "
            "to Muon and all train with the AdamW branch - no error.",
            fix="upgrade DeepSpeed to 0.19.7 or later, or use ZeRO stage 1 or 2 for Muon",
            path="optimizer.type")


__all__ = ["autotp_data_inconsistency", "autotp_package_versions", "bf16_master_weights_without_offload",
           "muon_silently_inactive",
           "master_weights_need_offload", "ulysses_seqlen_not_divisible", "vllm_weight_sync_failed"]
