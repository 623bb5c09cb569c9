"""Command-line entry point. Each subcommand lives in its own ``cmd_*`` module."""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
from typing import NoReturn

from dsdoctor import __version__
from dsdoctor.errors import UsageError
from dsdoctor.safeio import SafeStdout, one_line

# Modules exposing ``register(subparsers)``, in the order ``--help`` lists them, by command name.
COMMANDS = {
    "analyze": "dsdoctor.cli.analyze",
    "env": "dsdoctor.cli.env",
    "report": "dsdoctor.cli.report",
    "watch": "dsdoctor.cli.watch",
    "rules": "dsdoctor.cli.rules",
    "estimate": "dsdoctor.cli.estimate",
    "issue-template": "dsdoctor.cli.issue_template",
    "triage": "dsdoctor.cli.triage",
    "schema": "dsdoctor.cli.schema",
    "completion": "dsdoctor.cli.completion",
}
COMMAND_MODULES = tuple(COMMANDS.values())


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (argparse already uses 2, keep the message short)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"dsdoctor: error: {message} (see 'dsdoctor {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"dsdoctor: error: {message} (see 'dsdoctor --help')\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given the command line ``argv`` whose first word names a
    command, of that command only: the others' modules (and what they import: the environment
    renderer, the estimator, the issue form...) are not imported (start-up, issue 13)."""
    chosen = COMMANDS.get(argv[0]) if argv else None
    parser = _Parser(
        prog="dsdoctor",
        description="Diagnose DeepSpeed / Transformers / Accelerate training runs from their logs, "
        "configs and environment.",
    )
    parser.add_argument("--version", action="version", version=f"dsdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in (chosen,) if chosen else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _unknown_command(argv: list[str]) -> str | None:
    """One line for a first word that names no command (``dsdoctor analyse``), with the closest
    command (difflib), or None when the first word is a command or an option."""
    if not argv or argv[0].startswith("-") or argv[0] in COMMANDS:
        return None
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1, cutoff=0.6)
    hint = f": did you mean '{close[0]}'?" if close else ""
    return (f"dsdoctor: error: no command {one_line(argv[0])!r}{hint} "
            f"(commands: {', '.join(COMMANDS)}; see 'dsdoctor --help')\n")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    unknown = _unknown_command(argv)
    if unknown is not None:
        sys.stderr.write(unknown)
        return 2
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    real_stdout = sys.stdout
    if not isinstance(real_stdout, SafeStdout):
        sys.stdout = SafeStdout(real_stdout)  # type: ignore[assignment]
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a full device fails here, not at interpreter exit
        return code
    except UsageError as exc:
        print(f"dsdoctor: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as exc:  # stdout on a full device or closed; a file that vanished mid-read
        _silence_stdout()
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"dsdoctor: error: cannot write or read {one_line(where) or 'the output: '}"
              f"{exc.strerror or exc} (a full disk, a closed stdout?); use --output FILE",
              file=sys.stderr)
        return 2
    finally:
        sys.stdout = real_stdout


def entry() -> NoReturn:
    """The console script and ``python -m dsdoctor``: :func:`main`, then exit without tearing
    the interpreter down. Freeing every module and object at exit cost ~13 ms of a ~125 ms
    analysis and does nothing for a command whose output is written: the exit handlers (atexit,
    temporary directories' finalizers) still run and stdout and stderr are flushed first. A
    command that leaves threads running (watch), or a run under a profiler or tracer (``python
    -m cProfile -m dsdoctor`` writes its figures after the module returns), exits the ordinary
    way."""
    code = main()
    threading = sys.modules.get("threading")
    if (threading is not None and threading.active_count() > 1) or _observed():
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            sys.exit(code)  # the ordinary exit reports or silences it, as before
    os._exit(code)


def _observed() -> bool:
    """A profiler, tracer or debugger is attached (cProfile uses sys.monitoring from 3.12 on)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(
        monitoring.get_tool(tool) is not None for tool in range(6))


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
