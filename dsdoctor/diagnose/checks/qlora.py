"""Checks about PEFT, LoRA and QLoRA: adapter merges (DS207), quant storage (DS208, DS316),
QLoRA + ZeRO-3 versions, offload and zero.Init (DS209, DS210, DS317), FSDP + PEFT (DS315).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import (
    enabled,
    finding,
    script_evidence,
    show_json,
    truthy_arg,
    version_tuple,
)
from dsdoctor.diagnose.checks.runfacts import offload_device, package_version, qlora, zero_stage
from dsdoctor.diagnose.checks.trainer import _deepspeed_in_use
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding


def adapter_merge_under_deepspeed(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS207: merge_and_unload()/merge_adapter() in a DeepSpeed run."""
    if not ctx.scripts or not _deepspeed_in_use(ctx):
        return
    for sc in ctx.scripts:
        for m in sc.merges:
            yield finding(
                f"{sc.path}:{m.line}: the script merges LoRA adapters into the base model "
                f"({m.text.strip()[:80]}) in a DeepSpeed run. PEFT does not support merging "
                "under DeepSpeed (under ZeRO-3 the weights are partitioned placeholders).",
                fix="Save the adapter, then merge in a separate process without DeepSpeed: "
                    "load the base model, PeftModel.from_pretrained(base, adapter_dir)"
                    ".merge_and_unload().",
                evidence=(script_evidence(m, sc.path),), file=sc.path, line=m.line)


# ---------------------------------------------------- DS208 torch_dtype vs bnb_4bit_quant_storage


