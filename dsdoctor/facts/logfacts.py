"""Structured facts from the log: launch command, Trainer arguments, engine config, world size.

The scanner turns the patterns of ``dsdoctor/logs/formats/facts.yaml`` into :class:`~dsdoctor.model.Fact`
events (``values`` = the regex's named groups); :func:`extract` folds them into one
:class:`LogFacts` value for the rules. Nothing here executes log text: argument lists printed
as Python lists are read with :func:`ast.literal_eval` (literals only), dict reprs likewise.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable

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


# ------------------------------------------------------------------------------ value parsing

def coerce(text: Any) -> Any:
    """A printed scalar as a Python value: True/False/None, int, float, else the string."""
    if not isinstance(text, str):
        return text
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", t):  # DeepSpeed < 0.10 prints 500,000,000
            return int(t.replace(",", ""))
        if re.fullmatch(r"[+-]?\d+", t):
            return int(t)
        if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", t):
            f = float(t)
            return f if math.isfinite(f) else t
    except (ValueError, OverflowError):  # more digits than Python converts
        return t
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    return t


def literal(text: str) -> Any:
    """``ast.literal_eval`` of a printed list/dict (literals only; None when it is not one)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


_KV_KEY = re.compile(r"\s*([A-Za-z_]\w*)=")
_KV_NEXT = re.compile(r"[ ,]+[A-Za-z_]\w*=")


def parse_kv_repr(text: str) -> dict[str, Any]:
    """Parse pydantic's ``__repr_str__`` output: ``a=1 b=Cls(c='x', d=None) e=[1, 2]``.

    Nested ``Cls(...)`` become dicts; values are coerced; unparsable pieces stay strings.
    """
    out: dict[str, Any] = {}
    i, n = 0, len(text)
    while i < n:
        m = _KV_KEY.match(text, i)
        if not m:
            break
        key = m.group(1)
        j = m.end()
        depth, quote = 0, ""
        k = j
        while k < n:
            ch = text[k]
            if quote:
                if ch == "\\":
                    k += 2
                    continue
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif depth == 0 and (ch == " " or ch == ","):
                if _KV_NEXT.match(text, k):
                    break
            k += 1
        out[key] = _repr_value(text[j:k].strip())
        i = k
        while i < n and text[i] in " ,":
            i += 1
    return out


def _repr_value(v: str) -> Any:
    m = re.fullmatch(r"[A-Za-z_]\w*\((.*)\)", v, re.S)
    if m:
        return parse_kv_repr(m.group(1))
    if v[:1] in "[{(":
        lit = literal(v)
        return lit if lit is not None else v
    return coerce(v)


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


# ------------------------------------------------------------------------------ engine config

_ZERO_ALIASES = {  # pydantic field name -> DeepSpeed config key
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "model_persistence_threshold": "stage3_model_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
    "gather_16bit_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
}
# Keys the rules read; the rest of DeepSpeed's defaults would only add noise to a config lint.
_ZERO_KEYS = ("stage", "contiguous_gradients", "overlap_comm", "reduce_bucket_size",
              "allgather_bucket_size", "reduce_scatter", "sub_group_size", "round_robin_gradients")
_ZERO3_KEYS = ("prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters",
               "max_reuse_distance", "gather_16bit_weights_on_model_save")
_OFFLOAD_KEYS = ("device", "nvme_path", "pin_memory", "buffer_count", "ratio")


_OPTIMIZER_NAMES = {"adam": "Adam", "adamw": "AdamW", "lamb": "Lamb", "onebitadam": "OneBitAdam",
                    "onebitlamb": "OneBitLamb", "zerooneadam": "ZeroOneAdam",
                    "adagrad": "Adagrad", "muadam": "MuAdam", "muadamw": "MuAdamW",
                    "musgd": "MuSGD", "lion": "Lion", "muon": "Muon"}


def _offload(v: Any) -> dict[str, Any] | None:
    if isinstance(v, dict) and v.get("device") not in (None, "none"):
        return {k: v[k] for k in _OFFLOAD_KEYS if v.get(k) is not None}
    return None


