"""Helpers every check shares: building findings, reading values, and reading the run model.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.facts import dskeys
from dsdoctor.facts.configfile import ConfigDoc
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.facts.pyparse import parse_bounded
from dsdoctor.model import Evidence, Finding, Symptom

# --------------------------------------------------------------------------------- shared helpers


def finding(message: str, fix: str = "", path: str | None = None, severity: str = "",
            evidence: tuple[Evidence, ...] = (), title: str = "",
            change: dict[str, Any] | None = None, file: str | None = None,
            line: int | None = None) -> Finding:
    """A Finding whose rule/name/title defaults the engine fills in."""
    return Finding(rule="", name="", severity=severity, title=title, message=message, fix=fix,
                   config_path=path, config_line=line, config_file=file, evidence=evidence,
                   fix_change=change)


def truthy(v: Any) -> bool:
    """True for true/"true"/"True"/1/"1"/"yes" (Trainer arguments come typed or as text)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    return isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "on")


def log_facts(ctx: Context) -> Any:
    """The LogFacts of the log (an empty one when there is no log or nothing stated)."""
    if ctx.log_facts is not None:
        return ctx.log_facts
    from dsdoctor.facts.logfacts import LogFacts

    return LogFacts()


def vals(s: Symptom | None, name: str, agg: str = "last") -> Any:
    """One aggregated value of a symptom field (``first``/``last``/``min``/``max``/list)."""
    if s is None:
        return None
    v = s.values.get(name)
    if isinstance(v, dict):
        return v.get(agg)
    if isinstance(v, list):
        return v[0] if v and agg in ("first", "last") else v
    return v


def version_tuple(v: Any) -> tuple[int, ...] | None:
    """(4, 38, 2) for "4.38.2", "4.38.2+cu121", "v4.38.2.dev0"; None when not a version."""
    t = parse_version(v) if isinstance(v, str) else ()
    return t if len(t) >= 2 else None


def gib(b: float | None) -> str:
    """Bytes as GiB with two decimals (DeepSpeed and torch print GiB/GB that way)."""
    return "?" if b is None else f"{b / 2**30:.2f} GiB"


def fmt_scale(x: Any) -> str:
    """A loss scale as an integer power of two when it is one (65536 = 2^16)."""
    if not isinstance(x, (int, float)) or x <= 0 or not math.isfinite(x):
        return str(x)
    p = math.log2(x)
    return f"{int(x)} (2^{int(p)})" if p.is_integer() else f"{x:g}"






def trainer_arg(ctx: Context, name: str) -> Any:
    """A Trainer/script argument from --args, the log's command line or the printed dump."""
    return ctx.trainer_args.get(name)


def model_name(ctx: Context) -> str | None:
    """The model name or path: --model's config, else the command line in the log."""
    from dsdoctor.facts.logfacts import MODEL_ARGS

    v = getattr(ctx.model, "name_or_path", None)
    if isinstance(v, str) and v:
        return v
    for key in MODEL_ARGS:
        v = ctx.trainer_args.get(key)
        if isinstance(v, str) and v:
            return v
    return getattr(ctx.model, "path", None)


def precision_flag(ctx: Context, key: str) -> Any:
    """``fp16.enabled``/``bf16.enabled`` of the DeepSpeed config; None for a config Accelerate
    synthesized from its own keys (the Accelerate key is reported instead)."""
    if ctx.ds is not None and ctx.ds_source == "accelerate" and getattr(ctx.ds, "synthesized", False):
        return None
    return ctx.cfg_get(key)


def fp16_in_use(ctx: Context) -> list[tuple[str, str]]:
    """Where fp16 mixed precision is switched on: [(config_path or argument, description)].

    Empty when the run model says the run is in bf16 (DeepSpeed then ignores a leftover fp16 flag).
    """
    out: list[tuple[str, str]] = []
    if ctx.run.value("precision") == "bf16":
        return out
    en = precision_flag(ctx, "fp16.enabled")
    if en is True:
        where = "the DeepSpeed config" if ctx.ds_source != "log" else "the engine's printed config"
        out.append(("fp16.enabled", f'"fp16": {{"enabled": true}} in {where}'))
    elif en == "auto" and truthy(trainer_arg(ctx, "fp16")):
        out.append(("fp16.enabled", '"fp16": {"enabled": "auto"} with the Trainer\'s --fp16'))
    mp = ctx.acc_get("mixed_precision")
    if isinstance(mp, str) and mp.lower() == "fp16":
        out.append(("mixed_precision", "mixed_precision: fp16 in the Accelerate config"))
    if truthy(trainer_arg(ctx, "fp16")) and not any(p == "fp16.enabled" for p, _ in out):
        out.append(("fp16", "the Trainer argument --fp16"))
    lmp = log_facts(ctx).accelerate.get("mixed_precision")
    if isinstance(lmp, str) and lmp.lower() == "fp16" and not out:
        out.append(("mixed_precision", "Accelerate's 'Mixed precision type: fp16' in the log"))
    return out


