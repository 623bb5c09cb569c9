"""Sources of the run model besides the configs: launch commands, Trainer arguments, adapters
(PEFT, QLoRA, FSDP) and traceback frames. Each ``from_*`` adds candidate values with the file:line
that states them; :mod:`dsdoctor.facts.run_build` picks one per fact and records conflicts.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dsdoctor.facts.launch import Launch, parse_command
from dsdoctor.facts.run import Known, Source

if TYPE_CHECKING:
    from dsdoctor.facts.context import Context


@dataclass
class Candidates:
    """Candidate values per RunModel field, in the order the sources were read."""

    by_fact: dict[str, list[Known[Any]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, fact: str, value: Any, source: Source, confidence: str = "stated") -> None:
        if value is not None:
            self.by_fact[fact].append(Known(value, source, confidence))

    def values(self, fact: str) -> list[Any]:
        return [k.value for k in self.by_fact.get(fact, [])]


def as_int(v: Any) -> int | None:
    """An integer written as int, integral float or digits; None for anything else ("auto")."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() in ("true", "1", "yes"))


def _flag(v: Any) -> bool | None:
    """A boolean command-line value (``--bf16``, ``--bf16 True``, ``--bf16 false``), else None."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    if isinstance(v, int):
        return bool(v)
    return None


# ------------------------------------------------------------------------------ launch commands

def launches(ctx: Context) -> list[Launch]:
    """Every launch command: the log's (runner cmd, launcher argv, pasted commands) first, then
    the shell scripts given with --script."""
    out: list[Launch] = []
    lf = ctx.log_facts
    for li in (lf.launches if lf is not None else []):
        parsed = parse_command(li.cmd, li.evidence.file, li.evidence.line)
        if parsed is not None:
            # the launcher's per-rank argv starts with python, but DeepSpeed's launcher printed it
            out.append(dataclasses.replace(parsed, launcher=li.launcher))
    out.extend(ctx.launch_scripts)
    return out


def from_launches(c: Candidates, ctx: Context) -> None:
    """World size, nodes, launcher, the --deepspeed path and Accelerate's launch options."""
    for la in launches(ctx):
        def src(detail: str, la: Launch = la) -> Source:
            return Source("launch", la.file, la.line, detail)

        c.add("launcher", la.launcher, src(la.launcher))
        opt = la.launcher_options
        if la.world_size is not None:
            what = {"deepspeed": "--num_gpus/--include/world_info", "torchrun": "--nproc_per_node",
                    "accelerate": "--num_processes"}.get(la.launcher, "world size")
            c.add("world_size", la.world_size, src(what))
        if la.nodes is not None:
            c.add("nodes", la.nodes, src("--num_nodes/--nnodes/--num_machines"))
        if la.ds_config:
            c.add("ds_config_path", la.ds_config, src("--deepspeed"))
        if la.launcher == "accelerate":
            mp = opt.get("mixed_precision")
            if mp in ("fp16", "bf16"):
                c.add("precision", mp, src("--mixed_precision"))
            elif mp == "no":
                c.add("precision", "fp32", src("--mixed_precision"))
            if opt.get("use_fsdp") is True:
                c.add("fsdp", True, src("--use_fsdp"))
            stage = as_int(opt.get("zero_stage"))
            if stage is not None:
                c.add("zero_stage", stage, src("--zero_stage"))
            for key in ("offload_optimizer", "offload_param"):
                dev = opt.get(f"{key}_device")
                if dev in ("none", "cpu", "nvme"):
                    c.add(key, dev, src(f"--{key}_device"))
        # A launch command alone only suggests the Trainer (inferred): the script or the log,
        # when they say, are direct evidence and are used instead (run_build adds them).
        why = trainer_evidence(la) if ctx.uses_trainer is None else ""
        if why:
            c.add("uses_trainer", True, src(why), "inferred")


#: TrainingArguments options that hand-written loops (Transformers' *_no_trainer examples,
#: DeepSpeed-Chat) do not take: two of them on one command line point at the Trainer.
TRAINER_ONLY_OPTIONS = frozenset((
    "do_train", "do_eval", "eval_strategy", "evaluation_strategy", "save_strategy",
    "logging_strategy", "logging_steps", "log_level", "save_total_limit", "max_grad_norm",
    "bf16", "fp16", "tf32", "remove_unused_columns", "warmup_ratio", "gradient_checkpointing",
    "dataloader_num_workers", "optim", "fp16_opt_level", "load_best_model_at_end"))


def trainer_evidence(la: Launch) -> str:
    """Why this launch command points at the HF Trainer, or ''.

    ``--deepspeed ds.json`` after the script is how TrainingArguments takes its DeepSpeed config
    (DeepSpeed-Chat and ``deepspeed.add_config_arguments`` scripts pass a bare ``--deepspeed``
    flag or ``--deepspeed_config``, so only a .json/.yaml value counts); options only
    TrainingArguments has are the evidence under ``accelerate launch``.
    """
    path = la.ds_config
    if la.launcher != "accelerate" and isinstance(path, str) \
            and path.endswith((".json", ".yaml", ".yml")):
        return f"passes --deepspeed {path} to the script"
    own = sorted(TRAINER_ONLY_OPTIONS & set(la.script_options))
    if len(own) >= 2:
        return "passes TrainingArguments options " + ", ".join(f"--{k}" for k in own[:3])
    return ""


