"""``dsdoctor watch --plain``: one line per event, finding and stall, for scripts, CI and plain
terminals. With ``-- CMD`` it launches the command and exits with the analysis exit code when the
command ends; with the ranks' processes known (``--`` or ``--pid``) a stall dumps their stacks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dsdoctor.logs.rankfacts import Frame as LogFrame
from dsdoctor.model import Finding, Report
from dsdoctor.redact import Redactor
from dsdoctor.safeio import one_line
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.hang import (
    StallSeen,
    analysis_lines,
    exit_code,
    failed_fate,
    hang_finding,
    stack_lines,
    summary_lines,
    watch_findings,
)
from dsdoctor.watch.launch import ExitStatus, Launched
from dsdoctor.watch.machine import POLL_SECONDS as MACHINE_SECONDS
from dsdoctor.watch.machine import MachineSample, ram_finding
from dsdoctor.watch.progress import StallChange, StallStatus
from dsdoctor.watch.ranks import RankProcess

Say = Callable[[str], None]


@dataclass(frozen=True)
class RankStacks:
    """What a stall's stack dump gave: the lines to show, and whether py-spy read any stack (the
    lines are then the grouped stacks; else they say why there are none)."""

    lines: tuple[str, ...]
    dumped: bool
    # each known rank's stack as traceback frames (outermost first), for the final analysis
    frames: tuple[tuple[int, tuple[LogFrame, ...]], ...] = ()


def rank_stacks(root_pid: int | None = None,
                procs: Sequence[RankProcess] = ()) -> RankStacks:
    """Dump and explain the stacks of the ranks under ``root_pid`` (the launcher or a rank), or
    of ``procs`` (the ranks the log's launcher spawned, spawned.py)."""
    from dsdoctor.errors import UsageError  # noqa: PLC0415
    from dsdoctor.watch import stacks  # noqa: PLC0415
    from dsdoctor.watch.ranks import find_ranks  # noqa: PLC0415

    found = list(procs)
    if root_pid is not None:
        try:
            found = find_ranks(root_pid)
        except UsageError as exc:
            return RankStacks((f"rank stacks: {exc}",), False)
        if not found:
            return RankStacks((f"rank stacks: no Python process found under pid {root_pid}",),
                              False)
    if not found:
        return RankStacks(("rank stacks: no rank process known: give --pid PID",), False)
    exe = stacks.find_py_spy()
    if exe is None:
        return RankStacks((f"rank stacks: py-spy is not installed: {stacks.INSTALL_HINT}",), False)
    dumped = stacks.dump_ranks(found, exe)
    lines = tuple("rank stacks: " + line for line in stacks.explain(dumped).lines)
    frames = tuple((s.rank, stacks.log_frames(s)) for s in dumped
                   if s.rank is not None and s.frames)
    return RankStacks(lines, any(s.frames for s in dumped), frames)


def rank_stack_lines(root_pid: int) -> list[str]:
    """Dump and explain the stacks of the ranks under ``root_pid`` (the launcher or a rank)."""
    return list(rank_stacks(root_pid).lines)


def seen_stall(status: StallStatus, dump: RankStacks | None) -> StallSeen:
    """A stall and its stacks as hang.py keeps them: the stacks when py-spy read them, else why
    there are none."""
    if dump is None:
        return StallSeen(status, stacks_note="no rank process known (give --pid PID)")
    if dump.dumped:
        return StallSeen(status, stacks=stack_lines(dump.lines), rank_frames=dump.frames)
    return StallSeen(status, stacks_note="; ".join(stack_lines(dump.lines)))


def py_spy_note() -> str | None:
    """Said at start, not only when a stall comes: a missing py-spy means no stacks then."""
    from dsdoctor.watch import stacks  # noqa: PLC0415

    if stacks.find_py_spy() is not None:
        return None
    return ("py-spy is not installed: a stall will show no rank stacks; "
            "pip install py-spy")


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
        self._ram_alert: Finding | None = None
        # what watch learned, kept for the summary on exit and the exit code (hang.py)
        self.stall_seen: StallSeen | None = None
        self.procs: tuple[RankProcess, ...] = ()  # the ranks the log's launcher spawned
        self._attached = self.root_pid is not None  # --pid / -- CMD: nothing to look for
        self._looked = self._attached

    def attach_from_log(self, say: bool) -> None:
        """watch LOG without --pid: the ranks from the launcher's 'spawned' lines (spawned.py),
        looked for once the backlog is read, and again on a stall until found."""
        if self._attached:
            return
        from dsdoctor.watch.spawned import attach, spawned_ranks  # noqa: PLC0415

        self.follower.snapshot()
        found = attach(spawned_ranks(self.follower.launch_facts))
        self.procs = found.procs
        self._attached = bool(found.procs)
        if say or found.procs:
            print(f"dsdoctor: {one_line(found.note)}", file=sys.stderr, flush=True)

    def report(self) -> None:
        events = self.follower.take_events()
        for kind, ev, _ in events:
            # the rank that printed it (its [rankN]: prefix, a rank field, a per-rank file): a
            # rank that fails first is named as its line arrives, before the others' consequences
            rank = f"[rank {ev.rank}] " if ev.rank is not None else ""
            # redact the whole line, then cut, then neutralize: no half token, no control sequence
            self.say(f"{one_line(ev.location)}: {kind}: {rank}"
                     f"{one_line(self.red.cut(ev.text, 200))}")
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
        if finding is not None and self._ram_alert is None:
            self.say(f"{finding.severity}: {finding.rule} {finding.name}: {finding.title}")
        elif finding is None and self._ram_alert is not None:
            self.say(f"host RAM back under the alert: {sample.describe()}")
        self._ram_alert = finding

    def stall_changed(self, change: StallChange) -> None:
        if change.kind == "resumed":
            last = change.status.last
            if last is None:  # before any progress line, new output is what ended the stall
                self.say(f"output resumed after {change.stalled_for:.0f}s stalled")
            else:
                self.say(f"progress resumed after {change.stalled_for:.0f}s stalled "
                         f"({last.location})")
            if self.stall_seen is not None:
                before = self.stall_seen.status.last
                by_output = last is None or (before is not None and
                                             last.location == before.location)
                self.stall_seen = self.stall_seen.resumed(change.stalled_for, by_output)
            return
        self.say(self.red.text(change.status.describe()))
        self.attach_from_log(say=False)  # the launcher's lines may have come after the start
        dump = None
        if self.root_pid is not None or self.procs:
            dump = rank_stacks(self.root_pid, self.procs)
            for line in dump.lines:
                self.say(self.red.text(line))
        self.stall_seen = seen_stall(change.status, dump)

    def watch_extra(self, failed: bool = False) -> list[Finding]:
        """watch's own findings: the hang it saw (with its stacks), host RAM past the alert.
        ``failed``: the command failed (a stall its timeout ended stays a hang)."""
        extra = []
        if self.stall_seen is not None:
            extra.append(hang_finding(self.stall_seen, self.follower.stall.status(), failed))
        if self._ram_alert is not None:
            extra.append(self._ram_alert)
        return extra

    def summarize(self, findings: Sequence[Finding], report: Report | None = None,
                  failed: bool = False, stopped: bool = False) -> int:
        """The summary on exit (the analysis's verdict and ranks, then the hang and the other
        findings) and the exit code it carries. ``stopped``: watch stopped the command."""
        shown = watch_findings(findings, self.watch_extra(failed))
        fate = failed_fate(report)
        for line in summary_lines(shown, head=analysis_lines(report, stopped), failed_fate=fate):
            self.say(one_line(self.red.text(line)))
        return max(exit_code(shown), 1 if fate else 0)

    def analysis(self) -> Report | None:
        """``analyze`` on the logs read: the verdict and the per-rank table for the summary."""
        from dsdoctor.diagnose.pipeline import analyze  # noqa: PLC0415

        seen = self.stall_seen
        # a stall that progress cleared says nothing of where the ranks were at the end
        live = seen is not None and (seen.cleared_after is None or seen.by_output)
        frames = seen.rank_frames if seen is not None and live else ()
        try:
            return analyze(replace(self.follower.inputs, logs=tuple(self.follower.paths),
                                   rank_stacks=frames))
        except Exception as exc:  # noqa: BLE001 - the summary is said even when this fails
            print(f"dsdoctor: warning: the final analysis failed ({exc}); the summary has "
                  "watch's findings only", file=sys.stderr, flush=True)
            return None

    def leave(self) -> int:
        """q-like exits (idle, Ctrl-C without a command): the findings so far, summarized."""
        self.follower.flush(final=True)  # a last line without its newline counts too
        state = self.follower.snapshot()
        return max(self.worst, self.summarize(state.findings, self.analysis()))

    def finish_command(self, status: ExitStatus, stopped: bool = False) -> int:
        """The command ended: read the rest of its log, then the analysis decides the exit code."""
        from dsdoctor.diagnose.pipeline import analyze  # noqa: PLC0415

        while self.follower.poll():
            self.report()
        self.follower.flush(final=True)
        self.report()
        self.say(f"command ended: {status.describe()} ({self.red.cut(' '.join(self.cmd), 200)})")
        report = analyze(replace(self.follower.inputs, logs=tuple(self.follower.paths)))
        code = max(report.exit_code,
                   self.summarize(report.findings, report, failed=status.returncode != 0,
                                  stopped=stopped))
        if status.returncode != 0 and code == 0:
            # a run that failed is never called clean, even when its log names no cause
            self.say(f"the command failed ({status.describe()}) and the log shows no known cause;"
                     f" see {', '.join(self.follower.paths)}")
            code = 1
        return code

    def run(self) -> int:
        idle_since = time.monotonic()
        try:  # a Ctrl-C from the first moment on stops the command the same way
            note = py_spy_note()
            if note is not None:
                print(f"dsdoctor: {note}", file=sys.stderr, flush=True)
            while True:
                read = self.follower.poll()
                if read:
                    idle_since = time.monotonic()
                elif not self._looked:  # the backlog is read: its launcher lines are in
                    self._looked = True
                    self.attach_from_log(say=True)
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
                    return self.leave()
                if not read:
                    time.sleep(0.2)
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            if self.launched is None:
                return self.leave()
            print("dsdoctor: stopping the command (SIGINT, then SIGTERM, then SIGKILL to its "
                  "process group)", file=sys.stderr)
            status = self.launched.stop()
            if status is None:
                self.summarize(self.follower.snapshot().findings)
                return 130
            return self.finish_command(status, stopped=True)
