"""The TUI's log view: a window on one followed log, following its end or held at a line (a
finding's evidence, a search match), the evidence lines marked and the search text highlighted.

Only a window of lines is read (logview.LogLines), so a log of gigabytes costs what the screen
shows. The index of new lines is extended by the app's worker, not here, so the UI thread only
reads the few lines it draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from dsdoctor.redact import Redactor
from dsdoctor.watch.logview import LogLines, Match

EVIDENCE_STYLE = "bold white on dark_red"
MATCH_STYLE = "bold black on yellow"
GUTTER = 7  # line number width


@dataclass
class ViewState:
    """Which file, whether following its end or held at a line, and what is marked."""

    file: int = 0
    anchor: int | None = None  # the line held in view; None follows the end
    marks: frozenset[int] = frozenset()  # evidence lines in this file
    query: str = ""
    match: Match | None = None
    why: str = ""  # what put the view here: "DS113 evidence", "search", ...
    history: list[int] = field(default_factory=list)


class LogPane(Static, can_focus=True):
    """The log view. Keys (when it has the focus): up/down/page up/page down move, End follows."""

    BINDINGS = [Binding("up", "move(-1)", "up", show=False),
                Binding("down", "move(1)", "down", show=False),
                Binding("pageup", "move(-20)", "page up", show=False),
                Binding("pagedown", "move(20)", "page down", show=False),
                Binding("end", "follow", "follow the end", show=False)]

    def __init__(self, paths: list[str], redactor: Redactor, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__("", **kwargs)
        self.logs = [LogLines(p) for p in paths]
        self.view = ViewState()
        self._red = redactor

    @property
    def current(self) -> LogLines:
        return self.logs[self.view.file]

    def file_index(self, path: str) -> int | None:
        for i, log in enumerate(self.logs):
            if log.path == path:
                return i
        return None

    def title(self) -> str:
        """The line above the view: the file, and following or held where, and why."""
        v = self.view
        many = f" ({v.file + 1} of {len(self.logs)}; f: next file)" if len(self.logs) > 1 else ""
        if v.anchor is None:
            where = "following the end"
        else:
            where = f"at line {v.anchor}" + (f" ({v.why})" if v.why else "") + "; Esc: follow"
        if v.query:
            found = f"line {v.match.line}" if v.match else "not found"
            where += f" | /{v.query}: {found} (n/N)"
        return f"log {self.current.path}{many}: {where}"

    def show_at(self, path: str, line: int, marks: frozenset[int] = frozenset(),
                why: str = "") -> bool:
        """Hold the view at ``path``:``line`` with ``marks`` highlighted; False when the path is
        not followed here."""
        index = self.file_index(path)
        if index is None:
            return False
        self.view = ViewState(file=index, anchor=line, marks=marks, query=self.view.query,
                              match=self.view.match if index == self.view.file else None, why=why)
        self.redraw()
        return True

    def follow(self) -> None:
        """Back to following the end of the current file; marks and search are dropped."""
        self.view = ViewState(file=self.view.file)
        self.redraw()

    def next_file(self) -> None:
        self.view = ViewState(file=(self.view.file + 1) % len(self.logs), query=self.view.query)
        self.redraw()

    def set_match(self, query: str, match: Match | None) -> None:
        self.view.query, self.view.match = query, match
        if match is not None:
            self.view.anchor, self.view.why = match.line, "search"
        self.redraw()

    def action_move(self, delta: int) -> None:
        height = self._height()
        top = self.view.anchor if self.view.anchor is not None else max(
            1, self.current.line_count - height + 1 + height // 3)
        self.view.anchor = max(1, min(self.current.line_count or 1, top + delta))
        self.view.why = ""
        self.redraw()

    def action_follow(self) -> None:
        self.follow()

    def _height(self) -> int:
        return max(1, self.size.height or 10)

    def redraw(self) -> None:
        height = self._height()
        log = self.current
        v = self.view
        if v.anchor is None:
            first = max(1, log.line_count - height + 1)
        else:
            first = max(1, v.anchor - height // 3)  # the held line a third down the view
        width = max(10, (self.size.width or 80) - GUTTER - 2)
        text = Text(no_wrap=True, overflow="crop")
        for i, raw in enumerate(log.read(first, height)):
            n = first + i
            line = self._red.text(raw)
            marked = n in v.marks
            gutter = f"{n:>{GUTTER}}{'>' if marked else ' '} "
            row = Text(gutter, style="bold red" if marked else "dim")
            if v.match is not None and v.match.line == n and v.match.column + len(v.query) > width:
                # the match is past the view's right edge: show the line from a bit before it
                whole = self._red.text("".join(log.read(n, 1, cut=False)))
                shift = v.match.column - width // 3
                line = "…" + whole[shift + 1:]
            body = Text(line[:width], style=EVIDENCE_STYLE if marked else "")
            if v.query:
                body.highlight_words([v.query], style=MATCH_STYLE, case_sensitive=False)
            if v.anchor == n and v.why == "search" and not marked:
                body.stylize("reverse")
            row.append_text(body)
            if i:
                text.append("\n")
            text.append_text(row)
        if not text.plain:
            text = Text("(nothing in this log yet)", style="dim")
        self.update(text)

    def on_resize(self) -> None:
        self.redraw()