# ------------------------------------------------------------------------------ Trainer arguments

_TRAINER_FACTS = (("micro_batch", "per_device_train_batch_size"),
                  ("grad_accum", "gradient_accumulation_steps"))


def _trainer_arg_sources(ctx: Context) -> list[tuple[dict[str, Any], Any]]:
    """(arguments, where(key) -> (file, line)) per source of Trainer arguments, most direct first:
    the log's (printed TrainingArguments, the launch line's arguments, or those given to the
    analysis), then each shell script's launch."""
    lf = ctx.log_facts
    evs = lf.trainer_arg_ev if lf is not None else {}

    def from_log(key: str) -> tuple[str | None, int | None]:
        ev = evs.get(key)
        return (ev.file, ev.line) if ev is not None else (None, None)

    out: list[tuple[dict[str, Any], Any]] = [(ctx.trainer_args, from_log)]
    for la in ctx.launch_scripts:
        out.append((la.script_options, lambda key, la=la: (la.file, la.line)))
    for sf in ctx.scripts:  # TrainingArguments(per_device_train_batch_size=8, ...) in a script
        values = {k: v for k, v, _ in sf.training_arg_values}
        lines = {k: n for k, _, n in sf.training_arg_values}
        if values:
            out.append((values, lambda key, sf=sf, lines=lines: (sf.path, lines.get(key))))
    return out


def from_trainer_args(c: Candidates, ctx: Context) -> None:
    """Batch, accumulation, precision, gradient checkpointing and --fsdp of the Trainer."""
    for args, where in _trainer_arg_sources(ctx):
        def src(key: str, where: Any = where) -> Source:
            file, line = where(key)
            return Source("trainer-args", file, line, key)

        for fact, key in _TRAINER_FACTS:
            c.add(fact, as_int(args.get(key)), src(key))
        bf16, fp16 = _flag(args.get("bf16")), _flag(args.get("fp16"))
        if bf16:
            c.add("precision", "bf16", src("bf16"))
        elif fp16:
            c.add("precision", "fp16", src("fp16"))
        gc = _flag(args.get("gradient_checkpointing"))
        c.add("gradient_checkpointing", gc, src("gradient_checkpointing"))
        fsdp = args.get("fsdp")
        if ((isinstance(fsdp, str) and fsdp.strip().lower() not in ("", "false", "none", "[]", "''"))
                or (isinstance(fsdp, list) and fsdp)):
            c.add("fsdp", True, src("fsdp"))
        if isinstance(args.get("deepspeed"), str):
            c.add("ds_config_path", args["deepspeed"], src("deepspeed"))
        peft_key = next((k for k in ("use_peft", "use_peft_lora") if _flag(args.get(k))), None)
        if peft_key or str(args.get("finetuning_type", "")).lower() in ("lora", "qlora"):
            c.add("peft", True, src(peft_key or "finetuning_type"))
        if _flag(args.get("load_in_4bit")) or _flag(args.get("use_4bit_quantization")) or \
                as_int(args.get("quantization_bit")) == 4:
            key = next(k for k in ("load_in_4bit", "use_4bit_quantization", "quantization_bit")
                       if k in args)
            c.add("qlora", True, src(key))


# ------------------------------------------------------------------------------ PEFT, QLoRA, FSDP

_TORCH_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}


def from_banners(c: Candidates, ctx: Context) -> None:
    """The engine's "Creating torch.bfloat16 ZeRO stage 3 optimizer": stage and precision."""
    lf = ctx.log_facts
    if lf is None or lf.zero_banner is None:
        return
    stage, dtype, ev = lf.zero_banner
    src = Source("log-banner", ev.file, ev.line, "Creating ... ZeRO stage N optimizer")
    c.add("zero_stage", stage, src)
    c.add("precision", _TORCH_DTYPES.get(dtype), src)  # "Creating fp16 ..." is not the dtype


