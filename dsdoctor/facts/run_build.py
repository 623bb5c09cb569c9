"""Build the :class:`~dsdoctor.facts.run.RunModel` once, from every input of one analysis.

Each ``_from_*`` function turns one source into candidate :class:`Known` values; :func:`build`
lets :func:`~dsdoctor.facts.run.pick` choose per fact and collects the conflicts. A source that
is absent contributes nothing: the model never guesses a value no source states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsdoctor.facts import run_sources
from dsdoctor.facts.logfacts import ds_config_line
from dsdoctor.facts.run import SOURCE_RANK, Conflict, Known, RunModel, Source, pick
from dsdoctor.facts.run_sources import Candidates as _Candidates
from dsdoctor.facts.run_sources import as_int as _int
from dsdoctor.facts.run_sources import truthy as _truthy
from dsdoctor.model import Evidence

if TYPE_CHECKING:
    from dsdoctor.facts.context import Context


def _offload_device(cfg: dict[str, Any], key: str) -> str | None:
    """``"cpu"``/``"nvme"``/``"none"`` for zero_optimization.<key>, None when the config is silent."""
    zero = cfg.get("zero_optimization")
    if not isinstance(zero, dict):
        return None
    section = zero.get(key)
    if section is None:
        # the pre-0.4 boolean form: zero_optimization.cpu_offload / cpu_offload_params
        legacy = {"offload_optimizer": "cpu_offload", "offload_param": "cpu_offload_params"}[key]
        return "cpu" if _truthy(zero.get(legacy)) else None
    if isinstance(section, dict):
        device = section.get("device")
        return str(device).lower() if isinstance(device, str) and device else "none"
    return None


def _precision(cfg: dict[str, Any]) -> str | None:
    def enabled(name: str) -> bool:
        section = cfg.get(name)
        return isinstance(section, dict) and _truthy(section.get("enabled"))

    for name in ("bf16", "bfloat16", "fp16"):
        section = cfg.get(name)
        if isinstance(section, dict) and section.get("enabled") == "auto":
            return None  # the Trainer/Accelerate decide: the config states no precision
    if enabled("bf16") or enabled("bfloat16"):
        return "bf16"
    if enabled("fp16"):
        return "fp16"
    if "fp16" in cfg or "bf16" in cfg:
        return "fp32"
    return None


def _src(kind: str, ev: Evidence | None, detail: str) -> Source:
    """A source at a log line (or without a place when the line is not known)."""
    return Source(kind, ev.file, ev.line, detail) if ev is not None else Source(kind, None, None,
                                                                                detail)


def _from_ds_config(c: _Candidates, cfg: dict[str, Any], kind: str,
                    where: Callable[[str], tuple[str | None, int | None]]) -> None:
    """Facts a DeepSpeed config states. ``where(path)`` gives (file, line) of a dotted key."""

    def src(path: str) -> Source:
        file, line = where(path)
        return Source(kind, file, line, path)

    zero = cfg.get("zero_optimization")
    if isinstance(zero, dict) and "stage" in zero:
        c.add("zero_stage", _int(zero.get("stage")), src("zero_optimization.stage"))
    for key in ("offload_optimizer", "offload_param"):
        c.add(key, _offload_device(cfg, key), src(f"zero_optimization.{key}"))
    prec = _precision(cfg)
    if prec is not None:
        path = {"bf16": "bf16.enabled", "fp16": "fp16.enabled", "fp32": "fp16.enabled"}[prec]
        c.add("precision", prec, src(path))
    fp16 = cfg.get("fp16")
    if prec == "fp16" and isinstance(fp16, dict):
        # DeepSpeed's default initial_scale_power is 16 (2**16 = 65536).
        power = _int(fp16.get("initial_scale_power"))
        if power is not None:
            c.add("initial_scale_power", power, src("fp16.initial_scale_power"))
        else:
            c.add("initial_scale_power", 16, Source("default", None, None, "fp16.initial_scale_power"))
    for fact, key in (("micro_batch", "train_micro_batch_size_per_gpu"),
                      ("grad_accum", "gradient_accumulation_steps"),
                      ("train_batch", "train_batch_size")):
        c.add(fact, _int(cfg.get(key)), src(key))  # "auto" is not a number: no candidate


def _from_context(ctx: Context) -> _Candidates:
    c = _Candidates()
    lf = ctx.log_facts
    # What the run did: the frames of its tracebacks come first (see run_sources.from_frames,
    # called last because it only adds what no other source already says the same way).
    # What the run printed about its config (the engine's own view of the run).
    if ctx.ds_from_log and lf is not None:
        def log_line(path: str) -> tuple[str | None, int | None]:
            ev = ds_config_line(lf, path)
            return (ev.file, ev.line) if ev is not None else (None, None)

        _from_ds_config(c, ctx.ds_from_log, "log-config", log_line)
    # The config file given with --config (or found through an Accelerate config).
    if ctx.ds is not None and ctx.ds_source in ("config", "accelerate"):
        doc = ctx.ds
        _from_ds_config(c, doc.data, "config", lambda path: (doc.path, doc.line(path)))
    # Scale.
    if lf is not None and lf.world_size:
        ev = lf.world_size_ev
        c.add("world_size", lf.world_size, _src("log-banner", ev, "world size"))
    if lf is not None and lf.nodes:
        c.add("nodes", lf.nodes, _src("log-banner", lf.nodes_ev, "launcher nodes"))
    if ctx.world_size and ctx.world_size_source == "args":
        c.add("world_size", ctx.world_size, Source("launch", None, None, "world size given"))
    if ctx.env:
        gpus = [g for g in (ctx.env_get("gpus") or []) if isinstance(g, dict)]
        sizes = [int(g["memory_total_bytes"]) for g in gpus
                 if isinstance(g.get("memory_total_bytes"), (int, float))]
        env_src = Source("env", ctx.env_source, None, "gpus")
        if sizes:
            c.add("gpu_memory_bytes", min(sizes), env_src)
        names = [g.get("name") for g in gpus if isinstance(g.get("name"), str)]
        if names:
            c.add("gpu_name", names[0], env_src)
        if ctx.world_size_source == "env (one node)":
            # a snapshot's GPU count is the world size only if the run used every GPU of one node
            c.add("world_size", ctx.world_size,
                  Source("env", ctx.env_source, None, "gpus (one node)"), "inferred")
        ram = ctx.env_get("cpu.ram_total_bytes")
        c.add("cpu_ram_bytes", _int(ram),
              Source("env", ctx.env_source, None, "cpu.ram_total_bytes"))
        for pkg in ("deepspeed", "torch", "transformers", "accelerate", "peft", "bitsandbytes", "trl"):
            v = ctx.env_get(f"packages.{pkg}")
            if isinstance(v, str):
                c.add(f"version:{pkg}", v, Source("env", ctx.env_source, None, f"packages.{pkg}"))
    if lf is not None:
        sizes = [int(g["total_bytes"]) for g in lf.gpus
                 if isinstance(g, dict) and isinstance(g.get("total_bytes"), (int, float))]
        if sizes:
            c.add("gpu_memory_bytes", min(sizes), Source("log-banner", None, None, "GPU memory"))
        for pkg, v in lf.versions.items():
            c.add(f"version:{pkg}", v, _src("log-banner", lf.version_ev.get(pkg), f"{pkg} version"))
        c.add("model_params", lf.num_params, _src("log-banner", lf.params_ev, "parameters"))
        c.add("trainable_params", lf.trainable_params,
              _src("log-banner", lf.trainable_ev, "trainable params"))
    if ctx.model is not None and getattr(ctx.model, "params", None) is not None:
        c.add("model_params", ctx.model.params.total,
              Source("model", ctx.model.path, None, "parameters computed from config.json"),
              "inferred")
    # Launch commands (the log's and --script shell scripts'), Trainer arguments, PEFT/QLoRA/FSDP.
    run_sources.from_launches(c, ctx)
    run_sources.from_trainer_args(c, ctx)
    run_sources.from_adapters(c, ctx)
    run_sources.from_banners(c, ctx)
    if ctx.uses_trainer is not None:
        c.add("uses_trainer", ctx.uses_trainer, Source("log-banner" if ctx.facts else "script"),
              "inferred")
    if ctx.uses_accelerate:
        c.add("uses_accelerate", True, Source("config" if ctx.accelerate else "script"))
    # Progress, from the timeline (steps and fp16 skips the engine or the Trainer printed).
    _from_timeline(c, ctx)
    run_sources.from_frames(c, ctx)
    return c


def _from_timeline(c: _Candidates, ctx: Context) -> None:
    steps = [p for p in ctx.timeline if p.step is not None]
    if steps:
        last = max(steps, key=lambda p: p.step or 0)
        c.add("steps_done", last.step, Source("log-banner", last.file, last.line, "step"))
    skipped = [p for p in ctx.timeline if p.skipped is not None]
    if skipped:
        last = max(skipped, key=lambda p: p.skipped or 0)
        c.add("steps_skipped", last.skipped, Source("log-banner", last.file, last.line, "skipped"))
    lrs = [p for p in ctx.timeline if p.lr is not None]
    if lrs:
        c.add("lr_last", lrs[-1].lr, Source("log-banner", lrs[-1].file, lrs[-1].line, "lr"))


def _batch_arithmetic(fields: dict[str, Any]) -> None:
    """train batch = micro x accum x world, inferred, when all three are known and no source
    states it (a stated train batch that disagrees is DS309's finding, not a conflict here)."""
    micro, accum, world = (fields.get(k) for k in ("micro_batch", "grad_accum", "world_size"))
    if "train_batch" in fields or micro is None or accum is None or world is None:
        return
    parts = (micro, accum, world)
    weakest = max((p.source.kind for p in parts), key=lambda k: SOURCE_RANK.get(k, 99))
    detail = (f"micro {micro.value} x accum {accum.value} x world {world.value} "
              f"({micro.source.describe()}; {accum.source.describe()}; {world.source.describe()})")
    fields["train_batch"] = Known(micro.value * accum.value * world.value,
                                  Source(weakest, None, None, detail), "inferred")


def build(ctx: Context) -> RunModel:
    """The run model of one analysis context."""
    cands = _from_context(ctx)
    fields: dict[str, Any] = {}
    conflicts: list[Conflict] = []
    versions: list[tuple[str, Known[str]]] = []
    for fact, known in cands.by_fact.items():
        kept, found = pick(fact, known)
        if kept is None:
            continue
        if fact.startswith("version:"):
            versions.append((fact.split(":", 1)[1], kept))
            continue  # a version printed by another node or tool is not a conflict worth a finding
        fields[fact] = kept
        conflicts.extend(found)
    _batch_arithmetic(fields)
    return RunModel(**fields, versions=tuple(sorted(versions)), conflicts=tuple(conflicts))


__all__ = ["build"]
