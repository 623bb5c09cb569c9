"""``dsdoctor watch``: a Textual TUI that tails a live run and raises findings as they happen.

A worker thread reads new bytes and scans them (the UI never blocks on I/O); the app refreshes
its tables from snapshots of the scan state (tailer.py). Only this module imports textual.
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
from dsdoctor.watch.tailer import POLL_SECONDS, Tailer, WatchState


class WatchApp(App):
    """Live view of a training log."""

    TITLE = "dsdoctor watch"
    CSS = """
    #status { height: 1; padding: 0 1; }
    #symptoms { height: 1fr; }
    #findings { height: 1fr; border-top: solid $accent; }
    #events { height: 8; border-top: solid $accent; }
    """
    BINDINGS = [Binding("q", "quit", "quit"), Binding("p", "pause", "pause/resume"),
                Binding("c", "clear", "clear events")]

    def __init__(self, tailer: Tailer, poll: float = POLL_SECONDS):
        super().__init__()
        self.tailer = tailer
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
        dirty = True
        while not self._stop.is_set():
            if not self.paused:
                try:
                    read = self.tailer.poll()
                except Exception as exc:  # noqa: BLE001 - show, keep going
                    self.call_from_thread(self._show_error, f"read: {exc}")
                    read = False
                dirty |= read
                now = time.monotonic()
                if dirty and now - last_eval >= self.poll_seconds:
                    if not read:
                        self.tailer.tail.flush()
                    state = self.tailer.snapshot()
                    events = self.tailer.take_events()
                    self.call_from_thread(self._apply, state, events)
                    last_eval, dirty = now, read
            self._stop.wait(0.05 if dirty else self.poll_seconds)

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

    def action_clear(self) -> None:
        self.query_one("#events", RichLog).clear()

    def on_unmount(self) -> None:
        self._stop.set()