def from_adapters(c: Candidates, ctx: Context) -> None:
    """PEFT (its own trainable-params line, a script using peft), QLoRA (4-bit loading in a
    script, the model's quantization_config) and FSDP (Accelerate config or the log's state)."""
    lf = ctx.log_facts
    if lf is not None and lf.peft_params_ev is not None:
        ev = lf.peft_params_ev
        if lf.trainable_params is not None and lf.num_params and \
                lf.trainable_params < lf.num_params:
            c.add("peft", True, Source("log-banner", ev.file, ev.line,
                                       "trainable params || all params"))
    for sf in ctx.scripts:
        if getattr(sf, "uses_peft", False):
            c.add("peft", True, Source("script", sf.path, None, "imports peft"), "inferred")
    for sf in ctx.scripts:
        for site in sf.quant_4bit[:1]:
            c.add("qlora", True, Source("script", sf.path, site.line, "load_in_4bit=True"))
    q = (ctx.model_config or {}).get("quantization_config")
    if isinstance(q, dict) and (q.get("load_in_4bit") is True or q.get("_load_in_4bit") is True):
        path = getattr(ctx.model, "path", None)
        c.add("qlora", True, Source("model", path, None, "quantization_config.load_in_4bit"))
    acc = ctx.accelerate
    if acc is not None:
        # Accelerate's num_processes is the total over machines; mixed_precision is left to
        # the Accelerate mismatch rules (DS109/DS311), not compared here.
        for fact, key in (("world_size", "num_processes"), ("nodes", "num_machines")):
            n = as_int(acc.get(key))
            if n is not None and n > 0:
                c.add(fact, n, Source("config", acc.path, acc.line(key), key))
    if ctx.accelerate is not None and ctx.accelerate.has("distributed_type"):
        dt = str(ctx.accelerate.get("distributed_type")).upper()
        c.add("fsdp", dt == "FSDP", Source("config", ctx.accelerate.path,
                                           ctx.accelerate.line("distributed_type"),
                                           "distributed_type"))
    if lf is not None and isinstance(lf.accelerate.get("distributed_type"), str):
        ev = lf.accelerate_ev.get("distributed_type")
        dt = lf.accelerate["distributed_type"].upper()
        c.add("fsdp", dt == "FSDP", Source("log-banner", ev.file if ev else None,
                                           ev.line if ev else None, "Distributed environment"))
    if lf is not None and isinstance(lf.accelerate.get("mixed_precision"), str):
        ev = lf.accelerate_ev.get("mixed_precision")
        mp = {"fp16": "fp16", "bf16": "bf16", "no": "fp32"}.get(lf.accelerate["mixed_precision"])
        c.add("precision", mp, Source("log-banner", ev.file if ev else None,
                                      ev.line if ev else None, "Mixed precision type"))


# ------------------------------------------------------------------------------ traceback frames

#: DeepSpeed modules that only ZeRO-3 runs (parameter partitioning and fetching).
_ZERO3_MODULES = ("stage3", "partition_parameters", "partitioned_param_coordinator",
                  "parameter_offload")
_ZERO12_MODULES = ("stage_1_and_2", "stage2")


def from_frames(c: Candidates, ctx: Context) -> None:
    """What the failing run's traceback went through (source kind log-frames, inferred).

    Only the first frame of each kind counts. A frame never adds a value that another source
    already gives in a compatible way (stage_1_and_2.py fits a config that says stage 1; cpu_adam
    fits an nvme offload), so a conflict means the sources really disagree.
    """
    lf = ctx.log_facts
    if lf is not None and lf.fsdp_frame_ev is not None:
        ev = lf.fsdp_frame_ev
        c.add("fsdp", True, Source("log-frames", ev.file, ev.line, "torch.distributed.fsdp frame"),
              "inferred")
    if lf is None or not (lf.frames or lf.log_modules):
        return
    seen: set[str] = set()
    # traceback frames first, then the modules DeepSpeed's logger names ([stage3.py:2323:f])
    for module, src_line, func, ev in [*lf.frames, *lf.log_modules]:
        if module in seen:
            continue
        seen.add(module)
        src = Source("log-frames", ev.file, ev.line, f"{module}.py:{src_line} in {func}")
        if module in _ZERO3_MODULES and "zero3" not in seen:
            seen.add("zero3")
            c.add("zero_stage", 3, src, "inferred")
        elif module in _ZERO12_MODULES and "zero12" not in seen:
            seen.add("zero12")
            if not any(v in (1, 2) for v in c.values("zero_stage")):
                c.add("zero_stage", 2, Source("log-frames", ev.file, ev.line,
                                              f"{module}.py:{src_line} in {func} (stage 1 or 2)"),
                      "inferred")
        elif module == "cpu_adam":
            if not any(v in ("cpu", "nvme") for v in c.values("offload_optimizer")):
                c.add("offload_optimizer", "cpu", src, "inferred")
        elif module in ("partitioned_optimizer_swapper", "pipelined_optimizer_swapper"):
            c.add("offload_optimizer", "nvme", src, "inferred")
        elif module == "partitioned_param_swapper":
            c.add("offload_param", "nvme", src, "inferred")
        elif module == "bf16_optimizer":
            c.add("precision", "bf16", src, "inferred")
        elif module in ("fp16/fused_optimizer", "fp16/unfused_optimizer"):
            c.add("precision", "fp16", src, "inferred")


__all__ = ["Candidates", "as_int", "from_adapters", "from_banners", "from_frames", "from_launches",
           "from_trainer_args", "launches", "trainer_evidence", "truthy"]
