"""``dsdoctor watch``: a Textual TUI that tails a live run and raises findings as they happen.

A worker thread reads new bytes and scans them (the UI never blocks on I/O); the app refreshes
its tables from snapshots of the scan state (follow.py, tailer.py). The stall banner shows a possible
hang with the time since the last progress and, when the ranks' processes are known, what their
stacks say (stacks.py, dumped in the worker). Only this module imports textual.
"""

from __future__ import annotations

import threading
import time

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Header, RichLog, Static

from dsdoctor.redact import Redactor
from dsdoctor.render.analysis import SEVERITY_STYLE
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.launch import ExitStatus, Launched
from dsdoctor.watch.progress import StallChange, StallStatus
from dsdoctor.watch.tailer import POLL_SECONDS, WatchState

TICK_SECONDS = 1.0  # the header's "last progress Ns ago" and the stall check tick this often
MACHINE_SECONDS = 3.0  # RAM/swap/GPU polling (NVML calls take milliseconds; not on the UI thread)


def progress_header(stall: StallStatus) -> str:
    """The header's progress part: step rate, time since the last progress, the stall state."""
    parts = []
    if stall.steps_per_second is not None:
        parts.append(f"{stall.steps_per_second:.2f} steps/s")
    if stall.last is not None:
        parts.append(f"last progress {stall.idle_seconds:.0f}s ago")
    else:
        parts.append(f"no progress line yet ({stall.idle_seconds:.0f}s quiet)")
    if stall.stalled:
        parts.append("POSSIBLE HANG")
    return " | ".join(parts)


