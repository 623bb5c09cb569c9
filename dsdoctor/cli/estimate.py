"""``dsdoctor estimate``: DeepSpeed's ZeRO-2/ZeRO-3 memory tables from a model's config.json."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.facts.estimate import (
    GIB,
    SCOPE_NOTE,
    Estimate,
    Hardware,
    estimate_zero2,
    estimate_zero3,
    hardware_from_env,
    row_fit,
)
from dsdoctor.facts.modelinfo import SUPPORTED_MODEL_TYPES, load_model_info

EPILOG = """examples:
  dsdoctor estimate --model ./Llama-2-7b-hf --gpus 8
  dsdoctor estimate --model config.json --gpus 4 --nodes 2 --format json
  dsdoctor estimate --params 2783e6 --largest-layer 65e6    (no config: give the counts)
  dsdoctor estimate --model config.json --gpu-memory 80GB --host-ram 1TB
  dsdoctor estimate --model config.json --env local          (this machine's GPU and RAM)

The figures are DeepSpeed's own estimator arithmetic (estimate_zero2/zero3_model_states_mem_needs)
computed from the parameter count in config.json. They cover parameters, gradients and optimizer
states only, not activations; "per CPU" means per node. With a GPU size (--gpu-memory, or the
snapshot's with --env) and the host RAM, a column says whether each option set fits: a row that
fits leaves room only if the activations fit in what is left."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="DeepSpeed ZeRO-2/ZeRO-3 memory needs for a model (per node CPU, per GPU)",
        description="Print DeepSpeed's ZeRO-2 and ZeRO-3 model-state memory tables for a model "
        "described by its config.json (nothing is downloaded, no weights read).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PATH", help="model config.json or its directory")
    p.add_argument("--params", metavar="N", help="total parameters instead of --model (e.g. 7e9)")
    p.add_argument("--largest-layer", metavar="N",
                   help="largest layer's parameters with --params (default: from --model)")
    p.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs per node (default 1)")
    p.add_argument("--nodes", type=int, default=1, metavar="M", help="nodes (default 1)")
    p.add_argument("--buffer-factor", type=float, default=1.5, metavar="F",
                   help="DeepSpeed's additional_buffer_factor (default 1.5)")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="memory of one GPU, e.g. 80GB or 24GiB (GB as in the table: 2^30 bytes)")
    p.add_argument("--host-ram", metavar="SIZE", help="RAM of one node, e.g. 512GB")
    p.add_argument("--env", metavar="FILE|local",
                   help="take the GPU memory and the RAM from an env snapshot ('dsdoctor env "
                   "--format json') or from this machine (local); --gpu-memory/--host-ram win")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=run)


def _count(text: str, flag: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r}: not a number; e.g. {flag} 7e9") from None
    if not value >= 1 or value > 1e15:
        raise UsageError(f"{flag} {text!r}: must be between 1 and 1e15")
    return int(value)


_SIZE_RE = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": GIB, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _size(text: str, flag: str) -> int:
    """"80GB", "80GiB", "80" (GiB) or "1.5T" in bytes; GB is 2^30 as in DeepSpeed's table."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UsageError(f"{flag} {text!r}: not a size; e.g. {flag} 80GB")
    unit = (m["unit"] or "").upper()
    value = float(m["n"]) * _UNITS["B" if unit == "B" else unit[:1]]
    if not 1 <= value <= 2**60:
        raise UsageError(f"{flag} {text!r}: must be between 1 byte and 1 EiB")
    return int(value)


def _hardware(args: argparse.Namespace) -> Hardware | None:
    """The GPU and RAM the rows are checked against (None: none given)."""
    base = None
    if args.env:
        from dsdoctor.facts.envinfo import load_snapshot  # noqa: PLC0415

        base = hardware_from_env(load_snapshot(args.env),
                                 "this machine" if args.env == "local" else args.env)
    gpu = _size(args.gpu_memory, "--gpu-memory") if args.gpu_memory else None
    ram = _size(args.host_ram, "--host-ram") if args.host_ram else None
    if base is None and gpu is None and ram is None:
        return None
    given = [flag for flag, v in (("--gpu-memory", gpu), ("--host-ram", ram)) if v is not None]
    source = ", ".join(([base.source] if base else []) + given)
    return Hardware(gpu if gpu is not None else (base.gpu_memory_bytes if base else None),
                    ram if ram is not None else (base.host_ram_bytes if base else None),
                    None if gpu is not None else (base.gpu_name if base else None), source)


def _hardware_line(hw: Hardware) -> str:
    gpu = (f"{hw.gpu_name + ' ' if hw.gpu_name else ''}{hw.gpu_memory_bytes / GIB:.2f}GB per GPU"
           if hw.gpu_memory_bytes is not None else "GPU memory unknown (no GPU in the snapshot; "
           "give --gpu-memory)")
    ram = (f"{hw.host_ram_bytes / GIB:.2f}GB RAM per node" if hw.host_ram_bytes is not None
           else "RAM unknown (give --host-ram)")
    return f"Checked against: {gpu}, {ram} (from {hw.source})."


def _sci(n: int) -> str:
    """An int of any size in scientific notation (float() overflows past 1e308)."""
    digits = str(n) if abs(n) < 10**4000 else None
    if digits is None:
        return "more than 1e4000"
    digits = digits.lstrip("-")
    return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:3] or '0'}e{len(digits) - 1}"


def _inputs(args: argparse.Namespace) -> tuple[int, int, dict[str, Any]]:
    if args.gpus < 1 or args.nodes < 1:
        raise UsageError("--gpus and --nodes must be at least 1")
    if args.gpus > 1_000_000 or args.nodes > 1_000_000:
        raise UsageError("--gpus and --nodes must be at most 1,000,000")
    if not 1.0 <= args.buffer_factor <= 10.0:
        raise UsageError("--buffer-factor must be between 1 and 10 (DeepSpeed uses 1.5)")
    if args.model and args.params:
        raise UsageError("give --model or --params, not both")
    if args.params:
        total = _count(args.params, "--params")
        if not args.largest_layer:
            raise UsageError("--params needs --largest-layer (ZeRO-3 keeps the largest layer "
                             "on the GPU); e.g. the embedding: vocab_size x hidden_size")
        largest_n = _count(args.largest_layer, "--largest-layer")
        return total, largest_n, {"name": None, "parameters": total,
                                  "largest_layer": {"name": None, "parameters": largest_n}}
    if not args.model:
        raise UsageError("pass --model PATH (a config.json or its directory) or --params N "
                         "--largest-layer N")
    info = load_model_info(args.model)
    if info.params is None and info.size_error:
        raise UsageError(f"{info.path}: {info.size_error}; no count of its parameters: check "
                         "the config, or pass --params N --largest-layer N")
    if info.params is None:
        raise UsageError(f"{info.path}: no parameter formula for model_type "
                         f"{info.model_type!r} (known: {', '.join(SUPPORTED_MODEL_TYPES)}); "
                         "pass --params N --largest-layer N instead")
    if not 1 <= info.params.total <= 1e15 or not 1 <= info.params.largest_layer <= 1e15:
        # hidden_size 0, 1e300 or 30 digits: a formula result no model has (issue 14, item 7)
        raise UsageError(f"{info.path}: its sizes give {_sci(info.params.total)} parameters, not "
                         "between 1 and 1e15; check hidden_size, num_hidden_layers and "
                         "vocab_size, or pass --params N --largest-layer N")
    largest = (_count(args.largest_layer, "--largest-layer") if args.largest_layer
               else info.params.largest_layer)
    model = {"name": info.name_or_path or info.architecture or info.model_type, "path": info.path,
             "model_type": info.model_type, "architecture": info.architecture,
             "parameters": info.params.total,
             "largest_layer": {"name": info.params.largest_layer_name, "parameters": largest},
             "layers": info.num_layers, "hidden_size": info.hidden_size,
             "vocab_size": info.vocab_size, "dtype": info.dtype}
    return info.params.total, largest, model


def _label(model: dict[str, Any]) -> str:
    """The model in one line: "config.json (T5ForConditionalGeneration, 2,783,959,040
    parameters, largest layer shared 65,798,144)"."""
    if "path" not in model:
        return f"{model['parameters']} parameters"
    big = model["largest_layer"]
    return (f"{model['path']} ({model['architecture'] or model['model_type']}, "
            f"{model['parameters']:,} parameters, largest layer {big['name']} {big['parameters']:,})")


