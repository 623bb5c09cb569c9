"""Hooks of the cross-checks (DS2xx): config x model x environment x script x log.

Each hook is ``hook(ctx, rule) -> Iterable[Finding]``. A check that lacks a fact records which
flag would supply it (``ctx.missing``) instead of guessing; the report prints those notes.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import SCOPE_NOTE, offload_need
from dsdoctor.diagnose.hooks_symptoms import (bf16_in_use, bf16_model, finding, fp16_in_use, gib,
                                     log_facts, model_name, offload_device,
                                     param_count, script_evidence, truthy, version_tuple,
                                     zero_stage)
from dsdoctor.model import Evidence, Finding

# ------------------------------------------------------------------------------------ helpers


def package_version(ctx: Context, name: str) -> tuple[str | None, str]:
    """A package's version from the env snapshot, else from the log; with its source."""
    v = ctx.env_get(f"packages.{name}")
    if isinstance(v, str):
        return v, "env"
    v = log_facts(ctx).version(name)
    if isinstance(v, str):
        return v, "log"
    return None, ""


def _symptom_evidence(ctx: Context, *kinds: str) -> tuple[Evidence, ...]:
    ev: list[Evidence] = []
    for k in kinds:
        s = ctx.symptom(k)
        if s is not None:
            ev.extend(s.evidence[:3])
    return tuple(ev)


def _gpus(ctx: Context) -> list[dict[str, Any]]:
    g = ctx.env_get("gpus")
    return [x for x in g if isinstance(x, dict)] if isinstance(g, list) else []


def _cc(g: dict[str, Any]) -> tuple[int, int] | None:
    cc = g.get("compute_capability")
    if isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc):
        a, b = cc.split(".")
        return int(a), int(b)
    return None


# GPUs without bf16 (compute capability < 8.0), for names printed in logs when there is no env.
_PRE_AMPERE = re.compile(r"\b(V100|T4|P100|P40|P4|K80|M60|Titan V|TITAN V|Quadro RTX|"
                         r"RTX 20\d0|GTX \d{3,4}|Tesla [KMP]\d+)\b")


def _pre_ampere(ctx: Context) -> list[str]:
    """Names of GPUs that lack bf16 (env compute capability, else names in the log)."""
    out = []
    gpus = _gpus(ctx)
    for g in gpus:
        cc = _cc(g)
        if cc is not None and cc < (8, 0):
            out.append(f"{g.get('name', 'GPU')} (compute capability {cc[0]}.{cc[1]})")
    if not gpus:
        for g in log_facts(ctx).gpus:
            name = g.get("name")
            if isinstance(name, str) and _PRE_AMPERE.search(name):
                out.append(name)
    return sorted(set(out))


def _ampere_ok(ctx: Context) -> bool | None:
    """True when every known GPU supports bf16, False when one does not, None when unknown."""
    ccs = [_cc(g) for g in _gpus(ctx)]
    ccs = [c for c in ccs if c is not None]
    if ccs:
        return all(c >= (8, 0) for c in ccs)
    if _pre_ampere(ctx):
        return False
    return None


# ---------------------------------------------------------------- DS201 bf16 model run in fp16


