"""``dsdoctor estimate``: DeepSpeed's ZeRO-2/ZeRO-3 memory tables from a model's config.json."""

from __future__ import annotations

import argparse
import json
import sys

from dsdoctor.errors import UsageError
from dsdoctor.facts.estimate import GIB, SCOPE_NOTE, Estimate, estimate_zero2, estimate_zero3
from dsdoctor.facts.modelinfo import SUPPORTED_MODEL_TYPES, load_model_info

EPILOG = """examples:
  dsdoctor estimate --model ./Llama-2-7b-hf --gpus 8
  dsdoctor estimate --model config.json --gpus 4 --nodes 2 --format json
  dsdoctor estimate --params 2783e6 --largest-layer 65e6    (no config: give the counts)

The figures are DeepSpeed's own estimator arithmetic (estimate_zero2/zero3_model_states_mem_needs)
computed from the parameter count in config.json. They cover parameters, gradients and optimizer
states only, not activations; "per CPU" means per node."""


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


def _sci(n: int) -> str:
    """An int of any size in scientific notation (float() overflows past 1e308)."""
    digits = str(n) if abs(n) < 10**4000 else None
    if digits is None:
        return "more than 1e4000"
    digits = digits.lstrip("-")
    return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:3] or '0'}e{len(digits) - 1}"


def _inputs(args: argparse.Namespace) -> tuple[int, int, str]:
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
        return total, _count(args.largest_layer, "--largest-layer"), f"{total} parameters"
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
    label = (f"{info.path} ({info.architecture or info.model_type}, {info.params.total:,} "
             f"parameters, largest layer {info.params.largest_layer_name} "
             f"{info.params.largest_layer:,})")
    return info.params.total, largest, label


def _markdown(est: Estimate) -> str:
    head = est.header().splitlines()
    lines = [f"**ZeRO-{est.stage}** - {head[1][4:]} {head[2][4:]}", "",
             "| per CPU (node) | per GPU | options |", "| ---: | ---: | --- |"]
    for r in est.rows:
        lines.append(f"| {r.cpu_bytes / GIB:.2f} GB | {r.gpu_bytes / GIB:.2f} GB | "
                     f"`{r.options.strip()}` |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    total, largest, label = _inputs(args)
    z2 = estimate_zero2(total, args.gpus, args.nodes, args.buffer_factor)
    z3 = estimate_zero3(total, largest, args.gpus, args.nodes, args.buffer_factor)
    if args.format == "json":
        out = json.dumps({"model": label, "note": SCOPE_NOTE, "zero2": z2.to_dict(),
                          "zero3": z3.to_dict()}, indent=2)
    elif args.format == "markdown":
        out = "\n\n".join([f"### DeepSpeed memory estimate: {label}", _markdown(z2), _markdown(z3),
                           f"> These estimates {SCOPE_NOTE}."])
    else:
        out = "\n\n".join([f"Model: {label}", f"ZeRO-2\n{z2.table()}", f"ZeRO-3\n{z3.table()}",
                           f"Note: these estimates {SCOPE_NOTE}."])
    sys.stdout.write(out + "\n")
    return 0
