"""``dsdoctor watch --plain``: one line per event, finding and stall, for scripts, CI and plain
terminals. With ``-- CMD`` it launches the command and exits with the analysis exit code when the
command ends; with the ranks' processes known (``--`` or ``--pid``) a stall dumps their stacks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from dsdoctor.redact import Redactor
from dsdoctor.safeio import one_line
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.launch import ExitStatus, Launched
from dsdoctor.watch.machine import POLL_SECONDS as MACHINE_SECONDS
from dsdoctor.watch.machine import MachineSample, ram_finding
from dsdoctor.watch.progress import StallChange

Say = Callable[[str], None]


def rank_stack_lines(root_pid: int) -> list[str]:
    """Dump and explain the stacks of the ranks under ``root_pid`` (the launcher or a rank)."""
    from dsdoctor.errors import UsageError  # noqa: PLC0415
    from dsdoctor.watch import stacks  # noqa: PLC0415
    from dsdoctor.watch.ranks import find_ranks  # noqa: PLC0415

    try:
        procs = find_ranks(root_pid)
    except UsageError as exc:
        return [f"rank stacks: {exc}"]
    if not procs:
        return [f"rank stacks: no Python process found under pid {root_pid}"]
    exe = stacks.find_py_spy()
    if exe is None:
        return [f"rank stacks: py-spy is not installed: {stacks.INSTALL_HINT}"]
    return ["rank stacks: " + line for line in stacks.explain(stacks.dump_ranks(procs, exe)).lines]


class PlainWatch:
    """The --plain loop: follow, print, detect stalls, stop with the command."""

    def __init__(self, follower: Follower, cmd: Sequence[str] = (),
                 exit_on_idle: float | None = None, launched: Launched | None = None,
                 pid: int | None = None, out: Say | None = None,
                 machine: Callable[[], MachineSample] | None = None):
        self.follower = follower
        self.cmd = tuple(cmd)
        self.exit_on_idle = exit_on_idle
        self.launched = launched
        self.root_pid = launched.pid if launched is not None else pid
        self.say: Say = out or (lambda s: print(s, flush=True))
        self.red = Redactor()  # secrets printed in the log are not echoed
        self.seen: set[str] = set()
        self.shown_errors: dict[str, str] = {}
        self.worst = 0
        # --env local: the machine's sampler (machine.sample_machine); RAM past the alert is
        # said, since it is the evidence before a -9
        self.machine = machine
        self._machine_at = 0.0
        self._ram_alert = False

    def report(self) -> None:
        events = self.follower.take_events()
        for kind, ev, _ in events:
            # redact the whole line, then cut, then neutralize: no half token, no control sequence
            self.say(f"{one_line(ev.location)}: {kind}: {one_line(self.red.cut(ev.text, 200))}")
        for t in self.follower.tailers:
            # rotations, truncations and a path that went away: said once, on stderr
            for note in t.notes:
                print(f"dsdoctor: note: {one_line(note)}", file=sys.stderr, flush=True)
            t.notes.clear()
            error = t.state.error
            if error != self.shown_errors.get(t.path, ""):
                if error and not error.startswith("waiting for"):
                    print(f"dsdoctor: warning: {one_line(error)}", file=sys.stderr, flush=True)
                self.shown_errors[t.path] = error
        if events:
            state = self.follower.snapshot()
            for f in state.findings:
                if f.rule not in self.seen:
                    self.seen.add(f.rule)
                    if f.severity == "error":
                        self.worst = 1
                    self.say(one_line(self.red.text(f"{f.severity}: {f.rule} {f.name}: {f.title}"
                                                    + (f" -- fix: {f.fix}" if f.fix else ""))))
        for change in self.follower.take_changes():
            self.stall_changed(change)

    def check_machine(self, now: float) -> None:
        """Every MACHINE_SECONDS: host RAM past the alert is said once per crossing."""
        if self.machine is None or now - self._machine_at < MACHINE_SECONDS:
            return
        self._machine_at = now
        try:
            sample = self.machine()
        except Exception as exc:  # noqa: BLE001 - the machine view is a help, never fatal
            print(f"dsdoctor: warning: cannot read this machine's memory ({exc}); "
                  "'--env none' stops trying", file=sys.stderr, flush=True)
            self.machine = None
            return
        finding = ram_finding(sample)
        if finding is not None and not self._ram_alert:
            self.say(f"{finding.severity}: {finding.rule} {finding.name}: {finding.title}")
        elif finding is None and self._ram_alert:
            self.say(f"host RAM back under the alert: {sample.describe()}")
        self._ram_alert = finding is not None

    def stall_changed(self, change: StallChange) -> None:
        if change.kind == "resumed":
            last = change.status.last
            if last is None:  # before any progress line, new output is what ended the stall
                self.say(f"output resumed after {change.stalled_for:.0f}s stalled")
            else:
                self.say(f"progress resumed after {change.stalled_for:.0f}s stalled "
                         f"({last.location})")
            return
        self.say(self.red.text(change.status.describe()))
        if self.root_pid is not None:
            for line in rank_stack_lines(self.root_pid):
                self.say(self.red.text(line))

    def finish_command(self, status: ExitStatus) -> int:
        """The command ended: read the rest of its log, then the analysis decides the exit code."""
        from dsdoctor.diagnose.pipeline import analyze  # noqa: PLC0415

        while self.follower.poll():
            self.report()
        self.follower.flush(final=True)
        self.report()
        self.say(f"command ended: {status.describe()} ({self.red.cut(' '.join(self.cmd), 200)})")
        report = analyze(replace(self.follower.inputs, logs=tuple(self.follower.paths)))
        code = report.exit_code
        if status.returncode != 0 and code == 0:
            # a run that failed is never called clean, even when its log names no cause
            self.say(f"the command failed ({status.describe()}) and the log shows no known cause;"
                     f" see {', '.join(self.follower.paths)}")
            code = 1
        return code

    def run(self) -> int:
        idle_since = time.monotonic()
        try:
            while True:
                read = self.follower.poll()
                if read:
                    idle_since = time.monotonic()
                self.report()
                self.check_machine(time.monotonic())
                if self.launched is not None:
                    status = self.launched.poll()
                    if status is not None:
                        return self.finish_command(status)
                exit_on_idle = self.exit_on_idle
                # idle means at the end of every file: a backlog is read whole before exiting
                if not read and exit_on_idle is not None and \
                        time.monotonic() - idle_since >= exit_on_idle:
                    self.follower.flush(final=True)
                    self.report()
                    return self.worst
                if not read:
                    time.sleep(0.2)
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            if self.launched is None:
                return self.worst
            print("dsdoctor: stopping the command (SIGINT, then SIGTERM, then SIGKILL to its "
                  "process group)", file=sys.stderr)
            status = self.launched.stop()
            if status is None:
                return 130
            return self.finish_command(status)