def bf16_in_use(ctx: Context) -> list[tuple[str, str]]:
    """Where bf16 is switched on: [(config_path or argument, description)].

    Empty when the run model says the run is in fp16 (a leftover bf16 flag is not the run).
    """
    out: list[tuple[str, str]] = []
    if ctx.run.value("precision") == "fp16":
        return out
    en = precision_flag(ctx, "bf16.enabled")
    if en is True or (en == "auto" and truthy(trainer_arg(ctx, "bf16"))):
        out.append(("bf16.enabled", '"bf16": {"enabled": true} in the DeepSpeed config'))
    mp = ctx.acc_get("mixed_precision")
    if isinstance(mp, str) and mp.lower() == "bf16":
        out.append(("mixed_precision", "mixed_precision: bf16 in the Accelerate config"))
    if truthy(trainer_arg(ctx, "bf16")) and not out:
        out.append(("bf16", "the Trainer argument --bf16"))
    return out


def bf16_model(ctx: Context) -> str | None:
    """Why the model is known to be bf16-pretrained, or None."""
    m = ctx.model
    if m is not None:
        if getattr(m, "dtype", None) == "bfloat16":
            return f"its config.json says torch_dtype bfloat16 ({getattr(m, 'path', '')})"
        fam = getattr(m, "bf16_family", None)
        if fam:
            return f"it is a {fam} model, a family pretrained in bf16"
    from dsdoctor.facts.modelinfo import bf16_family

    name = model_name(ctx)
    if name:
        fam = bf16_family(name)
        if fam:
            return f"{name} is a {fam} model, a family pretrained in bf16"
    return None


def param_count(ctx: Context) -> tuple[int | None, int | None, str]:
    """(total params, largest layer params, where from) from --model, else the log."""
    m = ctx.model
    pc = getattr(m, "params", None) if m is not None else None
    if pc is not None:
        return pc.total, pc.largest_layer, f"computed from {getattr(m, 'path', 'config.json')}"
    n = ctx.run.value("model_params")
    if isinstance(n, int) and n > 0:
        return n, None, "stated in the log"
    return None, None, ""


def gpu_total_bytes(ctx: Context) -> tuple[int | None, str]:
    """Memory of one GPU: the OOM message's total capacity (the GPU that failed), else the run's."""
    t = vals(ctx.symptom("gpu-oom"), "total_bytes", "max")
    if isinstance(t, (int, float)) and t > 0:
        return int(t), "the OOM message"
    known = ctx.run.gpu_memory_bytes
    if known is not None and isinstance(known.value, int) and known.value > 0:
        return known.value, ("the env snapshot" if known.source.kind == "env"
                             else "nvidia-smi in the log")
    return None, ""


def script_trees(ctx: Context, *needles: str, any_of: tuple[str, ...] = ()
                 ) -> Iterator[tuple[str, str, ast.Module]]:
    """(path, text, syntax tree) of each script whose text holds every needle and one of
    ``any_of`` (a cheap test before any parse). Each script is parsed at most once per analysis,
    whichever checks ask; read, never run; one that is not Python is skipped (scriptcheck
    reports it)."""
    for path, text in ctx.script_sources.items():
        if not all(n in text for n in needles) or (any_of and not any(n in text for n in any_of)):
            continue
        if path not in ctx.script_trees:
            try:
                ctx.script_trees[path] = parse_bounded(text)  # a ValueError past its budget
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                ctx.script_trees[path] = None
        tree = ctx.script_trees[path]
        if tree is not None:
            yield path, text, tree


def script_evidence(site: Any, path: str) -> Evidence:
    """Evidence pointing at a line of a training script."""
    return Evidence(file=path, line=site.line, text=site.text)