class WatchApp(App):
    """Live view of a training log."""

    TITLE = "dsdoctor watch"
    CSS = """
    #status { height: 1; padding: 0 1; }
    #machine { height: 1; padding: 0 1; color: $text-muted; }
    #plots { height: auto; max-height: 4; padding: 0 1; }
    #stall { height: auto; max-height: 12; padding: 0 1; background: $error 30%; display: none; }
    #stall.stalled { display: block; }
    #stall.cleared { display: block; background: $warning 20%; }
    #symptoms { height: 1fr; }
    #findings { height: 1fr; border-top: solid $accent; }
    #events { height: 8; border-top: solid $accent; }
    """
    BINDINGS = [Binding("q", "quit", "quit"), Binding("p", "pause", "pause/resume"),
                Binding("c", "clear", "clear events"), Binding("r", "report", "issue report")]

    def __init__(self, source: Follower, poll: float = POLL_SECONDS,
                 launched: Launched | None = None, pid: int | None = None):
        super().__init__()
        self.tailer = source
        self.launched = launched
        self.root_pid = launched.pid if launched is not None else pid
        self.exit_status: ExitStatus | None = None
        self.stack_lines: tuple[str, ...] = ()
        self.stall_text = ""  # the last stall's one line, kept after it clears
        self.cleared_after: float | None = None
        self.report_path: str | None = None  # key r: default ./dsdoctor-issue-<time>.md
        self.last_report = ""
        self.poll_seconds = poll
        self.paused = False
        self._stop = threading.Event()
        self._seen_rules: set[str] = set()
        self._seen_kinds: set[str] = set()
        self._red = Redactor()  # a token printed in the log is not shown on screen either

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield Static("", id="status")
            yield Static("", id="machine")
            yield Static("", id="plots")
            yield Static("", id="stall")
            yield DataTable(id="symptoms", zebra_stripes=True)
            with VerticalScroll(id="findings"):
                yield Static("", id="findings-text")
            yield RichLog(id="events", wrap=False, markup=False, max_lines=500)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#symptoms", DataTable)
        table.add_columns("symptom", "count", "first", "last", "ranks")
        self.sub_title = self.tailer.path
        threading.Thread(target=self._worker, daemon=True, name="dsdoctor-tail").start()

    def _worker(self) -> None:
        last_eval = 0.0
        last_tick = 0.0
        last_machine = 0.0
        dirty = True
        while not self._stop.is_set():
            now = time.monotonic()
            if not self.paused and now - last_tick >= TICK_SECONDS:
                last_tick = now
                if now - last_machine >= MACHINE_SECONDS:
                    last_machine = now
                    self._poll_machine()
                changes = self.tailer.take_changes()
                for change in changes:
                    self._on_stall_change(change)
                if self.launched is not None and self.exit_status is None:
                    self.exit_status = self.launched.poll()
                # the series are read here, in the worker that appends to them
                plots = self.tailer.series.lines(self.tailer.stall.intervals())
                self.call_from_thread(self._apply_progress, self.tailer.stall.status(), plots)
            if not self.paused:
                try:
                    read = self.tailer.poll()
                except Exception as exc:  # noqa: BLE001 - show, keep going
                    self.call_from_thread(self._show_error, f"read: {exc}")
                    read = False
                dirty |= read
                now = time.monotonic()
                if dirty and now - last_eval >= self.poll_seconds:
                    state = self.tailer.snapshot()
                    events = self.tailer.take_events()
                    self.call_from_thread(self._apply, state, events)
                    last_eval, dirty = now, read
            self._stop.wait(0.05 if dirty else self.poll_seconds)

    def _poll_machine(self) -> None:
        from dsdoctor.watch.machine import sample_machine  # noqa: PLC0415

        try:
            text = sample_machine().describe()
        except Exception as exc:  # noqa: BLE001 - the machine view is a help, never fatal
            text = f"this machine: cannot read memory ({exc})"
        self.call_from_thread(self.query_one("#machine", Static).update, text)

    def _on_stall_change(self, change: StallChange) -> None:
        """Worker thread: on a stall, dump the ranks' stacks (seconds of py-spy, off the UI)."""
        if change.kind == "resumed":
            # the stall's evidence stays on screen: a hang that ends in a timeout error is exactly
            # when the user wants to see which rank was stuck where
            self.cleared_after = change.stalled_for
            return
        self.cleared_after = None
        self.stall_text = change.status.describe()
        self.stack_lines = ()
        if self.root_pid is not None:
            from dsdoctor.watch.plain import rank_stack_lines  # noqa: PLC0415

            self.stack_lines = tuple(rank_stack_lines(self.root_pid))

    def _apply_progress(self, stall: StallStatus, plots: list[str]) -> None:
        self.query_one("#plots", Static).update(Text("\n".join(plots), style="cyan"))
        self.sub_title = f"{self.tailer.path} | {progress_header(stall)}"
        if self.exit_status is not None:
            self.sub_title += f" | command ended: {self.exit_status.describe()}"
        banner = self.query_one("#stall", Static)
        banner.set_class(stall.stalled, "stalled")
        banner.set_class(not stall.stalled and bool(self.stall_text), "cleared")
        if stall.stalled:
            text = Text(self._red.text(stall.describe()), style="bold")
        elif self.stall_text:
            after = f" after {self.cleared_after:.0f}s" if self.cleared_after is not None else ""
            text = Text(f"stall cleared{after}; it was: " + self._red.text(self.stall_text))
        else:
            return
        for line in self.stack_lines:
            text.append("\n" + self._red.text(line))
        banner.update(text)

    def _show_error(self, msg: str) -> None:
        self.query_one("#status", Static).update(Text(msg, style="red"))

    def _apply(self, state: WatchState, events: list) -> None:
        self.tailer.state = state
        status = Text(f"{state.lines:,} lines, {state.bytes / 2**20:.1f} MiB read")
        if state.timeline:
            status.append(f" | {state.timeline}", style="dim")
        if self.paused:
            status.append("  [paused]", style="yellow")
        if state.error:
            status.append(f"  {state.error}", style="red")
        self.query_one("#status", Static).update(status)
        table = self.query_one("#symptoms", DataTable)
        table.clear()
        for s in state.symptoms:
            table.add_row(s.kind, str(s.count), s.first.location, s.last.location,
                          ",".join(map(str, s.ranks)) or "-")
        # findings: re-rendered as one block, so it wraps to the pane whatever its width
        block = Text()
        for f in state.findings:
            if f.rule not in self._seen_rules:
                self._seen_rules.add(f.rule)
                if f.severity == "error":
                    self.bell()
                    self.notify(f"{f.rule}: {self._red.text(f.title)}", severity="error",
                                timeout=8)
            block.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            block.append(f"{f.rule} {f.name}: ", style="bold")
            block.append(self._red.text(f.title) + "\n")
            if f.fix:
                block.append("  fix: ", style="bold green")
                block.append(self._red.text(f.fix) + "\n")
        self.query_one("#findings-text", Static).update(block)
        ev_log = self.query_one("#events", RichLog)
        for kind, ev, _ in events[-200:]:
            new = kind not in self._seen_kinds
            self._seen_kinds.add(kind)
            ev_log.write(Text(f"{ev.location} {kind}: {self._red.cut(ev.text, 200)}",
                              style="bold" if new else "dim"))

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_report(self) -> None:
        """Write the issue report of what was seen so far (dsdoctor report, in a thread)."""
        self.notify("writing the issue report...", timeout=3)
        threading.Thread(target=self._write_report, daemon=True, name="dsdoctor-report").start()

    def _write_report(self) -> None:
        from dsdoctor.watch.issue import write_issue_report  # noqa: PLC0415

        ok, message = write_issue_report(self.tailer.paths, self.tailer.inputs,
                                         self.report_path)
        self.last_report = message
        self.call_from_thread(self.notify, message, severity="information" if ok else "error",
                              timeout=10)

    def action_clear(self) -> None:
        self.query_one("#events", RichLog).clear()

    def on_unmount(self) -> None:
        self._stop.set()