def config_from_engine_items(items: dict[str, str]) -> dict[str, Any]:
    """Rebuild the DeepSpeed config keys the rules use from the engine's printed attributes.

    Works for the pydantic-era dump (``zero_config``/``float16_config``, DeepSpeed >= 0.7)
    and the older flat one (``fp16_enabled``, ``initial_dynamic_scale``, ...).
    """
    cfg: dict[str, Any] = {}
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps", "gradient_clipping",
                "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
                "communication_data_type", "prescale_gradients", "wall_clock_breakdown"):
        if key in items:
            v = coerce(items[key])
            if v is not None:
                cfg[key] = v
    # fp16
    fp16: dict[str, Any] = {}
    f16 = parse_kv_repr(items["float16_config"]) if "float16_config" in items else {}
    if f16:
        for k in ("enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                  "hysteresis", "min_loss_scale"):
            if k in f16 and f16[k] is not None:
                fp16[k] = f16[k]
    else:
        if "fp16_enabled" in items:
            fp16["enabled"] = coerce(items["fp16_enabled"])
        scale = coerce(items.get("initial_dynamic_scale"))
        if isinstance(scale, (int, float)) and scale > 0:
            fp16["initial_scale_power"] = int(round(math.log2(scale)))
        dyn = literal(items["dynamic_loss_scale_args"]) if "dynamic_loss_scale_args" in items \
            else None
        if isinstance(dyn, dict):
            for src, dst in (("scale_window", "loss_scale_window"), ("delayed_shift", "hysteresis"),
                             ("min_scale", "min_loss_scale")):
                if src in dyn:
                    fp16[dst] = dyn[src]
        if "loss_scale" in items:
            fp16["loss_scale"] = coerce(items["loss_scale"])
    if fp16:
        cfg["fp16"] = fp16
    # bf16
    if "bfloat16_config" in items:
        b = parse_kv_repr(items["bfloat16_config"])
        if "enabled" in b:
            cfg["bf16"] = {"enabled": b["enabled"]}
    elif "bfloat16_enabled" in items:
        cfg["bf16"] = {"enabled": coerce(items["bfloat16_enabled"])}
    # ZeRO
    zero = parse_kv_repr(items["zero_config"]) if "zero_config" in items else {}
    stage = zero.get("stage")
    if stage is None and "zero_optimization_stage" in items:
        stage = coerce(items["zero_optimization_stage"])
    if isinstance(stage, int):
        z: dict[str, Any] = {"stage": stage}
        for k in _ZERO_KEYS:
            if k in zero and zero[k] is not None:
                z[k] = zero[k]
        if stage >= 3:
            for k in _ZERO3_KEYS:
                if k in zero and zero[k] is not None:
                    z[_ZERO_ALIASES.get(k, k)] = zero[k]
        for k in ("offload_optimizer", "offload_param"):
            off = _offload(zero.get(k))
            if off:
                z[k] = off
        if not zero.get("offload_optimizer") and zero.get("cpu_offload") is True:
            z["offload_optimizer"] = {"device": "cpu"}  # DeepSpeed < 0.3.16 flag
        cfg["zero_optimization"] = z
    # optimizer / scheduler
    name = coerce(items.get("optimizer_name"))
    if isinstance(name, str) and name:
        # DeepSpeed prints the lower-cased name; give it back its documented spelling.
        opt: dict[str, Any] = {"type": _OPTIMIZER_NAMES.get(name.lower(), name)}
        params = literal(items.get("optimizer_params", "")) if items.get("optimizer_params") else None
        if isinstance(params, dict):
            opt["params"] = params
        cfg["optimizer"] = opt
    name = coerce(items.get("scheduler_name"))
    if isinstance(name, str) and name:
        sch: dict[str, Any] = {"type": name}
        params = literal(items.get("scheduler_params", "")) if items.get("scheduler_params") else None
        if isinstance(params, dict):
            sch["params"] = params
        cfg["scheduler"] = sch
    return cfg


# ------------------------------------------------------------------------------ json block

_MAX_BLOCK_LINE_BYTES = 64 * 1024  # one line of a printed config; longer ones are cut
_MAX_BLOCK_LINES = 2000  # DeepSpeed's pretty-printed configs are a few hundred lines at most


def read_json_block(path: str, line: int) -> dict[str, Any] | None:
    """The user config DeepSpeed printed as ``json = {`` at ``line`` of ``path``, re-read whole.

    The scanner's pattern joins only a few lines; a long block is read back from the file
    (plain or gz; never standard input) until its braces balance. None when it cannot be.
    """
    if not path or path in ("-", "<stdin>") or line < 1:
        return None
    import os
    import stat

    from dsdoctor.errors import UsageError
    from dsdoctor.logs.reader import normalize, open_log, read_line_capped, skip_lines

    try:  # a pipe was consumed by the scan: opening it again would wait for a writer
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        log = open_log(path)
    except (UsageError, OSError, ValueError):
        return None
    parts: list[str] = []
    depth = 0
    try:
        # Lines are read with a cap: a line of GBs (a gzip bomb after the block) is never held.
        stream = skip_lines(log.stream, line - 1)
        n = line - 1
        while True:
            raw = read_line_capped(stream, _MAX_BLOCK_LINE_BYTES)
            if not raw:
                break
            n += 1
            text = normalize(raw).text
            if n == line:
                i = text.find("json = {")
                if i < 0:
                    return None
                text = text[i + len("json = "):]
            parts.append(text)
            depth += _brace_delta(text)
            if depth <= 0 or n - line > _MAX_BLOCK_LINES:
                break
    except (OSError, EOFError, ValueError):
        return None
    finally:
        log.close()
    return _load_config_json("\n".join(parts)) if depth == 0 else None


def _load_config_json(text: str) -> dict[str, Any] | None:
    """The printed user config as a dict (None when it is not one).

    DeepSpeed's encoder prints float("inf") as a bare inf (not JSON).
    """
    try:
        data = json.loads(re.sub(r"(:\s*-?)inf\b", r"\1Infinity", text))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _brace_delta(text: str) -> int:
    """Net '{' minus '}' outside JSON strings."""
    d, quote, esc = 0, False, False
    for ch in text:
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                quote = False
        elif ch == '"':
            quote = True
        elif ch == "{":
            d += 1
        elif ch == "}":
            d -= 1
    return d


# ------------------------------------------------------------------------------ extraction

def extract(facts: Iterable[Fact]) -> LogFacts:
    """Fold the scanner's fact events into one LogFacts value."""
    lf = LogFacts()
    json_configs: list[dict[str, Any]] = []
    dump_args: dict[str, Any] = {}
    for f in facts:
        v, ev = f.values, f.evidence
        if f.name == "launch-cmd" and isinstance(v.get("cmd"), str):
            lf.launches.append(_launch_from_cmd(v["cmd"], ev))
        elif f.name == "launch-argv":
            argv = literal(v.get("argv", ""))
            if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                script, rest = _script_and_rest(argv)
                lf.launches.append(LaunchInfo("deepspeed", shlex.join(argv), script, rest, ev))
        elif f.name == "world-size":
            ws = v.get("world_size")
            if isinstance(ws, int) and ws > 0 and lf.world_size is None:
                lf.world_size = ws
        elif f.name == "launcher-nodes":
            if isinstance(v.get("nnodes"), int):
                lf.nodes = v["nnodes"]
        elif f.name == "engine-config-item":
            key, val = v.get("key"), v.get("value")
            if isinstance(key, str) and isinstance(val, str):
                lf.engine_items.setdefault(key, val)
        elif f.name == "ds-config-json":
            raw = v.get("json")
            data = _load_config_json(raw) if isinstance(raw, str) else None
            if data is not None:
                json_configs.append(data)
        elif f.name == "ds-config-json-start":
            # Only when join_next did not catch the block whole (it precedes on the same line).
            if not json_configs:
                data = read_json_block(ev.file, ev.line)
                if data is not None:
                    json_configs.append(data)
        elif f.name == "accelerate-ds-config":
            d = literal(v.get("dict", ""))
            if isinstance(d, dict) and lf.accelerate_ds_config is None:
                lf.accelerate_ds_config = d
        elif f.name == "accelerate-state":
            lf.accelerate.setdefault("distributed_type", v.get("distributed_type"))
        elif f.name == "accelerate-mixed-precision":
            lf.accelerate.setdefault("mixed_precision", v.get("mixed_precision"))
        elif f.name == "num-elems":
            b = v.get("num_elems_b", v.get("params_b"))
            if isinstance(b, (int, float)) and 0 < b < 1e6 and lf.num_params is None:
                lf.num_params = int(b * 1e9)
        elif f.name == "trainable-params":
            if isinstance(v.get("trainable"), int) and lf.trainable_params is None:
                lf.trainable_params = v["trainable"]
            if isinstance(v.get("total"), int) and v["total"] > 0:
                lf.num_params = v["total"]  # exact count beats ZeRO-3's rounded billions
        elif f.name == "package-version":
            pkg = _PKG_ALIASES.get(str(v.get("package", "")).lower())
            ver = v.get("version")
            if pkg and isinstance(ver, str):
                lf.versions.setdefault(pkg, ver)
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
                dump_args.setdefault(key, coerce(v.get("value", "")))
        elif f.name == "trainer-batch":
            lf.uses_trainer = True if lf.uses_trainer is None else lf.uses_trainer

    # Trainer arguments: the command line first, the printed TrainingArguments win (effective).
    best = lf.best_launch()
    if best is not None:
        for k, val in _options(best.script_args).items():
            if k in ("local_rank", "world_info"):
                continue
            lf.trainer_args[k] = val
    for k, val in dump_args.items():
        if k in ("local_rank", "_n_gpu", "world_size"):
            continue
        lf.trainer_args[k] = val

    # The DeepSpeed config: the user's printed JSON when whole, else the engine's key dump.
    if json_configs:
        lf.ds_config, lf.ds_config_source = json_configs[0], "json"
    elif lf.engine_items:
        cfg = config_from_engine_items(lf.engine_items)
        if cfg:
            lf.ds_config, lf.ds_config_source = cfg, "engine"
    ws = coerce(lf.engine_items.get("world_size"))
    if lf.world_size is None and isinstance(ws, int) and ws > 0:
        lf.world_size = ws
    return lf


__all__ = ["LogFacts", "LaunchInfo", "extract", "parse_argv", "parse_kv_repr",
           "config_from_engine_items", "coerce", "literal", "MODEL_ARGS"]
