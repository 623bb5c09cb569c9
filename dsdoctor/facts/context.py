"""The analysis context: everything rules may look at, gathered once before the engine runs.

:func:`build_context` turns the command-line inputs (``--config``, ``--model``, ``--env``,
``--script``, ``--ds-version``) and the log's :class:`ScanResult` into a :class:`Context`.
Rules only read it; the one thing they may add is a note that a fact was missing and which flag
would supply it (:meth:`Context.missing`), so the report can say "give --env to check CPU RAM".

The inputs are read by ``dsdoctor.facts.logfacts.extract`` (the log's facts), ``modelinfo.load_model_info``
(``--model``), ``scriptcheck.check_script`` (``--script``) and ``envinfo.load_snapshot`` (``--env``),
each imported only when its input is given.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import ConfigDoc, load_config, lookup
from dsdoctor.facts.inputs import AnalysisInputs, cached
from dsdoctor.facts.run import RunModel
from dsdoctor.model import Fact, Symptom, TimelinePoint

#: The release the config lints target when nothing says which DeepSpeed runs the config.
DEFAULT_DS_VERSION = "0.19.8"


@dataclass(frozen=True)
class Missing:
    """A rule could not check something: which rule, what fact, which flag would supply it."""

    rule: str
    fact: str
    flag: str

    def __str__(self) -> str:
        return f"{self.rule}: give {self.flag} to check {self.fact}"


@dataclass
class Context:
    """Inputs of one analysis. Built once by :func:`build_context`; rules treat it as read-only."""

    symptoms: dict[str, Symptom] = field(default_factory=dict)
    timeline: list[TimelinePoint] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)  # FileSummary of the scanned logs
    # what each rank's lines said last (logs/rankfacts.py), by rank: DS107 names a hang's culprit
    rank_facts: dict[int, Any] = field(default_factory=dict)
    configs: list[ConfigDoc] = field(default_factory=list)  # every --config, as given
    ds: ConfigDoc | None = None  # the effective DeepSpeed config (from --config, else the log)
    ds_source: str | None = None  # "config" | "accelerate" | "log" | None
    ds_from_log: dict[str, Any] | None = None  # the config the engine printed, when the log has it
    accelerate: ConfigDoc | None = None
    trainer_args: dict[str, Any] = field(default_factory=dict)
    uses_trainer: bool | None = None  # True: Trainer seen (log/args/script); False: seen not used
    world_size: int | None = None
    world_size_source: str | None = None
    model: Any = None  # part B's ModelInfo
    env: dict[str, Any] | None = None  # env snapshot (see dsdoctor env --format json)
    env_source: str | None = None
    # every node's snapshot (path, snapshot) when several are given; DS246 compares them
    envs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    scripts: list[Any] = field(default_factory=list)  # ScriptFacts, one per Python --script
    launch_scripts: list[Any] = field(default_factory=list)  # launch.Launch per shell command
    script_sources: dict[str, str] = field(default_factory=dict)  # path -> text (read, not run)
    # path -> the script's syntax tree (None: not Python), parsed on a check's first ask
    script_trees: dict[str, Any] = field(default_factory=dict, repr=False)
    ds_version: str = DEFAULT_DS_VERSION  # the release the lints target
    ds_version_source: str = "default"
    log_facts: Any = None  # part B's LogFacts
    model_config: dict[str, Any] | None = None  # the raw config.json (quantization_config, ...)
    uses_accelerate: bool = False  # an Accelerate config, or a script creating Accelerator()
    notes: list[str] = field(default_factory=list)
    missing_facts: list[Missing] = field(default_factory=list)
    run: RunModel = field(default_factory=RunModel)  # what the run is: every rule reads this

    # --------------------------------------------------------------------------- config helpers
    def cfg_get(self, path: str, default: Any = None) -> Any:
        """Value at a dotted path of the effective DeepSpeed config (``zero_optimization.stage``)."""
        if self.ds is None:
            return default
        return self.ds.get(path, default)

    def cfg_has(self, path: str) -> bool:
        """True when the effective DeepSpeed config writes this path."""
        return self.ds is not None and self.ds.has(path)

    def cfg_file(self) -> str | None:
        """File of the effective DeepSpeed config (None when rebuilt from the log)."""
        if self.ds is None or self.ds_source == "log":
            return None
        return self.ds.path

    def zero_stage(self) -> int:
        """ZeRO stage as DeepSpeed reads it (0 when absent or unreadable)."""
        try:
            return int(self.cfg_get("zero_optimization.stage", 0) or 0)
        except (TypeError, ValueError, OverflowError):  # "auto", NaN, Infinity
            return 0

    def acc_get(self, path: str, default: Any = None) -> Any:
        """Value at a dotted path of the Accelerate config."""
        return self.accelerate.get(path, default) if self.accelerate is not None else default

    # --------------------------------------------------------------------------- other inputs
    def has_symptom(self, kind: str) -> bool:
        """True when the log shows this symptom kind."""
        return kind in self.symptoms

    def symptom(self, kind: str) -> Symptom | None:
        """The aggregated symptom of this kind, or None."""
        return self.symptoms.get(kind)

    def facts_named(self, name: str) -> list[Fact]:
        """Log facts with this name, in log order."""
        return [f for f in self.facts if f.name == name]

    def env_get(self, path: str, default: Any = None) -> Any:
        """Value at a dotted path of the env snapshot (``cpu.ram_total_bytes``, ``gpus[0].name``)."""
        return lookup(self.env, path, default) if self.env else default

    def gpu_memory_bytes(self) -> int | None:
        """Smallest GPU memory (the GPU that OOMs first): env snapshot, else the log, else None."""
        sizes: list[float] = [
            g["memory_total_bytes"] for g in (self.env_get("gpus") or [])
            if isinstance(g, dict) and isinstance(g.get("memory_total_bytes"), (int, float))]
        if not sizes and self.log_facts is not None:
            sizes = [g["total_bytes"] for g in getattr(self.log_facts, "gpus", None) or []
                     if isinstance(g, dict) and isinstance(g.get("total_bytes"), (int, float))]
        return int(min(sizes)) if sizes else None

    def missing(self, rule: str, fact: str, flag: str) -> None:
        """Record that ``rule`` needs ``fact`` (supplied by ``flag``) and could not check it."""
        m = Missing(rule, fact, flag)
        if m not in self.missing_facts:
            self.missing_facts.append(m)
            self.notes.append(str(m))

    @property
    def inputs(self) -> dict[str, Any]:
        """What this analysis used besides the log (for ``Report.inputs``)."""
        return {
            "configs": [{"path": d.path, "kind": d.kind} for d in self.configs],
            "deepspeed_config": (None if self.ds is None else
                                 {"source": self.ds_source, "path": self.cfg_file()}),
            "ds_version": {"release": self.ds_version, "source": self.ds_version_source},
            "env": self.env_source,
            "model": getattr(self.model, "path", None),
            "scripts": list(self.script_sources),
            "world_size": ({"value": self.world_size, "source": self.world_size_source}
                           if self.world_size else None),
            "trainer": self.uses_trainer,
        }


# ------------------------------------------------------------------------------------ building



_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?")


def _version_of(value: Any) -> str | None:
    if isinstance(value, str):
        m = _VERSION.match(value.strip().lstrip("v"))
        if m:
            return m.group()
    return None


def _coerce_trainer_args(raw: Any) -> dict[str, Any]:
    """Trainer arguments given as a dict or as an argv list (``["--fp16", "--lr", "2e-5"]``)."""
    if isinstance(raw, dict):
        return {str(k).lstrip("-").replace("-", "_"): v for k, v in raw.items()}
    out: dict[str, Any] = {}
    if isinstance(raw, (list, tuple)):
        items = [str(x) for x in raw]
        i = 0
        while i < len(items):
            tok = items[i]
            if tok.startswith("--"):
                name, eq, val = tok[2:].partition("=")
                name = name.replace("-", "_")
                if eq:
                    out[name] = val
                elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                    out[name] = items[i + 1]
                    i += 1
                else:
                    out[name] = True
            i += 1
    return out


def build_context(inputs: AnalysisInputs, scan_result: Any = None) -> Context:
    """Gather every input of one analysis into a :class:`Context`.

    ``inputs`` names the configs, model, env snapshot, scripts, the lint release and, for rule
    examples and tests, Trainer arguments and a world size. ``scan_result`` is the log's
    ScanResult (or None for a pre-flight check without a log). Each file is read once per process
    (:func:`~dsdoctor.facts.inputs.cached`).
    """
    ctx = Context()
    if scan_result is not None:
        ctx.symptoms = dict(getattr(scan_result, "symptoms", {}) or {})
        ctx.timeline = list(getattr(scan_result, "timeline", []) or [])
        ctx.facts = list(getattr(scan_result, "facts", []) or [])
        ctx.files = list(getattr(scan_result, "files", []) or [])
        ctx.rank_facts = dict(getattr(scan_result, "ranks", {}) or {})

    # Configs: at most one DeepSpeed config and one Accelerate config make sense together.
    for path in inputs.configs:
        doc = cached("config", path, load_config)
        ctx.configs.append(doc)
        ctx.notes.extend(doc.notes)
        if doc.kind == "accelerate":
            if ctx.accelerate is None:
                ctx.accelerate = doc
            else:
                ctx.notes.append(f"{path}: a second Accelerate config; only {ctx.accelerate.path} is used")
            if doc.deepspeed is not None and ctx.ds is None:
                ctx.ds, ctx.ds_source = doc.deepspeed, "accelerate"
        elif ctx.ds is None or ctx.ds_source == "accelerate":
            ctx.ds, ctx.ds_source = doc, "config"
        else:
            ctx.notes.append(f"{path}: a second DeepSpeed config; only {ctx.ds.path} is linted "
                             "against the log")

    # Facts the log states (part B's logfacts): Trainer arguments, printed config, world size.
    if ctx.facts:
        from dsdoctor.facts.logfacts import extract

        lf = ctx.log_facts = extract(ctx.facts)
        ctx.trainer_args.update(lf.trainer_args)
        ds_log = lf.ds_config
        if isinstance(ds_log, dict) and ds_log:
            ctx.ds_from_log = ds_log
            if ctx.ds is None:
                # A config rebuilt from the engine's attribute dump has names dsdoctor chose:
                # mark it synthesized so key-name lints (DS302/303/319) leave it alone. The
                # user's own JSON block printed by the engine is linted like a file.
                rebuilt = lf.ds_config_source != "json"
                ctx.ds = ConfigDoc("<log: DeepSpeed config>", "deepspeed", ds_log, synthesized=rebuilt)
                ctx.ds_source = "log"
                ctx.notes.append("no --config: checked the DeepSpeed config the engine printed in "
                                 "the log")
        ws = lf.world_size
        if isinstance(ws, int) and ws > 0:
            ctx.world_size, ctx.world_size_source = ws, "log"
        if lf.uses_trainer is not None:
            ctx.uses_trainer = bool(lf.uses_trainer)

    explicit = inputs.trainer_args
    if explicit:
        ctx.trainer_args.update(_coerce_trainer_args(explicit))
        ctx.uses_trainer = True
    # Arguments on a command line are not proof of the Trainer: DeepSpeed-Chat and many scripts
    # take --per_device_train_batch_size too and call deepspeed.initialize themselves.

    # Environment snapshot.
    env_spec = inputs.env
    if env_spec:
        from dsdoctor.facts.envinfo import load_snapshot  # "local" collects this machine's

        ctx.env = load_snapshot(env_spec) if env_spec == "local" else cached(
            "env", env_spec, load_snapshot)
        ctx.env_source = "this machine" if env_spec == "local" else env_spec
        ctx.envs = [(p, load_snapshot(p) if p == "local" else cached("env", p, load_snapshot))
                    for p in inputs.envs]
        if ctx.world_size is None:
            gpus = ctx.env_get("gpus")
            # A snapshot describes one node; its GPU count is the world size only for one node.
            if isinstance(gpus, list) and gpus and ctx.env_get("nodes", 1) == 1:
                ctx.world_size, ctx.world_size_source = len(gpus), "env (one node)"
    if ctx.world_size is None and isinstance(inputs.world_size, int):
        ctx.world_size, ctx.world_size_source = inputs.world_size, "args"

    # Model config (never weights).
    model_path = inputs.model
    if model_path:
        from dsdoctor.facts.modelinfo import load_model_json, model_info_from_config

        # cache on the file itself: a directory's stamp does not change when config.json does
        inner = os.path.join(model_path, "config.json")
        model_file = inner if os.path.isdir(model_path) and os.path.isfile(inner) else model_path
        # read and parsed once: the facts dsdoctor computes, and the raw dict the checks read
        cfg, where = cached("model-json", model_file, load_model_json)
        ctx.model = cached("model", model_file, lambda _p: model_info_from_config(cfg, where))
        ctx.model_config = cfg

    # Scripts: read as text, never imported or run. A Python training script gets the AST
    # checks; a shell launch script (run.sh) gives its deepspeed/torchrun/accelerate commands.
    if inputs.scripts:
        from dsdoctor.facts.launch import is_shell_script, read_launch_script, read_script_bytes
        from dsdoctor.facts.scriptcheck import check_source
    for path in inputs.scripts:
        raw = cached("bytes", path, read_script_bytes)
        text = raw.decode("utf-8", "replace")
        ctx.script_sources[path] = text
        if is_shell_script(path, text):
            if b"\x00" in raw[:65536]:
                raise UsageError(f"{path}: binary file (NUL bytes), not a shell launch script; "
                                 "pass the .sh that launches the training")
            ctx.launch_scripts.extend(cached(
                "launch", path, functools.partial(read_launch_script, text=text)))
        else:
            ctx.scripts.append(cached("script", path, functools.partial(check_source, raw)))
    if ctx.uses_trainer is None and ctx.scripts:
        ctx.uses_trainer = any(sf.uses_trainer for sf in ctx.scripts)
    ctx.uses_accelerate = ctx.accelerate is not None or any(sf.uses_accelerate for sf in ctx.scripts)

    # Which DeepSpeed release the config is linted for.
    target = _version_of(inputs.ds_version)
    if target:
        ctx.ds_version, ctx.ds_version_source = target, "--ds-version"
    else:
        env_v = _version_of(ctx.env_get("packages.deepspeed"))
        log_v = _version_of(ctx.log_facts.version("deepspeed")) if ctx.log_facts is not None else None
        if env_v:
            ctx.ds_version, ctx.ds_version_source = env_v, "env"
        elif log_v:
            ctx.ds_version, ctx.ds_version_source = log_v, "log"
    from dsdoctor.facts import run_build

    ctx.run = run_build.build(ctx)
    return ctx


__all__ = ["Context", "Missing", "build_context", "DEFAULT_DS_VERSION"]
