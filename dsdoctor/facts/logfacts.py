"""Structured facts from the log: launch command, Trainer arguments, engine config, world size.

The scanner turns the patterns of ``dsdoctor/logs/formats/facts.yaml`` into :class:`~dsdoctor.model.Fact`
events (``values`` = the regex's named groups); :func:`extract` folds them into one
:class:`LogFacts` value for the rules. Nothing here executes log text: argument lists printed
as Python lists are read with :func:`ast.literal_eval` (literals only), dict reprs likewise.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.facts.printed import (
    coerce,
    config_from_engine_items,
    literal,
    load_config_json,
    parse_kv_repr,
    read_json_block,
)
from dsdoctor.model import Evidence, Fact

#: Command-line arguments whose value is a model name or path (for the bf16 family table).
MODEL_ARGS = ("model_name_or_path", "model_name", "model", "model_id", "model_path",
              "base_model", "pretrained_model_name_or_path", "name", "actor_model_name_or_path")

_PKG_ALIASES = {"pytorch": "torch", "deepspeed": "deepspeed", "transformers": "transformers",
                "accelerate": "accelerate", "peft": "peft", "trl": "trl",
                "bitsandbytes": "bitsandbytes", "torch": "torch"}


@dataclass(frozen=True)
class LaunchInfo:
    """How the run was started, as the log shows it."""

    launcher: str  # deepspeed | accelerate | torchrun | python
    cmd: str  # the command line as printed (user script arguments included when shown)
    script: str | None  # the training script
    script_args: tuple[str, ...]  # arguments after the script
    evidence: Evidence


@dataclass
class LogFacts:
    """Everything the log states about the run. Fields are None/empty when the log is silent."""

    launches: list[LaunchInfo] = field(default_factory=list)
    trainer_args: dict[str, Any] = field(default_factory=dict)  # name (no dashes) -> typed value
    ds_config: dict[str, Any] | None = None  # the DeepSpeed config the engine printed
    ds_config_source: str | None = None  # "json" (user config block) | "engine" (key dump)
    engine_items: dict[str, str] = field(default_factory=dict)  # raw printed key -> value text
    world_size: int | None = None
    nodes: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)  # {"index","name"} / {"total_bytes"}
    num_params: int | None = None  # total parameters (PEFT all params, or ZeRO-3 num_elems)
    trainable_params: int | None = None
    versions: dict[str, str] = field(default_factory=dict)  # package -> version
    cuda: dict[str, str] = field(default_factory=dict)  # "torch cuda" / "nvcc" -> version
    accelerate: dict[str, Any] = field(default_factory=dict)  # distributed_type, mixed_precision
    accelerate_ds_config: dict[str, Any] | None = None
    uses_trainer: bool | None = None
    # Where each fact was read (the run model quotes file:line); None/empty when not read.
    world_size_ev: Evidence | None = None
    nodes_ev: Evidence | None = None
    ds_config_ev: Evidence | None = None  # the printed json block's first line, or the dump header
    engine_item_ev: dict[str, Evidence] = field(default_factory=dict)  # printed key -> its line
    trainer_arg_ev: dict[str, Evidence] = field(default_factory=dict)  # argument -> its line
    params_ev: Evidence | None = None  # the line giving num_params
    trainable_ev: Evidence | None = None  # the line giving trainable_params
    peft_params_ev: Evidence | None = None  # PEFT's "trainable params: ... || all params: ..."
    accelerate_ev: dict[str, Evidence] = field(default_factory=dict)  # distributed_type, ...
    frames: list[tuple[str, int, str, Evidence]] = field(default_factory=list)  # DeepSpeed frames
    log_modules: list[tuple[str, int, str, Evidence]] = field(default_factory=list)  # [stage3.py:N:f]
    zero_banner: tuple[int, str, Evidence] | None = None  # "Creating <dtype> ZeRO stage N optimizer"
    fsdp_frame_ev: Evidence | None = None  # a traceback frame inside torch.distributed.fsdp
    version_ev: dict[str, Evidence] = field(default_factory=dict)  # package -> the line naming it

    def best_launch(self) -> LaunchInfo | None:
        """The launch showing the most script arguments (the runner's cmd often shows none)."""
        if not self.launches:
            return None
        return max(self.launches, key=lambda li: (len(li.script_args), li.script is not None))

    @property
    def model_name(self) -> str | None:
        """The model name/path given on the command line (``--model_name_or_path ...``)."""
        for key in MODEL_ARGS:
            v = self.trainer_args.get(key)
            if isinstance(v, str) and v:
                return v
        return None

    def version(self, package: str) -> str | None:
        """Version string of a package named in the log (ds_report, env dumps, pip lists)."""
        return self.versions.get(package)

    def mixed_precision(self) -> str | None:
        """fp16 / bf16 / no as the run's own output states it (Accelerate, then Trainer args)."""
        mp = self.accelerate.get("mixed_precision")
        if isinstance(mp, str):
            return mp.lower()
        if self.trainer_args.get("fp16") is True:
            return "fp16"
        if self.trainer_args.get("bf16") is True:
            return "bf16"
        return None


def parse_argv(tokens: list[str]) -> tuple[str | None, tuple[str, ...], dict[str, Any]]:
    """Split a command into (script, script args, {argument: value}) for the script's options.

    ``--flag`` alone is True; ``--key value``/``--key=value`` are coerced; repeated values
    (``--data_path a b c``) become a list.
    """
    script, rest = _script_and_rest(tokens)
    return script, rest, _options(rest)


def _script_and_rest(tokens: list[str]) -> tuple[str | None, tuple[str, ...]]:
    """The training script (or ``-m`` module) of a command and the arguments after it."""
    for i, tok in enumerate(tokens):
        if tok.endswith(".py") and not tok.startswith("-"):
            return tok, tuple(tokens[i + 1:])
    # "-m module": the module plays the script's part.
    for i, tok in enumerate(tokens[:-1]):
        if tok == "-m" and not tokens[i + 1].startswith(("deepspeed.launcher", "torch.distributed")):
            return tokens[i + 1], tuple(tokens[i + 2:])
    return None, ()


def _options(rest: tuple[str, ...]) -> dict[str, Any]:
    """``--key value`` options of a script's arguments (see :func:`parse_argv`)."""
    args: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok.startswith("--") and len(tok) > 2:
            name, eq, val = tok[2:].partition("=")
            name = name.replace("-", "_")
            if eq:
                args[name] = coerce(val)
                i += 1
                continue
            vals = []
            j = i + 1
            while j < len(rest) and not (rest[j].startswith("--") and len(rest[j]) > 2):
                vals.append(rest[j])
                j += 1
            if not vals:
                args[name] = True
            elif len(vals) == 1:
                args[name] = coerce(vals[0])
            else:
                args[name] = [coerce(v) for v in vals]
            i = j
        else:
            i += 1
    return args


def _split_cmd(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError:  # an unbalanced quote in a pasted command
        return cmd.split()


def _launch_from_cmd(cmd: str, ev: Evidence) -> LaunchInfo:
    tokens = _split_cmd(cmd)
    head = " ".join(tokens[:4])
    if tokens[:2] == ["accelerate", "launch"]:
        launcher = "accelerate"
    elif "torchrun" in tokens[:1] or "torch.distributed" in head:
        launcher = "torchrun"
    elif tokens[:1] == ["deepspeed"] or "deepspeed.launcher" in head:
        launcher = "deepspeed"
    else:
        launcher = "python"
    script, rest = _script_and_rest(tokens)
    return LaunchInfo(launcher, cmd, script, rest, ev)


# ------------------------------------------------------------------------------ extraction

#: Printed engine keys that state a config path (``ds_config_line`` quotes their log line).
_ENGINE_KEY_OF_PATH = {
    "zero_optimization.stage": ("zero_config", "zero_optimization_stage"),
    "zero_optimization.offload_optimizer": ("zero_config", "zero_optimization"),
    "zero_optimization.offload_param": ("zero_config", "zero_optimization"),
    "fp16.enabled": ("float16_config", "fp16_enabled"),
    "bf16.enabled": ("bfloat16_config", "bfloat16_enabled"),
    "fp16.initial_scale_power": ("float16_config", "initial_dynamic_scale"),
}


def ds_config_line(lf: LogFacts, path: str) -> Evidence | None:
    """The log line that states ``path`` of the printed DeepSpeed config (the json block's first
    line, or the engine's own line for the key), or None."""
    if lf.ds_config_source == "engine":
        for key in _ENGINE_KEY_OF_PATH.get(path, (path.split(".")[-1],)):
            if key in lf.engine_item_ev:
                return lf.engine_item_ev[key]
    return lf.ds_config_ev


def extract(facts: Iterable[Fact]) -> LogFacts:
    """Fold the scanner's fact events into one LogFacts value."""
    lf = LogFacts()
    json_configs: list[tuple[dict[str, Any], Evidence]] = []
    dump_args: dict[str, tuple[Any, Evidence]] = {}
    engine_header: Evidence | None = None
    for f in facts:
        v, ev = f.values, f.evidence
        if f.name == "launch-cmd" and isinstance(v.get("cmd"), str):
            lf.launches.append(_launch_from_cmd(v["cmd"], ev))
        elif f.name == "launch-argv":
            argv = literal(v.get("argv", ""))
            if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                script, rest = _script_and_rest(argv)
                lf.launches.append(LaunchInfo("deepspeed", shlex.join(argv), script, rest, ev))
        elif f.name == "subprocess-argv":
            # the training command a launcher ran (accelerate's simple_launcher): plain python
            argv = literal(v.get("argv", ""))
            if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                script, rest = _script_and_rest(argv)
                if script is not None:
                    lf.launches.append(LaunchInfo("python", shlex.join(argv), script, rest, ev))
        elif f.name == "world-size":
            ws = v.get("world_size")
            if isinstance(ws, int) and ws > 0 and lf.world_size is None:
                lf.world_size, lf.world_size_ev = ws, ev
        elif f.name == "launcher-nodes":
            if isinstance(v.get("nnodes"), int):
                lf.nodes, lf.nodes_ev = v["nnodes"], ev
        elif f.name == "engine-config":
            engine_header = engine_header or ev
        elif f.name == "engine-config-item":
            key, val = v.get("key"), v.get("value")
            if isinstance(key, str) and isinstance(val, str):
                lf.engine_items.setdefault(key, val)
                lf.engine_item_ev.setdefault(key, ev)
        elif f.name == "ds-config-json":
            raw = v.get("json")
            data = load_config_json(raw) if isinstance(raw, str) else None
            if data is not None:
                json_configs.append((data, ev))
        elif f.name == "ds-config-json-start":
            # Only when join_next did not catch the block whole (it precedes on the same line).
            if not json_configs:
                data = read_json_block(ev.file, ev.line)
                if data is not None:
                    json_configs.append((data, ev))
        elif f.name == "ds-frame":
            if isinstance(v.get("module"), str):
                lf.frames.append((v["module"], int(v.get("src_line") or 0), str(v.get("func", "")),
                                  ev))
        elif f.name == "ds-log-module":
            if isinstance(v.get("module"), str) and len(lf.log_modules) < 64:
                lf.log_modules.append((v["module"], int(v.get("src_line") or 0),
                                       str(v.get("func", "")), ev))
        elif f.name == "zero-optimizer":
            dtype = str(v.get("dtype", ""))
            if isinstance(v.get("stage"), int) and (lf.zero_banner is None or (
                    dtype.startswith("torch.") and not lf.zero_banner[1].startswith("torch."))):
                lf.zero_banner = (v["stage"], dtype, ev)
        elif f.name == "fsdp-frame":
            lf.fsdp_frame_ev = lf.fsdp_frame_ev or ev
        elif f.name == "accelerate-ds-config":
            d = literal(v.get("dict", ""))
            if isinstance(d, dict) and lf.accelerate_ds_config is None:
                lf.accelerate_ds_config = d
        elif f.name == "accelerate-state":
            lf.accelerate.setdefault("distributed_type", v.get("distributed_type"))
            lf.accelerate_ev.setdefault("distributed_type", ev)
        elif f.name == "accelerate-mixed-precision":
            lf.accelerate.setdefault("mixed_precision", v.get("mixed_precision"))
            lf.accelerate_ev.setdefault("mixed_precision", ev)
        elif f.name == "num-elems":
            b = v.get("num_elems_b", v.get("params_b"))
            if isinstance(b, (int, float)) and 0 < b < 1e6 and lf.num_params is None:
                lf.num_params, lf.params_ev = int(b * 1e9), ev
        elif f.name == "trainable-params":
            if isinstance(v.get("trainable"), int) and lf.trainable_params is None:
                lf.trainable_params, lf.trainable_ev = v["trainable"], ev
            if isinstance(v.get("total"), int) and v["total"] > 0:
                # exact count beats ZeRO-3's rounded billions; only PEFT prints "all params"
                lf.num_params, lf.params_ev = v["total"], ev
                lf.peft_params_ev = lf.peft_params_ev or ev
        elif f.name == "package-version":
            pkg = _PKG_ALIASES.get(str(v.get("package", "")).lower())
            ver = v.get("version")
            if pkg and isinstance(ver, str):
                lf.versions.setdefault(pkg, ver)
                lf.version_ev.setdefault(pkg, ev)
        elif f.name == "cuda-version":
            if isinstance(v.get("which"), str) and isinstance(v.get("version"), str):
                lf.cuda.setdefault(v["which"], v["version"])
        elif f.name == "gpu-name":
            lf.gpus.append({"index": v.get("index"), "name": v.get("name")})
        elif f.name == "gpu-memory":
            if isinstance(v.get("total"), int):
                lf.gpus.append({"total_bytes": v["total"]})
        elif f.name == "trainer-args-dump":
            lf.uses_trainer = True
        elif f.name == "trainer-arg":
            key = v.get("key")
            if isinstance(key, str):
                dump_args.setdefault(key, (coerce(v.get("value", "")), ev))
        elif f.name == "trainer-batch":
            lf.uses_trainer = True if lf.uses_trainer is None else lf.uses_trainer

    # Trainer arguments: the command line first, the printed TrainingArguments win (effective).
    best = lf.best_launch()
    if best is not None:
        for k, val in _options(best.script_args).items():
            if k in ("local_rank", "world_info"):
                continue
            lf.trainer_args[k] = val
            lf.trainer_arg_ev[k] = best.evidence
    for k, (val, ev) in dump_args.items():
        if k in ("local_rank", "_n_gpu", "world_size"):
            continue
        lf.trainer_args[k] = val
        lf.trainer_arg_ev[k] = ev

    # The DeepSpeed config: the user's printed JSON when whole, else the engine's key dump.
    if json_configs:
        (lf.ds_config, lf.ds_config_ev), lf.ds_config_source = json_configs[0], "json"
    elif lf.engine_items:
        cfg = config_from_engine_items(lf.engine_items)
        if cfg:
            lf.ds_config, lf.ds_config_source = cfg, "engine"
            lf.ds_config_ev = engine_header or next(iter(lf.engine_item_ev.values()), None)
    ws = coerce(lf.engine_items.get("world_size"))
    if lf.world_size is None and isinstance(ws, int) and ws > 0:
        lf.world_size, lf.world_size_ev = ws, lf.engine_item_ev.get("world_size")
    return lf


# coerce, literal, parse_kv_repr, config_from_engine_items and read_json_block live in
# facts/printed.py and are re-exported here for existing callers.
__all__ = ["LogFacts", "LaunchInfo", "ds_config_line", "extract", "parse_argv", "parse_kv_repr",
           "config_from_engine_items", "coerce", "literal", "read_json_block", "MODEL_ARGS"]