def lintable(ctx: Context) -> ConfigDoc | None:
    """The DeepSpeed config whose keys were written by a person (not synthesized by us)."""
    if ctx.ds is None or ctx.ds.synthesized:
        return None
    return ctx.ds


def show_json(v: Any) -> str:
    """A value as it is written in JSON."""
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


as_real = dskeys.as_real  # a real number (not bool, not a string)
as_numlike = dskeys.as_number  # a number, also when written as a string ("8", "2e-5")


def fmt_number(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:g}"


def gib1(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def gb1(b: float) -> str:
    """Decimal gigabytes, as the DeepSpeed guides count bucket memory ("9 GB")."""
    return f"{b / 1e9:.1f} GB"


def enabled(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


def truthy_arg(v: Any) -> bool:
    """A Trainer boolean flag as the command line gives it (``--fp16``, ``--fp16 True``)."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v)


def device_name(v: Any) -> str | None:
    if isinstance(v, str) and v.strip().lower() not in ("", "none"):
        return v.strip().lower()
    return None


def written_stage(ctx: Context) -> int | None:
    """ZeRO stage as written, or None when unknown ("auto", NaN, infinite or not a number)."""
    v = ctx.cfg_get("zero_optimization.stage", 0)
    n = as_numlike(v)
    return int(n) if n is not None and math.isfinite(n) else None


def same_value(ds_val: Any, hf_val: Any) -> bool:
    """The Trainer's own comparison (``ds_val != hf_val``), with float tolerance."""
    if isinstance(ds_val, list) and isinstance(hf_val, list):
        return len(ds_val) == len(hf_val) and all(same_value(a, b) for a, b in zip(ds_val, hf_val))
    if isinstance(ds_val, bool) or isinstance(hf_val, bool):
        return ds_val == hf_val
    a, b = as_real(ds_val), as_real(hf_val)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return ds_val == hf_val


def has_string_number(v: Any) -> bool:
    if isinstance(v, list):
        return any(has_string_number(x) for x in v)
    return isinstance(v, str) and as_numlike(v) is not None


def strip_strings(v: Any) -> Any:
    if isinstance(v, list):
        return [strip_strings(x) for x in v]
    n = as_numlike(v) if isinstance(v, str) else None
    return (int(n) if n is not None and n.is_integer() and "." not in v and "e" not in v.lower()
            else n) if n is not None else v

# ------------------------------------------------------------------------------------ helpers




def symptom_evidence(ctx: Context, *kinds: str) -> tuple[Evidence, ...]:
    ev: list[Evidence] = []
    for k in kinds:
        s = ctx.symptom(k)
        if s is not None:
            ev.extend(s.evidence[:3])
    return tuple(ev)


def env_gpus(ctx: Context) -> list[dict[str, Any]]:
    g = ctx.env_get("gpus")
    return [x for x in g if isinstance(x, dict)] if isinstance(g, list) else []


def compute_capability(g: dict[str, Any]) -> tuple[int, int] | None:
    cc = g.get("compute_capability")
    if isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc):
        a, b = cc.split(".")
        return int(a), int(b)
    return None


# GPUs without bf16 (compute capability < 8.0), for names printed in logs when there is no env.
PRE_AMPERE = re.compile(r"\b(V100|T4|P100|P40|P4|K80|M60|Titan V|TITAN V|Quadro RTX|"
                         r"RTX 20\d0|GTX \d{3,4}|Tesla [KMP]\d+)\b")


def pre_ampere_gpus(ctx: Context) -> list[str]:
    """Names of GPUs that lack bf16 (env compute capability, else names in the log)."""
    out = []
    gpus = env_gpus(ctx)
    for g in gpus:
        cc = compute_capability(g)
        if cc is not None and cc < (8, 0):
            out.append(f"{g.get('name', 'GPU')} (compute capability {cc[0]}.{cc[1]})")
    if not gpus:
        for g in log_facts(ctx).gpus:
            name = g.get("name")
            if isinstance(name, str) and PRE_AMPERE.search(name):
                out.append(name)
    return sorted(set(out))


def ampere_ok(ctx: Context) -> bool | None:
    """True when every known GPU supports bf16, False when one does not, None when unknown."""
    ccs = [cc for cc in (compute_capability(g) for g in env_gpus(ctx)) if cc is not None]
    if ccs:
        return all(c >= (8, 0) for c in ccs)
    if pre_ampere_gpus(ctx):
        return False
    return None
