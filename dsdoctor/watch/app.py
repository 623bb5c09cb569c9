"""``dsdoctor watch``: a Textual TUI that tails a live run and raises findings as they happen.

A worker thread reads new bytes and scans them (the UI never blocks on I/O); the app refreshes
its tables from snapshots of the scan state (follow.py, tailer.py). The stall banner shows a possible
hang with the time since the last progress and, when the ranks' processes are known, what their
stacks say (stacks.py, dumped in the worker). Findings are listed most severe first; selecting
one shows it in full and holds the log view (logpane.py) at its evidence, marked, in the right
file. ``/`` searches the log. Messages go to a line of their own: no toast ever covers the
findings. Only this module and logpane.py import textual.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Input, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from dsdoctor.model import Evidence, Finding
from dsdoctor.redact import Redactor
from dsdoctor.render.analysis import SEVERITY_STYLE
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.hang import StallSeen, hang_finding, watch_findings
from dsdoctor.watch.launch import ExitStatus, Launched
from dsdoctor.watch.logpane import LogPane
from dsdoctor.watch.logview import Match
from dsdoctor.watch.machine import POLL_SECONDS as MACHINE_SECONDS
from dsdoctor.watch.machine import MachineSample, ram_finding
from dsdoctor.watch.progress import StallChange, StallStatus, TqdmTick
from dsdoctor.watch.ranks import RankProcess
from dsdoctor.watch.tailer import POLL_SECONDS, WatchState

# the header's icon: Textual's default (U+2B58) is missing from common monospace fonts; an ASCII
# character every font has
HEADER_ICON = "#"
TICK_SECONDS = 1.0  # the header's "last progress Ns ago" and the stall check tick this often
SHORT_ROWS = 32  # fewer rows: no symptom and event panes
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def progress_header(stall: StallStatus, bar: TqdmTick | None = None) -> str:
    """The header's progress part: the run's tqdm bar (step/total, rate, ETA) or the step rate,
    the time since the last progress, the stall state."""
    parts = ["POSSIBLE HANG"] if stall.stalled else []  # first: the header cuts what is long
    if bar is not None:
        parts.append(bar.describe())
    elif stall.steps_per_second is not None:
        parts.append(f"{stall.steps_per_second:.2f} steps/s")
    if stall.last is not None:
        parts.append(f"last progress {stall.idle_seconds:.0f}s ago")
    else:
        parts.append(f"no progress line yet ({stall.idle_seconds:.0f}s quiet)")
    return " | ".join(parts)


EVIDENCE_SHOWN = 3  # evidence lines in the detail; Enter shows them all, marked, in the log


def finding_detail(f: Finding, red: Redactor,
                   where: Callable[[Evidence], str] = lambda ev: ev.location) -> Text:
    """A finding in full: what, the fix, the evidence (the first lines), why, the config key.
    The fix and the evidence come before the explanation: on a small screen they are what
    must be in view without scrolling."""
    text = Text()
    text.append(f"{f.rule} {f.name} ({f.severity})\n", style=SEVERITY_STYLE.get(f.severity, ""))
    text.append(red.text(f.title) + "\n", style="bold")
    if f.fix:
        text.append("fix: ", style="bold green")
        text.append(red.text(f.fix) + "\n")
    if f.evidence:
        for ev in f.evidence[:EVIDENCE_SHOWN]:
            text.append(f"{where(ev)}: ", style="cyan")
            text.append(red.cut(ev.text, 200) + "\n")
        if len(f.evidence) > EVIDENCE_SHOWN:
            more = len(f.evidence) - EVIDENCE_SHOWN
            text.append(f"... {more} more evidence line{'s' if more > 1 else ''}: Enter shows "
                        "them in the log\n", style="dim")
    else:
        text.append("no log line: from the inputs (config, script, environment)\n", style="dim")
    if f.message:
        text.append("why: ", style="bold")
        text.append(red.text(f.message) + "\n")
    if f.config_path:
        where_cfg = f" ({f.config_file}:{f.config_line})" if f.config_file and f.config_line else ""
        text.append(f"config: {f.config_path}{where_cfg}\n", style="cyan")
    for ref in f.references:
        text.append(f"see {ref}\n", style="dim")
    return text


def finding_key(f: Finding) -> str:
    return f"{f.rule}:{f.name}"


def newest_line(f: Finding) -> int:
    """The latest log line of a finding's evidence (0 without one): the newest problem of a
    severity is listed, and selected, first."""
    return max((ev.line for ev in f.evidence), default=0)


class WatchApp(App):
    """Live view of a training log."""

    TITLE = "dsdoctor watch"
    ENABLE_COMMAND_PALETTE = False  # ctrl+p would cover the findings; every action has a key
    CSS = """
    #status { height: 1; padding: 0 1; }
    .short #bottom { display: none; }
    #machine { height: 1; padding: 0 1; color: $text-muted; }
    #plots { height: auto; max-height: 3; padding: 0 1; }
    #plots.empty { display: none; }
    #stall { height: auto; max-height: 12; padding: 0 1; background: $error 30%; display: none; }
    #stall.roomy { max-height: 24; }
    #stall.stalled { display: block; }
    #stall.cleared { display: block; background: $warning 20%; }
    #top { height: 3fr; min-height: 6; }
    #top.empty { height: 2; min-height: 2; }
    #top.empty #findings { display: none; }
    #findings { width: 2fr; border: none; }
    #detail { width: 3fr; border-left: solid $accent; padding: 0 1; }
    #log-title { height: 1; padding: 0 1; background: $accent 30%; }
    #log { height: 2fr; min-height: 4; }
    #bottom { height: 7; border-top: solid $accent; }
    #bottom.empty { display: none; }
    #symptoms { width: 1fr; overflow-x: hidden; }
    #symptoms.empty { display: none; }
    #events { width: 1fr; border-left: solid $accent; overflow-x: hidden; }
    #events.empty { display: none; }
    #events.alone { border-left: none; }
    #note { height: 1; padding: 0 1; }
    #note.searching { display: none; }
    #search { height: 1; border: none; padding: 0 1; display: none; }
    #search.searching { display: block; }
    """
    # the footer drops what does not fit from its end: quit and report first (80 columns)
    BINDINGS = [Binding("q", "quit", "quit"), Binding("r", "report", "report"),
                Binding("slash", "search", "search"), Binding("p", "pause", "pause"),
                Binding("n", "search_next(True)", "next"),
                Binding("N", "search_next(False)", "previous"),
                Binding("f", "next_file", "next file"),
                Binding("escape", "leave", "follow"),
                Binding("c", "clear", "clear"),
                # Ctrl-C leaves like q (Textual would only hint at ctrl+q): the summary follows
                Binding("ctrl+c", "quit", "quit", show=False, priority=True)]

    def __init__(self, source: Follower, poll: float = POLL_SECONDS,
                 launched: Launched | None = None, pid: int | None = None,
                 machine: Callable[[], MachineSample] | None = None,
                 py_spy_note: Callable[[], str | None] | None = None):
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
        self.machine = machine  # --env local: machine.sample_machine; None with --env none
        self.ram_alert: Finding | None = None  # host RAM past the alert, from the machine poll
        # the last stall and its stacks, kept for the list, key r and the summary (hang.py)
        self.stall_seen: StallSeen | None = None
        self.hang: Finding | None = None  # as listed: made on each stall change, not each second
        self.procs: tuple[RankProcess, ...] = ()  # watch LOG: the ranks the launcher spawned
        self._looked = self.root_pid is not None  # the log's launcher lines looked at
        if py_spy_note is None:  # tests inject theirs: the screens do not depend on this host
            from dsdoctor.watch.plain import py_spy_note as here  # noqa: PLC0415

            py_spy_note = here
        self._py_spy_note = py_spy_note
        self.findings: list[Finding] = []  # as listed, most severe first
        self._listed: tuple[str, ...] | None = None  # None: never listed yet
        # the finding the app selected itself (the newest most severe); while the user has not
        # moved off it, a newer, more severe one takes its place
        self._auto_key: str | None = None
        self._progress_text = ""
        self._symptom_rows: list[tuple[str, str, str, str, str]] = []
        self._search_from = 0  # the line a search starts from (n/N move it)
        self._stop = threading.Event()
        self._seen_rules: set[str] = set()
        self._seen_kinds: set[str] = set()
        self._red = Redactor()  # a token printed in the log is not shown on screen either
        # kept here, not queried: the worker and the search thread read its files' line index
        self.log_pane = LogPane(source.paths, self._red, id="log")

    def compose(self) -> ComposeResult:
        yield Header(icon=HEADER_ICON)
        with Vertical(id="screen"):
            yield Static("", id="status")
            yield Static("", id="machine")
            yield Static("", id="plots", classes="empty")
            yield Static("", id="stall", classes="roomy")  # the bottom row starts empty
            with Horizontal(id="top", classes="empty"):
                yield OptionList(id="findings")
                with VerticalScroll(id="detail"):
                    yield Static("no findings yet: reading the log", id="detail-text")
            yield Static("", id="log-title")
            yield self.log_pane
            # empty panes give their room to the log view until something comes
            with Horizontal(id="bottom", classes="empty"):
                yield DataTable(id="symptoms", zebra_stripes=True, cursor_type="none",
                                classes="empty")
                yield RichLog(id="events", wrap=False, markup=False, max_lines=500,
                              classes="empty")
            yield Static("", id="note")
            # in the note's place, the same height: opening it moves nothing on the screen
            yield Input(placeholder="search the log (Enter: keep, Esc: leave)", id="search")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#symptoms", DataTable)
        # fixed widths: the header is drawn once, not re-measured as rows come and go
        for label, width in (("symptom", 21), ("count", 5), ("ranks", 6), ("first", 14),
                             ("last", 14)):
            table.add_column(label, width=width)
        self.sub_title = self.tailer.path
        if self.machine is None:
            self.query_one("#machine", Static).update("this machine: not watched (--env none)")
        self.set_focus(self.query_one("#findings", OptionList))
        self._refresh_log()
        note = self._py_spy_note()
        if note is not None:  # at start: a stall would come with no stacks
            self.say(note, style="yellow")
            self._event_note(note)
        threading.Thread(target=self._worker, daemon=True, name="dsdoctor-tail").start()

    def on_resize(self) -> None:
        """A short terminal (80x24): the symptom and event panes give their rows to the finding
        and the log (they repeat what the findings and the log view say)."""
        self.query_one("#screen").set_class(self.size.height < SHORT_ROWS, "short")

    def _event_note(self, note: str) -> None:
        """A line of watch's own in the events pane (it stays there, unlike the message line)."""
        self._show_pane("events", True)
        self.query_one("#events", RichLog).write(
            Text(self._red.text(note), style="yellow", no_wrap=True,
                 overflow="ellipsis"), shrink=True)

    def _show_pane(self, name: str, shown: bool) -> None:
        """A bottom pane shown or not; the bottom row hidden when both are (the log view grows)."""
        self.query_one(f"#{name}").set_class(not shown, "empty")
        empty = all(self.query_one(f"#{n}").has_class("empty") for n in ("symptoms", "events"))
        self.query_one("#bottom").set_class(empty, "empty")
        self.query_one("#events").set_class(self.query_one("#symptoms").has_class("empty"),
                                            "alone")
        # the stall banner's stacks get the room the bottom row would take
        self.query_one("#stall").set_class(empty, "roomy")

    def say(self, message: str, style: str = "") -> None:
        """A message on its own line (never a toast over the findings)."""
        self.query_one("#note", Static).update(Text(self._red.text(message), style=style))

    def _worker(self) -> None:
        last_eval = 0.0
        last_tick = 0.0
        last_machine = 0.0
        dirty = True
        while not self._stop.is_set():
            now = time.monotonic()
            if not self.paused and now - last_tick >= TICK_SECONDS:
                last_tick = now
                if self.machine is not None and now - last_machine >= MACHINE_SECONDS:
                    last_machine = now
                    self._poll_machine(self.machine)
                changes = self.tailer.take_changes()
                for change in changes:
                    self._on_stall_change(change)
                if self.launched is not None and self.exit_status is None:
                    self.exit_status = self.launched.poll()
                # the series are read here, in the worker that appends to them
                plots = self.tailer.series.layout(self.tailer.stall.intervals(),
                                                  max(20, self.size.width - 2))
                self.call_from_thread(self._apply_progress, self.tailer.stall.status(), plots,
                                      self.tailer.bar)
            if not self.paused:
                try:
                    read = self.tailer.poll()
                except Exception as exc:  # noqa: BLE001 - show, keep going
                    self.call_from_thread(self._show_error, f"read: {exc}")
                    read = False
                dirty |= read
                now = time.monotonic()
                if dirty and now - last_eval >= self.poll_seconds:
                    for log in self.log_pane.logs:
                        log.refresh()  # the log view's line index, extended off the UI thread
                    state = self.tailer.snapshot()
                    events = self.tailer.take_events()
                    self.call_from_thread(self._apply, state, events)
                    last_eval, dirty = now, read
                    if not self._looked and self.tailer.caught_up:
                        self._looked = True
                        self.call_from_thread(self._event_note, self._attach_from_log())
            self._stop.wait(0.05 if dirty else self.poll_seconds)

    def _poll_machine(self, sample_machine: Callable[[], MachineSample]) -> None:
        """Worker thread: RAM, swap, GPUs; RAM past the alert becomes a finding."""
        try:
            sample = sample_machine()
            text, alert = sample.describe(), ram_finding(sample)
        except Exception as exc:  # noqa: BLE001 - the machine view is a help, never fatal
            text, alert = f"this machine: cannot read memory ({exc})", None
        self.call_from_thread(self._apply_machine, text, alert)

    def _apply_machine(self, text: str, alert: Finding | None) -> None:
        self.query_one("#machine", Static).update(Text(text, style="bold red" if alert else ""))
        self.ram_alert = alert
        self._list_findings(self.tailer.state.findings)  # a no-op when nothing changed

    def _attach_from_log(self) -> str:
        """Worker thread, watch LOG: the ranks from the launcher's 'spawned' lines (spawned.py);
        the line that says what was found."""
        from dsdoctor.watch.spawned import attach, spawned_ranks  # noqa: PLC0415

        found = attach(spawned_ranks(self.tailer.launch_facts))
        self.procs = found.procs
        return found.note

    def _on_stall_change(self, change: StallChange) -> None:
        """Worker thread: on a stall, dump the ranks' stacks (seconds of py-spy, off the UI)."""
        from dsdoctor.watch.plain import rank_stacks, seen_stall  # noqa: PLC0415

        if change.kind == "resumed":
            # the stall's evidence stays on screen: a hang that ends in a timeout error is exactly
            # when the user wants to see which rank was stuck where
            self.cleared_after = change.stalled_for
            if self.stall_seen is not None:
                last, before = change.status.last, self.stall_seen.status.last
                by_output = last is None or (before is not None and
                                             last.location == before.location)
                self.stall_seen = self.stall_seen.resumed(change.stalled_for, by_output)
                self.hang = hang_finding(self.stall_seen)
            return
        self.cleared_after = None
        self.stall_text = change.status.describe()
        self.stack_lines = ()
        if self.root_pid is None and not self.procs:
            self._attach_from_log()  # the launcher's lines may have come after the start
        dump = None
        if self.root_pid is not None or self.procs:
            dump = rank_stacks(self.root_pid, self.procs)
            self.stack_lines = dump.lines
        self.stall_seen = seen_stall(change.status, dump)
        self.hang = hang_finding(self.stall_seen)

    def watch_extra(self, failed: bool = False) -> list[Finding]:
        """watch's own findings now: the hang (its length so far), host RAM past the alert.
        ``failed``: the launched command failed (a stall its timeout ended stays a hang)."""
        extra = []
        if self.stall_seen is not None:
            extra.append(hang_finding(self.stall_seen, self.tailer.stall.status(), failed))
        if self.ram_alert is not None:
            extra.append(self.ram_alert)
        return extra

    def summary_findings(self, failed: bool = False) -> list[Finding]:
        """What the summary on exit lists: the hang first, then the rest, most severe first."""
        return watch_findings(self.tailer.state.findings, self.watch_extra(failed))

    def _apply_progress(self, stall: StallStatus, plots: list[str],
                        bar: TqdmTick | None = None) -> None:
        box = self.query_one("#plots", Static)
        box.set_class(not plots, "empty")
        box.update(Text("\n".join(plots), style="cyan", no_wrap=True, overflow="ellipsis"))
        self._progress_text = progress_header(stall, bar)
        self._set_sub_title()
        self._list_findings(self.tailer.state.findings)  # the hang, once raised or cleared
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

    def _set_sub_title(self) -> None:
        """The header: PAUSED first (the header cuts what is too long), the files, progress."""
        parts = ["PAUSED"] if self.paused else []
        parts.append(self.tailer.path)
        if self._progress_text:
            parts.append(self._progress_text)
        if self.exit_status is not None:
            parts.append(f"command ended: {self.exit_status.describe()}")
        self.sub_title = " | ".join(parts)

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
        rows = [(s.kind, str(s.count), ",".join(map(str, s.ranks)) or "-", self._where(s.first),
                 self._where(s.last)) for s in state.symptoms]
        if rows != self._symptom_rows:  # redrawn only when it changed (no flicker, no cost)
            self._symptom_rows = rows
            self._show_pane("symptoms", bool(rows))
            table = self.query_one("#symptoms", DataTable)
            table.clear()
            for row in rows:
                table.add_row(*row)
        for f in state.findings:
            if f.rule not in self._seen_rules:
                self._seen_rules.add(f.rule)
                if f.severity == "error":
                    self.bell()
                    self.say(f"new error: {f.rule} {f.title}", style="bold red")
        self._list_findings(state.findings)
        self._refresh_log()
        ev_log = self.query_one("#events", RichLog)
        if events:
            self._show_pane("events", True)
        for kind, ev, _ in events[-200:]:
            new = kind not in self._seen_kinds
            self._seen_kinds.add(kind)
            # cut to the pane (no sideways scrolling): the line is in the log view in full
            ev_log.write(Text(f"{self._where(ev)} {kind}: {self._red.cut(ev.text, 200)}",
                              style="bold" if new else "dim", no_wrap=True, overflow="ellipsis"),
                         shrink=True)

    def _where(self, ev: Evidence) -> str:
        """file:line with the file's name only when the followed files' names differ (the
        panes are narrow; the log view's title and the finding's detail say the full path)."""
        names = {os.path.basename(p) for p in self.tailer.paths}
        if len(names) == len(self.tailer.paths):
            return f"{os.path.basename(ev.file)}:{ev.line}"
        return ev.location

    def _list_findings(self, findings: tuple[Finding, ...]) -> None:
        """The findings list, most severe first; rebuilt only when it changes, keeping the
        selected one selected."""
        shown = list(findings) + ([self.ram_alert] if self.ram_alert is not None else [])
        # most severe first, the newest first within a severity: the top one is the diagnosis
        shown.sort(key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), -newest_line(f)))
        if self.hang is not None:  # the hang first: it is what the stall banner is about
            shown.insert(0, self.hang)
        keys = tuple(finding_key(f) + f.title for f in shown)
        self.findings = shown
        if keys == self._listed:
            return
        self.query_one("#top").set_class(not shown, "empty")
        if not shown:
            self.query_one("#detail-text", Static).update(
                "no findings: the rules found nothing to say in what was read so far")
        self._listed = keys
        options = self.query_one("#findings", OptionList)
        selected = options.highlighted_option.id if options.highlighted_option else None
        if selected == self._auto_key:  # the user did not move: the diagnosis now, selected
            selected = finding_key(shown[0]) if shown else None
            self._auto_key = selected
        options.clear_options()
        for f in shown:
            prompt = Text(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            prompt.append(f"{f.rule} {f.name}: ", style="bold")
            prompt.append(self._red.text(f.title))
            options.add_option(Option(prompt, id=finding_key(f)))
        for i, f in enumerate(shown):
            if finding_key(f) == selected:
                options.highlighted = i
                # in full at once, no key needed (OptionHighlighted does not come when the
                # index is unchanged, yet the finding at it may be another)
                self.select_finding(finding_key(f), jump=False)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        """Moving in the list shows the finding in full; the log view keeps following."""
        if event.option_list.id == "findings" and event.option.id is not None:
            self.select_finding(event.option.id, jump=False)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter (or a click) on a finding: the log view jumps to its evidence."""
        if event.option_list.id == "findings" and event.option.id is not None:
            self.select_finding(event.option.id)

    def select_finding(self, key: str, jump: bool = True) -> None:
        """Show the finding in full and (``jump``) hold the log view at its first evidence line,
        all its evidence lines in that file marked."""
        finding = next((f for f in self.findings if finding_key(f) == key), None)
        if finding is None:
            return
        self.query_one("#detail-text", Static).update(
            finding_detail(finding, self._red, self._where))
        if not jump or not finding.evidence:
            return
        first = finding.evidence[0]
        marks = frozenset(ev.line for ev in finding.evidence if ev.file == first.file)
        if not self.log_pane.show_at(first.file, first.line, marks, f"{finding.rule} evidence"):
            self.say(f"{first.file} is not followed here: its line {first.line} cannot be shown")
        self._refresh_log_title()

    def _refresh_log(self) -> None:
        self.log_pane.redraw()
        self._refresh_log_title()

    def _refresh_log_title(self) -> None:
        self.query_one("#log-title", Static).update(Text(self._red.text(self.log_pane.title())))

    # --- search ---------------------------------------------------------------------------
    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.add_class("searching")
        self.query_one("#note", Static).add_class("searching")
        view = self.log_pane.view
        # from the line in view (or the first line): incremental search moves forward from there
        self._search_from = view.anchor if view.anchor is not None else 0
        box.value = view.query
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search":
            self._search(event.value, self._search_from, True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            event.input.remove_class("searching")
            self.query_one("#note", Static).remove_class("searching")
            self.set_focus(self.log_pane)

    def action_search_next(self, forward: bool) -> None:
        view = self.log_pane.view
        if not view.query:
            self.say("no search yet: / then the text")
            return
        here = view.match.line if view.match else (view.anchor or 0)
        self._search_from = here
        self._search(view.query, here, forward)

    @work(thread=True, exclusive=True, group="search")
    def _search(self, query: str, after: int, forward: bool) -> None:
        """Off the UI thread: a log of gigabytes is searched in blocks."""
        file = self.log_pane.view.file
        log = self.log_pane.logs[file]
        match = log.search(query, after, forward) if query else None
        self.call_from_thread(self._apply_search, query, match, file)

    def _apply_search(self, query: str, match: Match | None, file: int) -> None:
        if file != self.log_pane.view.file:
            return  # the view moved to another log meanwhile (f, or a finding's evidence)
        self.log_pane.set_match(query, match)
        self._refresh_log_title()

    def action_leave(self) -> None:
        """Esc: leave the search box, or the held view: back to following the end."""
        box = self.query_one("#search", Input)
        if box.has_class("searching"):
            box.remove_class("searching")
            self.query_one("#note", Static).remove_class("searching")
            box.value = ""
        self.log_pane.follow()
        self.set_focus(self.log_pane)
        self._refresh_log_title()

    def action_next_file(self) -> None:
        self.log_pane.next_file()
        self._refresh_log_title()

    def action_pause(self) -> None:
        """p: stop reading the logs (the view keeps what it has), p again: read on."""
        self.paused = not self.paused
        if self.paused:
            self.say("paused: the logs are not read until p is pressed again", style="yellow")
        else:
            self.say("resumed reading the logs")
        state = self.tailer.state
        status = Text(f"{state.lines:,} lines, {state.bytes / 2**20:.1f} MiB read")
        if self.paused:
            status.append("  [paused]", style="yellow")
        self.query_one("#status", Static).update(status)
        self._set_sub_title()

    def action_report(self) -> None:
        """Write the issue report of what was seen so far (dsdoctor report, in a thread)."""
        self.say("writing the issue report...")
        extra = self.watch_extra()  # the hang and its stacks: no log line says them
        threading.Thread(target=self._write_report, args=(extra,), daemon=True,
                         name="dsdoctor-report").start()

    def _write_report(self, extra: list[Finding]) -> None:
        from dsdoctor.watch.issue import write_issue_report  # noqa: PLC0415

        ok, message = write_issue_report(self.tailer.paths, self.tailer.inputs,
                                         self.report_path, extra)
        self.last_report = message
        self.call_from_thread(self.say, message, "" if ok else "bold red")

    def action_clear(self) -> None:
        self.query_one("#events", RichLog).clear()

    def on_unmount(self) -> None:
        self._stop.set()