def _markdown(est: Estimate, hw: Hardware | None) -> str:
    head = est.header().splitlines()
    fit_head, fit_rule = (" fits? |", " --- |") if hw else ("", "")
    lines = [f"**ZeRO-{est.stage}** - {head[1][4:]} {head[2][4:]}", "",
             f"| per CPU (node) | per GPU | options |{fit_head}", f"| ---: | ---: | --- |{fit_rule}"]
    for r in est.rows:
        fit = f" {row_fit(r, hw).label} |" if hw else ""
        lines.append(f"| {r.cpu_bytes / GIB:.2f} GB | {r.gpu_bytes / GIB:.2f} GB | "
                     f"`{r.options.strip()}` |{fit}")
    return "\n".join(lines)


def _table(est: Estimate, hw: Hardware | None) -> str:
    """DeepSpeed's table as it prints it, with a fits column after it when a machine is given."""
    if hw is None:
        return est.table()
    lines = est.table().splitlines()
    width = max(len(t) for t in lines[3:])
    out = lines[:3] + [f"{lines[3].ljust(width)} | fits?"]
    out += [f"{t.ljust(width)} | {row_fit(r, hw).label}" for t, r in zip(lines[4:], est.rows)]
    return "\n".join(out)


def _json(est: Estimate, hw: Hardware | None) -> dict[str, Any]:
    d = est.to_dict()
    if hw is not None:
        for row, r in zip(d["rows"], est.rows):
            row["fit"] = row_fit(r, hw).to_dict()
    return d


def run(args: argparse.Namespace) -> int:
    total, largest, model = _inputs(args)
    hw = _hardware(args)
    label = _label(model)
    z2 = estimate_zero2(total, args.gpus, args.nodes, args.buffer_factor)
    z3 = estimate_zero3(total, largest, args.gpus, args.nodes, args.buffer_factor)
    fit_note = ("; 'fits' is about these model states: the activations need room besides"
                if hw else "")
    if args.format == "json":
        out = json.dumps({"model": model, "hardware": hw.to_dict() if hw else None,
                          "note": SCOPE_NOTE + fit_note, "zero2": _json(z2, hw),
                          "zero3": _json(z3, hw)}, indent=2)
    elif args.format == "markdown":
        out = "\n\n".join([f"### DeepSpeed memory estimate: {label}"]
                           + ([_hardware_line(hw)] if hw else [])
                           + [_markdown(z2, hw), _markdown(z3, hw),
                              f"> These estimates {SCOPE_NOTE}{fit_note}."])
    else:
        out = "\n\n".join([f"Model: {label}"] + ([_hardware_line(hw)] if hw else [])
                           + [f"ZeRO-2\n{_table(z2, hw)}", f"ZeRO-3\n{_table(z3, hw)}",
                              f"Note: these estimates {SCOPE_NOTE}{fit_note}."])
    sys.stdout.write(out + "\n")
    return 0