def bf16_model_in_fp16(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS201: a bf16-pretrained model trained or inferred in fp16."""
    uses = fp16_in_use(ctx)
    if not uses:
        return
    why = bf16_model(ctx)
    if why is None:
        if ctx.model is None and model_name(ctx) is None:
            ctx.missing(rule.code, "the model's pretraining dtype", "--model PATH")
        return
    trouble = [k for k in ("nan-loss", "loss-scale-collapse", "fp16-overflow", "loss-zero")
               if ctx.has_symptom(k)]
    sev = "error" if trouble else "warning"
    if trouble:
        s = ctx.symptom(trouble[0])
        seen = (f" The log already shows {', '.join(trouble)} (first at line {s.first.line}).")
    else:
        seen = " No overflow or NaN has shown up yet; it typically does later in training."
    ok = _ampere_ok(ctx)
    if ok is False:
        gpu_fix = (f"these GPUs have no bf16 ({', '.join(_pre_ampere(ctx))}): train in fp32 "
                   "(no fp16/bf16), or use Ampere-or-newer GPUs for bf16")
    else:
        gpu_fix = ('switch to bf16: "bf16": {"enabled": true} and "fp16": {"enabled": false} '
                   "(Trainer: --bf16 instead of --fp16; Accelerate: mixed_precision: bf16)"
                   + ("" if ok else ", on Ampere or newer GPUs; otherwise fp32"))
    path, where = uses[0]
    file = line = None
    if path == "mixed_precision" and ctx.accelerate is not None:
        file, line = ctx.accelerate.path, ctx.accelerate.line(path)
    yield finding(
        f"The model is pretrained in bf16 ({why}) but runs in fp16 ({where}). bf16 has fp32's "
        "range while fp16 tops out at 65504: activations of bf16-pretrained models overflow in "
        f"fp16, giving OVERFLOW! loops, loss-scale collapse or NaN loss (training and ZeRO "
        f"inference alike).{seen}",
        fix=gpu_fix[0].upper() + gpu_fix[1:] + ".", path=path, severity=sev,
        evidence=_symptom_evidence(ctx, *trouble), file=file, line=line)


# ------------------------------------------------------ DS202 ZeRO-3 generate without synced_gpus

_SYNCED_AUTO = (4, 28)  # Transformers sets synced_gpus itself under ZeRO-3 on >1 GPU since 4.28


def zero3_generate_without_synced_gpus(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS202: ZeRO-3 on several ranks, generate() without synced_gpus."""
    stage = zero_stage(ctx)
    hang = ctx.symptom("hang")
    if not ctx.scripts:
        if stage == 3 and hang is not None:
            ctx.missing(rule.code, "generate() calls without synced_gpus", "--script train.py")
        return
    if stage is None:
        if any(sc.generate_without_sync() for sc in ctx.scripts):
            ctx.missing(rule.code, "the ZeRO stage (generate without synced_gpus hangs under "
                        "ZeRO-3)", "--config ds_config.json")
        return
    if stage != 3:
        return
    if ctx.world_size == 1:
        return
    tf, tf_src = package_version(ctx, "transformers")
    tfv = version_tuple(tf)
    calls = [(sc, g) for sc in ctx.scripts for g in sc.generate_without_sync()]
    explicit = [(sc, g) for sc, g in calls if g.synced_gpus is False]
    implicit = [(sc, g) for sc, g in calls if g.synced_gpus is None]
    # generate() turns synced_gpus on by itself only when Transformers knows ZeRO-3 is active:
    # a live HfDeepSpeedConfig, the Trainer's arguments, or Accelerate's DeepSpeed plugin.
    unknown_to_hf = [(sc, g) for sc, g in implicit
                     if not (any(h.kept_alive for h in sc.hf_ds_configs) or sc.uses_trainer
                             or sc.uses_accelerate)]
    implicit = [c for c in implicit if c not in unknown_to_hf]
    flagged = list(explicit) + unknown_to_hf
    reason = []
    if explicit:
        reason.append(f"generate() is called with synced_gpus=False ({len(explicit)} call(s))")
    if unknown_to_hf:
        reason.append(f"generate() is called without synced_gpus ({len(unknown_to_hf)} call(s)) "
                      "in a script that sets up DeepSpeed without a live HfDeepSpeedConfig, the "
                      "Trainer or Accelerate, so Transformers does not know ZeRO-3 is on and "
                      "leaves synced_gpus off (whatever its version)")
    if implicit:
        if tfv is not None and tfv < _SYNCED_AUTO:
            flagged += implicit
            reason.append(f"generate() is called without synced_gpus ({len(implicit)} call(s)) "
                          f"on Transformers {tf} (from the {tf_src}), older than 4.28, which "
                          "would set it automatically")
        elif tfv is None:
            ctx.missing(rule.code, "the Transformers version (4.28+ sets synced_gpus itself)",
                        "--env snapshot.json")
            if hang is not None:
                flagged += implicit
                reason.append(f"generate() is called without synced_gpus ({len(implicit)} "
                              "call(s); the Transformers version is unknown, and before 4.28 "
                              "it is not set automatically)")
    if not flagged:
        return
    ws = (f"{ctx.world_size} ranks" if ctx.world_size else "several ranks (world size unknown)")
    sev = "error" if hang is not None else "warning"
    tail = (f" The log shows the hang: a collective timed out at line {hang.first.line}."
            if hang is not None else " Expect a hang at the first generate() where the ranks' "
            "outputs differ in length, until the collective timeout.")
    ev = tuple(script_evidence(g.site, sc.path) for sc, g in flagged[:5])
    if hang is not None:
        ev += hang.evidence[:3]
    yield finding(
        f"ZeRO-3 runs on {ws}, and {'; '.join(reason)}. Under ZeRO-3 every forward pass gathers "
        "parameters from all ranks; a rank that finishes generating early stops joining those "
        "all-gathers and the others wait forever." + tail,
        fix="Pass synced_gpus=True to every generate() call under ZeRO-3. (Transformers >= "
            "4.28 sets it by itself only when it knows ZeRO-3 is on: a live HfDeepSpeedConfig, "
            "the Trainer, or Accelerate.)",
        path=None, severity=sev, evidence=ev, file=flagged[0][0].path,
        line=flagged[0][1].site.line)


# ------------------------------------------------------------ DS203 offload exceeds CPU RAM


def _gpus_per_node(ctx: Context) -> tuple[int, str]:
    gpus = _gpus(ctx)
    if gpus:
        return len(gpus), "env snapshot"
    for f in ctx.facts_named("launcher-nodes"):
        n = f.values.get("num_local_procs")
        if isinstance(n, int) and n > 0:
            return n, "launcher log"
    lf = log_facts(ctx)
    if ctx.world_size and (lf.nodes or 1) == 1:
        return ctx.world_size, "world size"
    return 1, "assumed (give --env)"


def offload_exceeds_cpu_ram(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS203: DeepSpeed's estimator says the configured CPU offload needs more RAM than a node has."""
    opt, par = offload_device(ctx, "optimizer"), offload_device(ctx, "param")
    stage = zero_stage(ctx) or 0
    if par == "cpu" and stage < 3:
        par = None  # offload_param exists only in ZeRO-3 (DS304 reports it)
    if opt != "cpu" and par != "cpu":
        return
    total, largest, src = param_count(ctx)
    if not total:
        ctx.missing(rule.code, "the parameter count for DeepSpeed's offload estimate",
                    "--model PATH")
        return
    ram = ctx.env_get("cpu.ram_total_bytes")
    if not isinstance(ram, int) or ram <= 0:
        ctx.missing(rule.code, "CPU RAM against the offload estimate", "--env snapshot.json")
        return
    gpn, gpn_src = _gpus_per_node(ctx)
    nodes = log_facts(ctx).nodes or 1
    # The HF Trainer / Accelerate use zero.Init under ZeRO-3; an own loop needs HfDeepSpeedConfig.
    zero_init = True
    if stage >= 3 and ctx.scripts and not ctx.uses_trainer \
            and not any(sc.hf_ds_configs or sc.uses_accelerate for sc in ctx.scripts):
        zero_init = False
    row = offload_need(stage, total, largest or 0, gpn, nodes, opt == "cpu", par == "cpu",
                       zero_init)
    if row.cpu_bytes <= ram:
        return
    oom = ctx.symptom("cpu-oom")
    sev = "error" if oom is not None else "warning"
    what = ("optimizer states and parameters" if par == "cpu" else "optimizer states")
    seen = (f" The log shows the kill: line {oom.first.line}." if oom is not None else "")
    fixes = []
    if stage >= 3 and par == "cpu":
        fixes.append('offload the parameters to NVMe instead ("offload_param": {"device": '
                     '"nvme", "nvme_path": "/local_nvme"}) or keep them on GPU')
    if stage >= 3:
        fixes.append("NVMe offload for the optimizer states (ZeRO-Infinity: "
                     '"offload_optimizer": {"device": "nvme", "nvme_path": ...})')
    else:
        fixes.append("ZeRO-3 (whose CPU need is split across nodes) with NVMe offload")
    fixes.append("more nodes (ZeRO-3 divides the CPU need by the node count), or a node with "
                 f"more than {gib(row.cpu_bytes)} of RAM")
    path = ("zero_optimization.offload_param.device" if par == "cpu"
            else "zero_optimization.offload_optimizer.device")
    yield finding(
        f"ZeRO-{stage} offloads the {what} to CPU. By DeepSpeed's estimator "
        f"(estimate_zero{3 if stage >= 3 else 2}_model_states_mem_needs, {row.options.strip()}) "
        f"that needs {gib(row.cpu_bytes)} of CPU RAM per node for {total:,} parameters ({src}) "
        f"on {nodes} node(s) x {gpn} GPU(s) ({gpn_src}), but the node has {gib(ram)} "
        f"({ctx.env_source or 'env'}). These estimates {SCOPE_NOTE}.{seen}",
        fix="; ".join(fixes) + ".", path=path, severity=sev,
        evidence=oom.evidence if oom is not None else ())


# -------------------------------------------------------------------- DS204 bf16 before Ampere


def bf16_on_pre_ampere(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS204: bf16 enabled on GPUs without bf16 support (compute capability < 8.0)."""
    uses = bf16_in_use(ctx)
    if not uses:
        return
    ds_v, ds_src = package_version(ctx, "deepspeed")
    dsv = version_tuple(ds_v)
    if dsv is not None and dsv < (0, 6, 0) and uses[0][0] == "bf16.enabled":
        yield finding(
            f"bf16 is enabled ({uses[0][1]}) but DeepSpeed {ds_v} (from the {ds_src}) predates "
            "bf16 support, added in DeepSpeed 0.6.0: the bf16 section is ignored.",
            fix="Upgrade DeepSpeed to 0.6.0 or newer (pip install -U deepspeed).",
            path="bf16.enabled")
    old = _pre_ampere(ctx)
    if not old:
        if not _gpus(ctx) and not log_facts(ctx).gpus:
            ctx.missing(rule.code, "whether the GPUs support bf16", "--env snapshot.json")
        return
    path, where = uses[0]
    yield finding(
        f"bf16 is enabled ({where}) but these GPUs predate Ampere: {', '.join(old)}. bf16 "
        "needs compute capability 8.0 or newer (A100, A10, RTX 30xx, H100, ...); it fails or "
        "is emulated very slowly.",
        fix="Use fp32, or fp16 for a model pretrained in fp16/fp32 (not for bf16-pretrained "
            "models, see DS201), or run on Ampere or newer GPUs.",
        path=path)


# ---------------------------------------------------------- DS205/DS206 ZeRO-3 loading order


def hf_deepspeed_config_dropped(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS205: HfDeepSpeedConfig not kept alive, or created after from_pretrained."""
    stage = zero_stage(ctx)
    if stage not in (None, 3):
        return
    sev = "error" if stage == 3 else "warning"
    for sc in ctx.scripts:
        for site, what in sc.hf_ds_config_problems():
            yield finding(
                f"{sc.path}:{site.line}: HfDeepSpeedConfig is {what}. Under ZeRO-3 Transformers "
                "looks for a live HfDeepSpeedConfig inside from_pretrained to load the model "
                "directly partitioned (deepspeed.zero.Init); without it every rank loads the "
                "whole model into CPU/GPU memory first.",
                fix="Create it before from_pretrained and keep a reference for the whole run: "
                    "dschf = HfDeepSpeedConfig(ds_config)  # keep this object alive",
                severity=sev, evidence=(script_evidence(site, sc.path),), file=sc.path,
                line=site.line)


def training_args_after_from_pretrained(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS206: TrainingArguments created after from_pretrained under ZeRO-3."""
    stage = zero_stage(ctx)
    if stage != 3 and not (stage is None and any(
            "deepspeed" in (site.text or "") for sc in ctx.scripts for site in sc.training_args)):
        return
    for sc in ctx.scripts:
        for ta, fp in sc.training_args_after_from_pretrained():
            yield finding(
                f"{sc.path}:{ta.line}: TrainingArguments is created after from_pretrained "
                f"(line {fp.line}). The Trainer's ZeRO-3 integration is set up by "
                "TrainingArguments; created later, the model is loaded whole on every rank "
                "instead of partitioned (zero.Init), which costs CPU RAM and time and can OOM.",
                fix="Create TrainingArguments (with deepspeed=...) before calling "
                    "from_pretrained.",
                evidence=(script_evidence(ta, sc.path), script_evidence(fp, sc.path)),
                file=sc.path, line=ta.line)


# ---------------------------------------------------------------- DS207 merge under DeepSpeed


def _deepspeed_in_use(ctx: Context) -> bool:
    if ctx.ds is not None:
        return True
    dt = ctx.acc_get("distributed_type")
    if isinstance(dt, str) and dt.upper() == "DEEPSPEED":
        return True
    if log_facts(ctx).accelerate.get("distributed_type") == "DEEPSPEED":
        return True
    if ctx.trainer_args.get("deepspeed") not in (None, False, "None", ""):
        return True
    return any(sc.uses_deepspeed for sc in ctx.scripts)


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
    for sc in ctx.scripts:
        for load, storage in sc.quant_storage_mismatches():
            yield finding(
                f"{sc.path}:{load.site.line}: from_pretrained({load.key}={load.value}) but "
                f"BitsAndBytesConfig(bnb_4bit_quant_storage={storage.value}) at line "
                f"{storage.site.line}. For QLoRA with ZeRO-3 or FSDP the packed 4-bit weights "
                "are sharded with the other parameters, so both dtypes must be the same.",
                fix=f"Use the same dtype for both: {load.key}=torch.{storage.value} (bfloat16 for "
                    "bf16 training; float32 with fp16 mixed precision).",
                evidence=(script_evidence(load.site, sc.path),
                          script_evidence(storage.site, sc.path)),
                file=sc.path, line=load.site.line)


# ------------------------------------------------------------ DS209 QLoRA + ZeRO-3 versions

QLORA_ZERO3_MIN = (("bitsandbytes", (0, 43, 0), ">="), ("accelerate", (0, 28, 0), ">="),
                   ("transformers", (4, 38, 2), ">"), ("trl", (0, 7, 11), ">"),
                   ("peft", (0, 9, 0), ">"))


def _qlora(ctx: Context) -> bool:
    if truthy(ctx.trainer_args.get("use_4bit_quantization")) or \
            truthy(ctx.trainer_args.get("load_in_4bit")):
        return True
    for sc in ctx.scripts:
        if any(d.key.startswith("bnb_4bit") for d in sc.dtypes):
            return True
    q = (ctx.model_config or {}).get("quantization_config")
    return isinstance(q, dict) and bool(q.get("load_in_4bit"))


def qlora_zero3_versions(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS209: QLoRA + ZeRO-3 with packages older than PEFT's guide requires."""
    if zero_stage(ctx) != 3 or not _qlora(ctx):
        return
    old, unknown = [], []
    for pkg, minimum, op in QLORA_ZERO3_MIN:
        v, _ = package_version(ctx, pkg)
        t = version_tuple(v)
        if t is None:
            unknown.append(pkg)
            continue
        ok = t >= minimum if op == ">=" else t > minimum
        if not ok:
            old.append(f"{pkg} {v} (needs {op} {'.'.join(map(str, minimum))})")
    if unknown and len(unknown) == len(QLORA_ZERO3_MIN):
        ctx.missing(rule.code, "package versions for QLoRA + ZeRO-3", "--env snapshot.json")
    if not old:
        return
    yield finding(
        "QLoRA with ZeRO-3 needs bitsandbytes >= 0.43.0, accelerate >= 0.28.0, transformers > "
        "4.38.2, trl > 0.7.11 and peft > 0.9.0 (4-bit weights sharded through their "
        f"quant-storage dtype); too old here: {', '.join(old)}.",
        fix="Upgrade: pip install -U " + " ".join(o.split()[0] for o in old) + ".",
        path="zero_optimization.stage")


# ------------------------------------------------- DS210 QLoRA + ZeRO-3 + CPU offload (more GPU)


def qlora_zero3_cpu_offload(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS210: QLoRA with ZeRO-3 and CPU offload uses more GPU memory, not less."""
    if zero_stage(ctx) != 3 or not _qlora(ctx):
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
