"""``dsdoctor watch``: follow a live run, raise findings and possible hangs as they happen."""

from __future__ import annotations

import argparse
import math
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from dsdoctor.cli.misplaced import refuse_misplaced
from dsdoctor.cli.options import add_input_options, inputs_from
from dsdoctor.errors import UsageError
from dsdoctor.logs.reader import open_log
from dsdoctor.safeio import input_paths, refuse_inputs

if TYPE_CHECKING:
    from dsdoctor.watch.follow import Follower


# A year: longer than any run is watched; nan, inf and 1e400 are no number of seconds.
MAX_SECONDS = 365 * 24 * 3600.0
# pid_t is a C int: a larger number is no process (and os.kill would overflow on it).
MAX_PID = 2**31 - 1


def _seconds(text: str) -> float:
    """A finite number of seconds, 0 to MAX_SECONDS (nan, inf and 1e400 are none)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_SECONDS:.0f} seconds: {text!r}")
    return value


def _positive(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_SECONDS:.0f} "
                                         f"seconds: {text!r}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text.strip(), 10) if len(text) <= 20 else -1
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if not 1 <= value <= MAX_PID:
        raise argparse.ArgumentTypeError(f"not a process id (1 to {MAX_PID}): {text[:40]!r}")
    return value


def _split_command(parser: argparse.ArgumentParser) -> None:
    """Everything after the first ``--`` is the command to launch (argparse alone would take
    it as more LOGs)."""
    parse_known = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):  # type: ignore[no-untyped-def]
        args = list(sys.argv[1:] if args is None else args)
        cmd: list[str] = []
        if "--" in args:
            cut = args.index("--")
            args, cmd = args[:cut], args[cut + 1:]
        ns, extra = parse_known(args, namespace)
        ns.cmd = cmd
        return ns, extra

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="follow a live run (or launch one with -- CMD) and raise findings and hangs as they "
        "happen (TUI)",
        description="Follow growing training logs (like tail -F; several LOGs, one per rank or "
        "node, are followed together), show symptoms, findings and progress live, and raise a "
        "possible hang when no progress (step line, Trainer dict, tqdm bar, loss) arrives for "
        "--stall-after seconds. '-- CMD ARGS...' launches the training command, tees its output "
        "to a log file and watches it; --pid attaches to a running job. When the ranks' processes "
        "are known, a stall dumps every rank's Python stack with py-spy (pip install py-spy) and "
        "names the odd ranks out. --env is 'local' by default: this machine's RAM (and the "
        "cgroup's limit), swap and GPUs are shown and RAM past 90% of the limit is raised as a "
        "finding; '--env none' turns that off. Keys: q quit, p pause, / search the log (n/N next/"
        "previous, Esc leave), f next log file, c clear events, r issue report; selecting a "
        "finding shows it in full and jumps the log view to its evidence. --plain prints one "
        "line per event instead (for scripts, CI and terminals without a TUI).",
        usage="dsdoctor watch [LOG ...] [--config FILE] [--env FILE|local|none] "
        "[--stall-after SECONDS] [--plain] [--pid PID] [-- CMD ARGS ...]",
    )
    p.add_argument("log", nargs="*", metavar="LOG")
    add_input_options(p)
    for action in p._actions:  # the shared --env, as watch reads it (local by default, or none)
        if action.dest == "env":
            action.metavar = "local|none|FILE"
            action.help = ("local (the default): this machine's environment for the rules, and "
                           "its RAM (cgroup limit), swap and GPUs watched; none: neither; FILE: "
                           "a snapshot from 'dsdoctor env --format json' for the rules")
    p.add_argument("--from-end", action="store_true",
                   help="start at the end of the files (default: read them from the start)")
    p.add_argument("--plain", action="store_true", help="no TUI: print events as lines")
    p.add_argument("--exit-on-idle", type=_seconds, metavar="SECONDS",
                   help="(--plain) stop after the logs have not grown for SECONDS")
    p.add_argument("--stall-after", type=_positive, metavar="SECONDS",
                   help="raise a possible hang after SECONDS without progress (default: 20x the "
                   "median interval between progress lines once a few are seen, at least 60 s; "
                   "300 s before that)")
    p.add_argument("--pid", type=_pid, metavar="PID",
                   help="attach to a running job: the launcher's (or a rank's) PID; its process "
                   "tree holds the ranks, whose stacks are dumped on a stall")
    p.add_argument("--log-file", metavar="FILE",
                   help="(-- CMD) where the command's output goes (default: "
                   "./dsdoctor-watch-<time>.log)")
    _split_command(p)
    p.set_defaults(func=run, cmd=[])


def _check_inputs(args: argparse.Namespace, logs: list[str]) -> None:
    """Bad input is one line and exit 2, before anything is launched."""
    refuse_misplaced(list(logs), args.config or [])
    for path in logs:
        log = open_log(path, wait_for_writer=False)  # a FIFO is refused below: no wait
        log.close()
        if log.compressed:
            raise UsageError(f"{log.name}: cannot follow a compressed log; use 'dsdoctor analyze'")
        if log.encoding:
            raise UsageError(f"{log.name}: cannot follow a {log.encoding.upper()} log; use "
                             "'dsdoctor analyze'")
        if log.size is None:
            raise UsageError(f"{log.name}: not a regular file (a pipe?); watch follows a log file, "
                             "'dsdoctor analyze' reads a pipe")
    if args.pid is not None and args.cmd:
        raise UsageError("--pid attaches to a running job and '-- CMD' launches one: give one")
    if args.pid is not None:
        import psutil  # noqa: PLC0415

        if not psutil.pid_exists(args.pid):
            raise UsageError(f"--pid {args.pid}: no such process; give the PID of the launcher "
                             "(deepspeed, torchrun, accelerate) or of one rank")
    if args.log_file and not args.cmd:
        raise UsageError("--log-file names the log of a launched command: add '-- CMD ARGS'")
    if args.log_file:
        # the command's output is appended to it: never to a watched log or another input
        refuse_inputs(args.log_file, input_paths(args), "--log-file")
    from dsdoctor.diagnose.pipeline import findings_of  # noqa: PLC0415
    from dsdoctor.logs.scan import ScanResult  # noqa: PLC0415

    inputs = inputs_from(args)
    if inputs.env == "local":  # this machine's snapshot needs no checking (see _local_env_later)
        inputs = replace(inputs, env=None)
    findings_of(inputs, ScanResult())  # raises UsageError for a bad --config/--env/--model


def _local_env_later(follower: Follower) -> None:
    """--env local: collecting this machine's snapshot takes seconds when torch is installed, so
    the logs are read and the rules run without it until a thread has it (once per process)."""
    local = follower.inputs

    def collect() -> None:
        from dsdoctor.facts.envinfo import load_snapshot  # noqa: PLC0415

        try:
            load_snapshot("local")
        except Exception as exc:  # noqa: BLE001 - the watch goes on without it
            print(f"dsdoctor: warning: cannot collect this machine's environment ({exc}); the "
                  "rules go on without it", file=sys.stderr, flush=True)
            return
        follower.inputs = local  # one attribute: the next refresh reads it whole

    follower.inputs = replace(local, env=None)
    threading.Thread(target=collect, daemon=True, name="dsdoctor-env").start()


def _env_choice(args: argparse.Namespace) -> bool:
    """watch's --env is 'local' by default (the machine under the run is watched too); 'none'
    watches no machine and gives the rules no environment. True when the machine is polled."""
    if args.env is None:
        args.env = "local"
    elif args.env == "none":
        args.env = None
    return args.env == "local"


def run(args: argparse.Namespace) -> int:
    machine = _env_choice(args)
    if not args.log and not args.cmd:
        if args.pid is not None:
            raise UsageError(f"--pid {args.pid} needs the job's LOG too (progress is read from "
                             "it): 'dsdoctor watch train.log --pid PID'")
        raise UsageError("nothing to watch: give a LOG, or launch the run with "
                         "'dsdoctor watch -- deepspeed train.py ...'")
    _check_inputs(args, args.log)
    from dsdoctor.watch.follow import Follower  # noqa: PLC0415
    from dsdoctor.watch.launch import Launched, default_log_path  # noqa: PLC0415
    from dsdoctor.watch.machine import sample_machine  # noqa: PLC0415

    logs = list(args.log)
    log_file = (args.log_file or default_log_path()) if args.cmd else None
    if log_file:
        logs.append(log_file)
    # the follower (and its scanner) is ready before the command starts: a Ctrl-C from then on
    # always finds a command to stop
    from_start = not args.from_end or log_file is not None
    inputs = replace(inputs_from(args), logs=tuple(logs))
    follower = Follower(logs, inputs, from_start=from_start, stall_after=args.stall_after)
    if inputs.env == "local":
        _local_env_later(follower)
    launched = None
    if log_file:
        launched = Launched(args.cmd, log_file)
        print(f"dsdoctor: launched {args.cmd[0]} (pid {launched.pid}, own process group); its "
              f"output goes to {log_file}", file=sys.stderr, flush=True)
    try:
        if args.plain:
            from dsdoctor.watch.plain import PlainWatch  # noqa: PLC0415 - no textual for --plain

            return PlainWatch(follower, cmd=args.cmd or (), exit_on_idle=args.exit_on_idle,
                              launched=launched, pid=args.pid,
                              machine=sample_machine if machine else None).run()
        from dsdoctor.watch.app import WatchApp  # noqa: PLC0415 - textual only for the TUI

        app = WatchApp(follower, launched=launched, pid=args.pid,
                       machine=sample_machine if machine else None)
        try:
            app.run()
        except KeyboardInterrupt:  # a SIGINT from outside the terminal: leave as q does
            pass
        # q stops the command first: its last lines (a timeout's traceback, the launcher's
        # exit) are in the log the summary's analysis reads
        status, stopped = None, False
        if launched is not None:
            status = launched.poll()
            if status is None:
                print("dsdoctor: stopping the command (SIGINT, then SIGTERM, then SIGKILL to its "
                      "process group)", file=sys.stderr)
                status, stopped = launched.stop(), True
        failed = status is not None and status.returncode != 0
        code = _summarize(app.summary_findings(failed), _final_analysis(follower, app.stall_seen),
                          stopped)
    finally:
        if launched is not None and launched.poll() is None:
            print("dsdoctor: stopping the command (SIGINT, then SIGTERM, then SIGKILL to its "
                  "process group)", file=sys.stderr)
            launched.stop()
    if launched is not None:
        status = launched.poll()
        if status is not None:
            print(f"dsdoctor: command ended: {status.describe()}; log: {launched.log_path}",
                  file=sys.stderr)
    return code


def _final_analysis(follower, stall_seen=None):  # noqa: ANN001, ANN202 - -> Report | None
    """``analyze`` on the logs the TUI followed and the ranks' stacks of its last stall (the
    summary's verdict and ranks), or None."""
    from dsdoctor.watch.plain import PlainWatch  # noqa: PLC0415

    plain = PlainWatch(follower)
    plain.stall_seen = stall_seen
    return plain.analysis()


def _summarize(findings: list, report=None, stopped: bool = False) -> int:  # noqa: ANN001
    """After the TUI (q, Ctrl-C): the analysis's verdict and ranks (the culprit), then what it
    showed, the hang and its stacks first, stays on the terminal; the exit code is analyze's
    convention (1 on an error finding, a hang or a failed verdict)."""
    from dsdoctor.redact import Redactor  # noqa: PLC0415
    from dsdoctor.safeio import one_line  # noqa: PLC0415
    from dsdoctor.watch.hang import (  # noqa: PLC0415
        analysis_lines,
        exit_code,
        failed_fate,
        summary_lines,
    )

    red = Redactor()
    fate = failed_fate(report)
    for line in summary_lines(findings, head=analysis_lines(report, stopped), failed_fate=fate):
        print(one_line(red.text(line)), flush=True)
    return max(exit_code(findings), 1 if fate else 0)
