"""``dsdoctor env``: print the environment snapshot as text (rich), JSON or Markdown.

The Markdown renderer is also what ``dsdoctor report`` pastes into issue bodies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.redact import Redactor
from dsdoctor.render.env import render_markdown, render_text


def run(args: argparse.Namespace) -> int:
    """Handler of ``dsdoctor env``."""
    from dsdoctor.facts import env_child, envinfo

    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: must be a positive number of seconds")
    python = args.python or env_child.training_python()
    if args.python and not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        raise UsageError(f"--python {args.python}: not an executable file; give the interpreter "
                         "the training runs with, e.g. /path/to/venv/bin/python")
    snap = envinfo.collect(ops=not args.no_ops, timeout=args.timeout, python=python)
    if args.redact_paths or args.redact_hosts:
        snap = Redactor(paths=args.redact_paths, hosts=args.redact_hosts).obj(snap)
    if args.format == "json":
        text = json.dumps(snap, indent=2) + "\n"
    elif args.format == "markdown":
        text = render_markdown(snap)
    else:
        text = None
    if args.output:
        if text is None:
            import io

            buf = io.StringIO()
            render_text(snap, file=buf)
            text = buf.getvalue()
        from dsdoctor.safeio import one_line, write_report  # noqa: PLC0415

        write_report(args.output, text, [], force=True)  # -o replaces FILE, as grep and curl
        print(f"dsdoctor: wrote {one_line(args.output)}", file=sys.stderr)
    elif text is None:
        render_text(snap)
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``env`` subcommand."""
    p = subparsers.add_parser(
        "env", help="report the training environment (versions, GPUs, CUDA, DeepSpeed ops, env vars)",
        description="Report Python, OS, CPU/RAM, GPUs (NVML), CUDA/cuDNN/NCCL, package versions, "
        "DeepSpeed's op compatibility and the distributed-training environment variables "
        "(secrets redacted). Save --format json and pass it to 'analyze --env'.")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write to FILE instead of stdout (replaced if it exists)")
    # --force is what --output needed before it replaced files: accepted, does nothing more
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-ops", action="store_true",
                   help="skip DeepSpeed's op compatibility report (the slowest probe, ~2 s)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="time limit for each child probe (torch, DeepSpeed ops); default 60")
    p.add_argument("--python", metavar="PATH",
                   help="the interpreter the training uses (default: the active venv or conda "
                   "env, else dsdoctor's own); torch and DeepSpeed are probed in it")
    p.add_argument("--redact-paths", action="store_true", help="hide user home directories")
    p.add_argument("--redact-hosts", action="store_true", help="hide host names and IP addresses")
    p.set_defaults(func=run)
