"""Command-line entry point. Each subcommand lives in its own ``cmd_*`` module."""

from __future__ import annotations

import argparse
import importlib
import sys

from dsdoctor import __version__
from dsdoctor.errors import UsageError

# Modules exposing ``register(subparsers)``, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "dsdoctor.cli.analyze",
    "dsdoctor.cli.env",
    "dsdoctor.cli.report",
    "dsdoctor.cli.watch",
    "dsdoctor.cli.rules",
    "dsdoctor.cli.estimate",
    "dsdoctor.cli.issue_template",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (argparse already uses 2, keep the message short)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"dsdoctor: error: {message} (see 'dsdoctor {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"dsdoctor: error: {message} (see 'dsdoctor --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dsdoctor",
        description="Diagnose DeepSpeed / Transformers / Accelerate training runs from their logs, "
        "configs and environment.",
    )
    parser.add_argument("--version", action="version", version=f"dsdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"dsdoctor: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
