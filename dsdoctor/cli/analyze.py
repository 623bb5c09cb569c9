"""``dsdoctor analyze``: symptoms from logs, findings from the rules, fixes."""

from __future__ import annotations

import argparse
import os
import sys

from dsdoctor.cli.misplaced import refuse_misplaced
from dsdoctor.cli.options import add_input_options, add_jobs_option, inputs_from
from dsdoctor.cli.progress import add_quiet_option, progress_bar
from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.errors import UsageError
from dsdoctor.model import EXIT_CODE_MODES, combined_exit_code
from dsdoctor.render.analysis import render, render_jsonl
from dsdoctor.safeio import input_paths, same_file, write_report

EPILOG = """examples:
  dsdoctor analyze train.log
  dsdoctor analyze logs/rank*.log.gz --config ds_config.json --env snapshot.json
  dsdoctor analyze node*/ --env env-node0.json --env env-node1.json   (a multi-node job)
  dsdoctor analyze --config ds_config.json          (pre-flight check, no log)
  dsdoctor analyze train.log --trace fr_dumps/       (+ PyTorch Flight Recorder dumps)
  kubectl logs trainer-0 | dsdoctor analyze - --format markdown
  dsdoctor analyze job1/train.log job2/train.log --format jsonl --exit-code fate

--format json is described by a JSON Schema (dsdoctor schema; docs/machine-output.md);
--format jsonl analyzes each LOG on its own and writes one JSON object per line.

exit codes: 0 the run is healthy or recovered (or no log) and no finding is an error,
            1 the run failed, hung, was killed or stopped, or is not learning, or an error
              finding (e.g. a config lint),
            2 bad usage or unreadable input
  with --exit-code fate: 3 failed, 4 hung, 5 killed, 6 stopped, 7 not-learning
            (0, 1 and 2 as above for the other fates)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="find failure symptoms in logs and diagnose them",
        description="Find failure symptoms in training logs (plain, .gz, or - for stdin), "
        "cross-check them against the config, model and environment, and print findings "
        "with evidence and fixes. With --config and no log: a pre-flight check.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        conflict_handler="resolve",  # --env is redefined below: several nodes' snapshots
    )
    p.add_argument("logs", nargs="*", metavar="LOG",
                   help="log files (.gz ok), folders of logs (one per node: node*/), '-' for stdin")
    add_input_options(p)
    p.add_argument("--env", action="append", default=[], metavar="FILE|DIR|GLOB|local",
                   help="environment snapshot from 'dsdoctor env --format json' on the training "
                   "node, or 'local' for this machine; for a multi-node job one per node "
                   "(repeatable, a folder of snapshots, or a quoted glob): the nodes are compared")
    add_jobs_option(p)
    p.add_argument("--trace", action="append", default=[], metavar="DIR|FILE",
                   help="PyTorch Flight Recorder dumps (one file per rank, JSON or pickle; "
                   "pickles are read as plain data only) or their folder: collectives matched "
                   "across ranks name the rank that desynchronized (repeatable; dump files "
                   "given as LOG are recognised too)")
    p.add_argument("--fix-out", metavar="FILE",
                   help="write a copy of the config with the safe fixes applied to FILE")
    p.add_argument("--force", action="store_true",
                   help="let --fix-out overwrite an existing FILE (--output always replaces "
                   "its FILE, unless it is an input)")
    p.add_argument("--format", choices=("text", "json", "jsonl", "markdown"), default="text",
                   help="jsonl: each LOG analyzed on its own, one JSON object per line")
    p.add_argument("--exit-code", choices=EXIT_CODE_MODES, default="any", dest="exit_code",
                   help="fate: a code per fate for scripts (3 failed, 4 hung, 5 killed, "
                   "6 stopped, 7 not-learning); any (default): 1 for all of them")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write the report to FILE (replaced if it exists; never an input)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in text output (default: when writing to a terminal)")
    add_quiet_option(p)
    p.set_defaults(func=run)


def _use_color(args: argparse.Namespace) -> bool:
    if args.color == "always":
        return True
    if args.color == "never" or args.output or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _width(args: argparse.Namespace) -> int | None:
    """The terminal's width for text on a terminal; the fixed default in a file or a pipe."""
    if args.format != "text" or args.output:
        return None
    from dsdoctor.render.text import terminal_width  # noqa: PLC0415

    return terminal_width(sys.stdout)


def run(args: argparse.Namespace) -> int:
    if not args.logs and not args.config and not args.script and not args.model \
            and not args.trace:
        raise UsageError("nothing to analyze: pass a log file (or - for stdin), or --config "
                         "for a pre-flight check")
    refuse_misplaced(args.logs, args.config or [])
    if args.logs.count("-") > 1:
        # standard input is one stream: read once, where it is first named (cat - - reads it
        # once too: the second '-' finds it at its end)
        first = args.logs.index("-")
        args.logs = [x for i, x in enumerate(args.logs) if x != "-" or i == first]
        print("dsdoctor: note: standard input ('-') is given more than once; it is read once",
              file=sys.stderr)
    if args.fix_out and args.output and same_file(args.fix_out, args.output):
        raise UsageError("--fix-out and --output name the same file; give each its own")
    if args.format == "jsonl" and len(args.logs) > 1:
        return _run_jsonl(args)
    inputs = inputs_from(args)
    bar = progress_bar(args.quiet, sys.stderr)
    try:
        report = analyze(inputs, on_progress=bar)
    finally:
        bar.close()
    if args.fix_out:
        from dsdoctor.diagnose import fixout  # noqa: PLC0415

        written = fixout.write_fixed(inputs.configs, args.fix_out, report, force=args.force,
                                     inputs=input_paths(args))
        if written:
            print(f"dsdoctor: wrote fixed config to {written}", file=sys.stderr)
    text = render(report, args.format, color=_use_color(args),
                  verbose=getattr(args, "verbose", False), width=_width(args))
    if args.output:
        # as grep, ruff and curl: -o replaces the file, but never an input (the log itself)
        write_report(args.output, text, input_paths(args), force=True)
    else:
        sys.stdout.write(text)
    return report.exit_code_for(args.exit_code)


def _run_jsonl(args: argparse.Namespace) -> int:
    """``--format jsonl`` with several logs: each analyzed on its own (the other inputs shared),
    one line each, in the order given; the exit code of the worst (see EPILOG)."""
    if args.fix_out:
        raise UsageError("--fix-out takes one analysis: drop it, or give one LOG")
    lines, codes = [], []
    for log in args.logs:
        one = argparse.Namespace(**{**vars(args), "logs": [log]})
        report = analyze(inputs_from(one))
        lines.append(render_jsonl(report, input=log))
        codes.append(report.exit_code_for(args.exit_code))
    text = "".join(lines)
    if args.output:
        write_report(args.output, text, input_paths(args), force=True)
    else:
        sys.stdout.write(text)
    return combined_exit_code(codes, args.exit_code)