def qlora_dtype_vs_quant_storage(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS208: QLoRA's torch_dtype differs from bnb_4bit_quant_storage (ZeRO-3/FSDP sharding)."""
    pairs = [(sc, load, storage) for sc in ctx.scripts for load, storage in sc.quant_storage_mismatches()]
    if not pairs:
        return
    # the storage dtype only matters where the 4-bit weights are sharded: ZeRO-3 or FSDP
    stage, fsdp = zero_stage(ctx), ctx.run.value("fsdp")
    if stage != 3 and fsdp is not True:
        if stage is None and fsdp is None:
            ctx.missing(rule.code, "whether the 4-bit weights are sharded (ZeRO-3 or FSDP)",
                        "--config or the Accelerate config")
        return
    for sc, load, storage in pairs:
        yield finding(
            f"{sc.path}:{load.site.line}: from_pretrained({load.key}={load.value}) but "
            f"BitsAndBytesConfig(bnb_4bit_quant_storage={storage.value}) at line "
            f"{storage.site.line}. For QLoRA with ZeRO-3 or FSDP the packed 4-bit weights "
            "are sharded with the other parameters, and PEFT's guides load the model in the "
            "storage dtype.",
            fix=f"Use the same dtype for both: {load.key}=torch.{storage.value} (bfloat16 for "
                "bf16 training; float32 with fp16 mixed precision).",
            evidence=(script_evidence(load.site, sc.path),
                      script_evidence(storage.site, sc.path)),
            file=sc.path, line=load.site.line)


# ------------------------------------------------------------ DS209 QLoRA + ZeRO-3 versions

#: The minimums PEFT's DeepSpeed and FSDP guides list for QLoRA: since peft 0.14 (PR #2151, a fix
#: to its SFT script) the first table, before it the second (the releases that brought
#: bnb_4bit_quant_storage sharding). A run is judged by the guide of its own peft release.
QLORA_MIN = (("bitsandbytes", (0, 43, 3), ">="), ("accelerate", (1, 0, 1), ">="),
             ("transformers", (4, 44, 2), ">"), ("trl", (0, 11, 4), ">"), ("peft", (0, 13, 0), ">"))
QLORA_MIN_BEFORE_PEFT_014 = (("bitsandbytes", (0, 43, 0), ">="), ("accelerate", (0, 28, 0), ">="),
                             ("transformers", (4, 38, 2), ">"), ("trl", (0, 7, 11), ">"),
                             ("peft", (0, 9, 0), ">"))
_PEFT_NEW_GUIDE = (0, 14)


def _minimums(ctx: Context) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    t = version_tuple(package_version(ctx, "peft")[0])
    return QLORA_MIN_BEFORE_PEFT_014 if t is not None and t[:2] < _PEFT_NEW_GUIDE else QLORA_MIN


def guide_minimums(ctx: Context) -> str:
    """The minimums of the guide the run's peft release ships, as the guide writes them."""
    return ", ".join(f"{p} {op} {'.'.join(map(str, v))}" for p, v, op in _minimums(ctx))


def packages_below_minimum(ctx: Context) -> tuple[list[tuple[str, str, str, str]], bool]:
    """(package, version, where it was read, "needs >= 0.43.3") for each package older than
    QLoRA's minimums (the same for ZeRO-3 and FSDP), and whether no version was known at all
    (then the env snapshot would settle it)."""
    old: list[tuple[str, str, str, str]] = []
    unknown = 0
    table = _minimums(ctx)
    for pkg, minimum, op in table:
        v, where = package_version(ctx, pkg)
        t = version_tuple(v)
        if t is None:
            unknown += 1
            continue
        if not (t >= minimum if op == ">=" else t > minimum):
            old.append((pkg, str(v), where, f"needs {op} {'.'.join(map(str, minimum))}"))
    return old, unknown == len(table)


def qlora_zero3_versions(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS209: QLoRA + ZeRO-3 with packages older than PEFT's guide requires."""
    if zero_stage(ctx) != 3 or not qlora(ctx).loaded_4bit:
        return
    old, none_known = packages_below_minimum(ctx)
    if none_known:
        ctx.missing(rule.code, "package versions for QLoRA + ZeRO-3", "--env snapshot.json")
    if not old:
        return
    yield finding(
        f"PEFT's DeepSpeed guide asks for {guide_minimums(ctx)} for QLoRA with ZeRO-3 (4-bit "
        f"weights sharded through their quant-storage dtype); older here: "
        f"{', '.join(f'{p} {v} ({need})' for p, v, _, need in old)}.",
        fix="Upgrade: pip install -U " + " ".join(p for p, *_ in old) + ".",
        path="zero_optimization.stage")


# ------------------------------------------------- DS210 QLoRA + ZeRO-3 + CPU offload (more GPU)


def qlora_zero3_cpu_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS210: QLoRA with ZeRO-3 and CPU offload uses more GPU memory, not less."""
    if zero_stage(ctx) != 3 or not qlora(ctx).loaded_4bit:
        return
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    if "cpu" not in (opt, par):
        return
    path = ("zero_optimization.offload_param.device" if par == "cpu"
            else "zero_optimization.offload_optimizer.device")
    yield finding(
        "QLoRA with ZeRO-3 offloads to CPU here. PEFT's guide measured that ZeRO-3 + QLoRA with "
        "CPU offload uses more GPU memory than without it (the 4-bit base weights are tiny and "
        "the offload buffers are not), and that with PEFT, CPU offload only saves the optimizer "
        "memory of the small adapter, not GPU memory.",
        fix='Drop the CPU offload ("device": "none") for QLoRA + ZeRO-3 unless measured to help.',
        path=path)


# ------------------------------------------------------------ DS315-DS317 PEFT / QLoRA

def _uses_peft(ctx: Context) -> bool | None:
    """PEFT adapters in this run: the run model when it knows, else the scripts and arguments."""
    known = ctx.run.peft
    if known is not None:
        return bool(known.value)
    if any(getattr(s, "uses_peft", False) for s in ctx.scripts):
        return True
    for k in ("use_peft_lora", "use_peft", "lora_r", "lora_rank", "lora_alpha", "finetuning_type",
              "peft_type", "use_lora"):
        if k in ctx.trainer_args:
            v = ctx.trainer_args[k]
            if k == "finetuning_type":
                return str(v).lower() in ("lora", "qlora")
            return truthy_arg(v) if k.startswith("use") else True
    if ctx.script_sources:
        return any("peft" in src and ("LoraConfig" in src or "get_peft_model" in src)
                   for src in ctx.script_sources.values())
    return None


def fsdp_peft_orig_params(ctx: Context, rule: Any) -> Iterator[Finding]:
    """FSDP + PEFT with fsdp_use_orig_params true: no memory saved on frozen weights."""
    acc = ctx.accelerate
    if acc is None or str(acc.get("distributed_type", "")).upper() != "FSDP":
        return
    v = acc.get("fsdp_config.fsdp_use_orig_params")
    if not (v is True or str(v).lower() == "true"):
        return
    if str(acc.get("fsdp_config.fsdp_version", "1")).strip() == "2":
        return  # FSDP2 always keeps the original parameters: Accelerate drops the key
    peft = _uses_peft(ctx)
    if peft is None:
        ctx.missing(rule.code, "whether PEFT/LoRA is used with FSDP", "--script")
        return
    if not peft:
        return
    pos = acc.locate("fsdp_config.fsdp_use_orig_params")
    # PEFT's own "trainable params: ... || all params: ..." line proves adapters: quote it
    lf = ctx.log_facts
    peft_ev = (lf.peft_params_ev,) if lf is not None and lf.peft_params_ev is not None \
        and ctx.run.peft is not None and ctx.run.peft.source.kind == "log-banner" else ()
    yield finding(
        "The Accelerate config runs FSDP with fsdp_use_orig_params: true, and the run trains "
        f"PEFT adapters{' (PEFT printed its trainable parameters)' if peft_ev else ''}: PEFT's "
        "FSDP guide says use_orig_params must be false to realize the GPU memory savings, with "
        "PEFT's fsdp_auto_wrap_policy wrapping trainable and frozen parameters apart.",
        path="fsdp_config.fsdp_use_orig_params", file=acc.path, line=pos.line if pos else None,
        evidence=peft_ev,
        fix="set fsdp_config.fsdp_use_orig_params from true to false in the Accelerate config "
            "(and use peft's fsdp_auto_wrap_policy)")




def _quant_storage(ctx: Context) -> tuple[str | None, str]:
    """(bnb_4bit_quant_storage dtype, where it was seen)."""
    for k in ("bnb_4bit_quant_storage_dtype", "bnb_4bit_quant_storage"):
        if k in ctx.trainer_args:
            # a dtype name never holds quotes: a command line's '"float32"' read without shell
            # quoting (the last quoted argument of a pasted launch line) is still float32
            return str(ctx.trainer_args[k]).strip("'\" ").replace("torch.", ""), f"--{k}"
    for sf in ctx.scripts:
        for d in getattr(sf, "dtypes", ()):
            if d.key == "bnb_4bit_quant_storage" and d.value:
                return d.value, f"{sf.path}:{d.site.line}"
    q = (ctx.model_config or {}).get("quantization_config")
    if isinstance(q, dict) and q.get("bnb_4bit_quant_storage"):
        return str(q["bnb_4bit_quant_storage"]).replace("torch.", ""), "the model's quantization_config"
    return None, ""


def _mixed_fp16(ctx: Context) -> str | None:
    """Where fp16 mixed precision is switched on, or None (also when the run is in bf16)."""
    if ctx.run.value("precision") == "bf16":
        return None
    if enabled(ctx.cfg_get("fp16.enabled")):
        return "fp16.enabled in the DeepSpeed config"
    if ctx.acc_get("mixed_precision") == "fp16":
        return "mixed_precision: fp16 in the Accelerate config"
    v = ctx.trainer_args.get("fp16")
    if v is not None and truthy_arg(v):
        return "--fp16"
    return None


def qlora_storage_dtype(ctx: Context, rule: Any) -> Iterator[Finding]:
    """QLoRA with fp16 mixed precision needs bnb_4bit_quant_storage float32."""
    found = qlora(ctx)
    q, q_where = found.loaded_4bit, found.where
    if not q:
        return
    fp16 = _mixed_fp16(ctx)
    if fp16 is None:
        return
    storage, s_where = _quant_storage(ctx)
    if storage is None:
        ctx.missing(rule.code, "the QLoRA bnb_4bit_quant_storage dtype", "--script or --model")
        return
    if storage in ("float32", "fp32"):
        return
    file = line = None
    if fp16.startswith("fp16.enabled"):
        path = "fp16.enabled"
    elif fp16.startswith("mixed_precision") and ctx.accelerate is not None:
        path, file = "mixed_precision", ctx.accelerate.path
        line = ctx.accelerate.line("mixed_precision")
    else:
        # The Trainer's --fp16: a command-line argument, not a config key (so no config line).
        path, file = "fp16", "command line"
    yield finding(
        f"4-bit QLoRA training ({q_where}) stores the quantized weights as {storage} "
        f"(bnb_4bit_quant_storage, {s_where}) while fp16 mixed precision is on ({fp16}): with fp16 "
        f"mixed precision PEFT's QLoRA guide sets the storage dtype to float32 \"for stable "
        f"automatic mixed precision training\" (bfloat16 storage is for pure bf16 training).",
        path=path, file=file, line=line,
        fix=f"set bnb_4bit_quant_storage from {storage} to float32 (torch.float32) where the "
            f"BitsAndBytesConfig is built ({s_where}), or train in bf16 with bfloat16 storage")


def qlora_zero3_init(ctx: Context, rule: Any) -> Iterator[Finding]:
    """QLoRA + ZeRO-3 through Accelerate needs zero3_init_flag: true."""
    acc = ctx.accelerate
    if acc is None or zero_stage(ctx) != 3:
        return
    found = qlora(ctx)
    q, q_where = found.loaded_4bit, found.where
    if q is None:
        ctx.missing(rule.code, "whether the model is loaded in 4 bits (QLoRA)", "--script or --model")
        return
    if not q:
        return
    flag = acc.get("deepspeed_config.zero3_init_flag")
    # unset, Accelerate turns it on by itself at stage 3 (ACCELERATE_DEEPSPEED_ZERO3_INIT unset)
    if flag is None or flag is True or str(flag).lower() == "true":
        return
    pos = acc.locate("deepspeed_config.zero3_init_flag") or acc.locate("deepspeed_config")
    yield finding(
        f"4-bit QLoRA ({q_where}) with ZeRO-3 through Accelerate, and "
        f"deepspeed_config.zero3_init_flag is {show_json(flag)}: PEFT's QLoRA + ZeRO-3 guide "
        f"says to set it to true when using an Accelerate config.",
        path="deepspeed_config.zero3_init_flag", file=acc.path, line=pos.line if pos else None,
        fix="set deepspeed_config.zero3_init_flag to true in the Accelerate config")
