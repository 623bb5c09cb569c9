"""The DeepSpeed config as the run printed it, and the printed values it is made of.

DeepSpeed prints its config twice at start-up: the user's JSON (``json = {...}``, after the Trainer
filled the "auto" values) and the engine's attribute dump (``DeepSpeedEngine configuration:``, one
``key ...... value`` line each). :func:`config_from_engine_items` rebuilds config keys from the dump;
:func:`read_json_block` re-reads a JSON block too long for the scanner's look-ahead. Printed values
are read as literals only (:func:`coerce`, :func:`literal`, :func:`parse_kv_repr`), never executed.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import stat
from typing import Any

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
            elif depth == 0 and ch in " ," and _KV_NEXT.match(text, k):
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


def read_json_block_text(path: str, line: int, search: int = 1) -> tuple[int, str] | None:
    """(its line, its text) of the config DeepSpeed printed as ``json = {``, the opening at
    ``line`` or within the ``search`` lines after it, read whole from the file until its braces
    balance (strings respected).

    The scanner's pattern joins only a few lines; a long block is read back from the file
    (plain or compressed; never standard input or a pipe). Lines are cleaned as the scanner
    cleans them (ANSI, rank prefixes, quote markers). None when it cannot be read.
    """
    if not path or path in ("-", "<stdin>") or line < 1:
        return None
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
    start = 0
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
            if not start:
                i = text.find("json = {")
                if i < 0:
                    if n - line + 1 >= search:
                        return None
                    continue
                start = n
                text = text[i + len("json = "):]
            parts.append(text)
            depth += brace_delta(text)
            if depth <= 0 or n - start > _MAX_BLOCK_LINES:
                break
    except (OSError, EOFError, ValueError):
        return None
    finally:
        log.close()
    return (start, "\n".join(parts)) if start and depth == 0 else None


def read_json_block(path: str, line: int) -> dict[str, Any] | None:
    """The user config DeepSpeed printed as ``json = {`` at ``line`` of ``path``, as a dict."""
    block = read_json_block_text(path, line)
    return load_config_json(block[1]) if block else None


def load_config_json(text: str) -> dict[str, Any] | None:
    """The printed user config as a dict (None when it is not one).

    DeepSpeed's encoder prints float("inf") as a bare inf (not JSON).
    """
    try:
        data = json.loads(re.sub(r"(:\s*-?)inf\b", r"\1Infinity", text))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def brace_delta(text: str) -> int:
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


__all__ = ["coerce", "config_from_engine_items", "literal", "load_config_json", "parse_kv_repr",
           "read_json_block", "read_json_block_text"]
