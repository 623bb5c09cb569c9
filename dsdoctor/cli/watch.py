"""``dsdoctor watch``: tail a live run and raise findings as they happen."""

from __future__ import annotations

import argparse
import sys
import time

from dsdoctor.errors import UsageError
from dsdoctor.cli.options import add_input_options
from dsdoctor.logs.reader import open_log
from dsdoctor.safeio import one_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="tail a live training log and raise findings as they happen (TUI)",
        description="Follow a growing training log (like tail -F), show its symptoms, timeline "
        "and findings live. Keys: q quit, p pause, c clear events. --plain prints one line "
        "per event instead (for scripts, CI and terminals without a TUI).",
    )
    p.add_argument("log", metavar="LOG")
    add_input_options(p)
    p.add_argument("--from-end", action="store_true",
                   help="start at the end of the file (default: read it from the start)")
    p.add_argument("--plain", action="store_true", help="no TUI: print events as lines")
    p.add_argument("--exit-on-idle", type=float, metavar="SECONDS",
                   help="(--plain) stop after the log has not grown for SECONDS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # validate the log and the other inputs up front: bad input is one line and exit 2
    log = open_log(args.log)
    log.close()
    if log.compressed:
        raise UsageError(f"{log.name}: cannot follow a compressed log; use 'dsdoctor analyze'")
    if log.encoding:
        raise UsageError(f"{log.name}: cannot follow a {log.encoding.upper()} log; use "
                         "'dsdoctor analyze'")
    if log.size is None:
        raise UsageError(f"{log.name}: not a regular file (a pipe?); watch follows a log file, "
                         "'dsdoctor analyze' reads a pipe")
    from dsdoctor.diagnose.pipeline import evaluate  # noqa: PLC0415
    from dsdoctor.logs.scan import ScanResult  # noqa: PLC0415

    evaluate(args, ScanResult())  # raises UsageError for a bad --config/--env/--model
    if args.plain:
        return run_plain(args)
    from dsdoctor.watch.tailer import Tailer  # noqa: PLC0415
    from dsdoctor.watch.app import WatchApp  # noqa: PLC0415 - textual only for the TUI

    WatchApp(Tailer(args.log, args, from_start=not args.from_end)).run()
    return 0


def run_plain(args: argparse.Namespace) -> int:
    """One line per event and per new finding; exit 1 if an error finding was raised."""
    from dsdoctor.redact import Redactor  # noqa: PLC0415
    from dsdoctor.watch.tailer import Tailer  # noqa: PLC0415 - no textual for --plain

    tailer = Tailer(args.log, args, from_start=not args.from_end)
    red = Redactor()  # secrets printed in the log are not echoed
    seen: set[str] = set()
    worst = 0

    def report() -> None:
        nonlocal worst
        events = tailer.take_events()
        for kind, ev, _ in events:
            # redact first, then cut, then neutralize: no half token, no control sequence
            text = one_line(red.text(ev.text))
            if len(text) > 200:
                text = text[:199] + "…"
            print(f"{one_line(ev.location)}: {kind}: {text}", flush=True)
        for note in tailer.notes:
            print(f"dsdoctor: note: {one_line(note)}", file=sys.stderr, flush=True)
        tailer.notes.clear()
        if not events:
            return
        tailer.state = tailer.snapshot()
        for f in tailer.state.findings:
            if f.rule not in seen:
                seen.add(f.rule)
                if f.severity == "error":
                    worst = 1
                print(one_line(red.text(f"{f.severity}: {f.rule} {f.name}: {f.title}"
                                        + (f" -- fix: {f.fix}" if f.fix else ""))), flush=True)

    idle_since = time.monotonic()
    shown_error = ""
    try:
        while True:
            read = tailer.poll()
            if read:
                idle_since = time.monotonic()
            else:
                tailer.tail.flush()
            report()
            error = tailer.state.error
            if error != shown_error:
                if error and not error.startswith("waiting for"):
                    print(f"dsdoctor: warning: {error}", file=sys.stderr, flush=True)
                shown_error = error
            # idle means at the end of the file: a backlog is read whole before exiting
            if not read and args.exit_on_idle is not None and \
                    time.monotonic() - idle_since >= args.exit_on_idle:
                tailer.tail.flush(final=True)
                report()
                return worst
            if not read:
                time.sleep(0.2)
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return worst
