"""The text (rich) rendering of a Report: the verdict first, then each problem once.

Default output: the verdict line, what the analysis used, each problem (what happened, at most
three evidence lines, why, the fix and the exact change), the timeline, notes, one summary line.
No evidence line is printed twice. ``verbose`` adds every finding and every symptom in full.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from typing import TextIO

from dsdoctor.model import Evidence, Problem, Report
from dsdoctor.render.analysis import (
    EVIDENCE_IN_TEXT,
    SEVERITY_STYLE,
    change_text,
    config_where,
    ev_line,
    inputs_summary,
    problem_heading,
    ranks_text,
    retry_line,
    short_names,
    summary_counts,
    symptom_values_summary,
    timeline_summary,
    verdict_line,
)

FATE_STYLE = {"FAILED": "bold red", "HUNG": "bold red", "NOT-LEARNING": "bold red",
              "RECOVERED": "bold green", "HEALTHY": "bold green", "UNKNOWN": "bold yellow",
              "PRE-FLIGHT FAILED": "bold red", "PRE-FLIGHT OK": "bold green"}
WIDTH = 100
#: A terminal narrower than this still gets this many columns (evidence needs room to say something).
MIN_WIDTH = 60
#: A source-location prefix that C++ and Python loggers put before the message:
#: ``[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598]``. Cut to the file's
#: name (``[pair.cc:598]``) before a long line is cut, so the cut removes the path, not the message.
_SOURCE_PATH = re.compile(r"\[(?:[A-Za-z]:)?[/\\](?:[^\]\s/\\]+[/\\])+([^\]\s/\\]+:\d+(?::\w+)?)\]")


def terminal_width(stream: TextIO | None = None) -> int:
    """The width to render text for: a terminal's (``COLUMNS`` first, as ``ls`` and rich read it,
    else the real terminal's size), at least MIN_WIDTH; WIDTH for a file or a pipe, so that what
    is saved or piped does not depend on the window it was made in."""
    stream = stream if stream is not None else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    if not tty:
        return WIDTH
    cols = os.environ.get("COLUMNS", "")
    width = int(cols) if cols.isdigit() and int(cols) > 0 else shutil.get_terminal_size((WIDTH, 24)).columns
    return max(MIN_WIDTH, width)


def fit_evidence(text: str, width: int) -> str:
    """``text`` as one line of at most ``width`` columns: source paths in brackets shortened to
    the file's name first, then cut with an ellipsis."""
    if len(text) <= width:
        return text
    text = _SOURCE_PATH.sub(r"[\1]", text)
    return text if len(text) <= width else text[:max(1, width - 1)] + "…"


class _Printer:
    """The rich console of one rendering, with the few shapes the text output uses."""

    def __init__(self, report: Report, color: bool, width: int) -> None:
        from rich.console import Console  # noqa: PLC0415 - rich only for text output

        self.buf = io.StringIO()
        self.console = Console(file=self.buf, force_terminal=color, no_color=not color,
                               width=width, highlight=False, soft_wrap=False)
        self.names = short_names(report)

    def line(self, text: str = "", style: str = "") -> None:
        from rich.text import Text  # noqa: PLC0415

        self.console.print(Text(text, style=style) if text else "")

    def styled(self, parts: list[tuple[str, str]]) -> None:
        """One line (wrapped if long) made of (text, style) parts."""
        from rich.text import Text  # noqa: PLC0415

        t = Text()
        for text, style in parts:
            t.append(text, style=style)
        self.console.print(t)

    def evidence(self, ev: Evidence, indent: int) -> None:
        """``▸ train.log:246 [rank 0]: text``, cut at the width: evidence never wraps."""
        from rich.text import Text  # noqa: PLC0415

        t = Text(" " * indent + "▸ ", style="dim")
        room = self.console.width - indent - 2
        t.append(fit_evidence(ev_line(ev, self.names.get(ev.file)), room), style="dim")
        self.console.print(t, overflow="ellipsis", no_wrap=True)

    def para(self, body: str, indent: int = 2, label: str = "", style: str = "bold",
             body_style: str = "") -> None:
        """An indented paragraph, optionally ``label: body``."""
        from rich.padding import Padding  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        t = Text(f"{label}: ", style=style) if label else Text()
        t.append(body, style=body_style)
        self.console.print(Padding(t, (0, 0, 0, indent), expand=False))

    def text(self) -> str:
        # rich pads wrapped paragraphs to their width; trailing blanks only get in the way of diffs
        return "\n".join(line.rstrip() for line in self.buf.getvalue().splitlines()) + "\n"


def render_text(report: Report, color: bool = True, width: int | None = None,
                verbose: bool = False) -> str:
    out = _Printer(report, color, width or WIDTH)
    fate, rest = verdict_line(report)
    out.styled([(fate, FATE_STYLE.get(fate, "bold")), (f": {rest}", "")])
    _retry(out, report)
    # right under the verdict: which rank made the others wait. Ranks that all ended the same
    # way (every rank raised the same exception) add nothing to the verdict's line in the
    # short text; the JSON and Markdown always have them.
    table = report.ranks
    if table is not None and (len(table.groups) > 1 or (
            report.verdict is not None and report.verdict.fate == "hung")):
        _ranks(out, report)
    nlines = sum(f.lines for f in report.files)
    if report.files:
        shown = ", ".join(f.path for f in report.files[:3])
        more = f" and {len(report.files) - 3} more" if len(report.files) > 3 else ""
        what = f"log: {shown}{more} ({nlines:,} lines)"
    elif report.inputs.get("traces"):
        what = f"Flight Recorder dumps of {len(report.inputs['traces'])} ranks (no log)"
    else:
        what = "pre-flight check (no log)"
    # one paragraph for what was read: the problems, not the inputs, should fill the screen
    out.line("; ".join([what, *inputs_summary(report)]), style="dim")
    # ``also`` lines and config keys already printed: a note several problems share is told once,
    # a key two problems point at is named once and referred to after
    told: dict[str, int] = {}
    for i, p in enumerate(report.problems, 1):
        out.line()
        _problem(out, p, problem_heading(i, len(report.problems), p), told, i)
    if not report.problems and report.files:
        out.line()
        out.line("No failure symptoms found in the log.", style="green")
    if verbose:
        _verbose(out, report)
    tl = timeline_summary(report.timeline)
    out.line()
    if tl:
        out.line(f"Timeline: {tl}")
    for note in dict.fromkeys(report.notes):  # in order, each once
        out.line(f"note: {note}", style="dim")
    hint = ("; all of them: --verbose", "dim") if not verbose and (
        report.findings or report.symptoms) else ("", "")
    out.styled([(summary_counts(report), ""), hint])
    return out.text()


def _retry(out: _Printer, report: Report) -> None:
    """Whether a retry can help, and why, right under the verdict (diagnose/retry.py)."""
    from rich.text import Text  # noqa: PLC0415

    said = retry_line(report)
    if said is not None:  # one line, cut at the width: the JSON and Markdown have it whole
        t = Text()
        t.append("Retry", style="bold")
        t.append(f": {said}")
        out.console.print(t, overflow="ellipsis", no_wrap=True)


def _ranks(out: _Printer, report: Report) -> None:
    """The per-rank table, one line per group of ranks in the same state, cut at the width."""
    from rich.text import Text  # noqa: PLC0415

    table = report.ranks
    assert table is not None
    out.line(f"Ranks ({len(table.ranks)}, by state):", style="bold")
    mark = "  ← culprit"
    width = max(20, out.console.width - 2)
    for line in table.lines():
        culprit = line.endswith(mark)
        if culprit and len(line) > width:  # cut the state, never the mark that names the rank
            line = line[:width - len(mark) - 1] + "…" + mark
        style = "bold red" if culprit else ""
        out.console.print(Text("  " + line, style=style), overflow="ellipsis", no_wrap=True)


def _problem(out: _Printer, p: Problem, heading: str, told: dict[str, int], number: int) -> None:
    out.line(heading, style=SEVERITY_STYLE.get(p.severity, "bold"))
    out.para(p.what)
    for ev in p.evidence:
        out.evidence(ev, 2)
    if p.why:
        out.para(p.why[0], label="why")
        for extra in p.why[1:]:
            out.para(extra, label="why", style="dim")
    if p.fix:
        out.para(p.fix, label="fix", style="bold green")
    change = change_text(p.fix_change)
    if change:
        where = f" ({p.config_where})" if p.config_where else ""
        out.para(change + where, label="change", style="bold green")
    elif p.config_where:
        first = told.setdefault(f"config {p.config_where}", number)
        out.para(p.config_where if first == number else f"the key of problem {first}",
                 label="config", style="dim")
    for note in p.also:  # the other findings' fixes: not only under --verbose
        if told.setdefault(f"also {note}", number) == number:
            out.para(note, label="also", style="green")


def _verbose(out: _Printer, report: Report) -> None:
    """Every finding and every symptom, as the JSON has them (evidence capped per item)."""
    from rich.table import Table  # noqa: PLC0415

    if report.findings:
        out.line()
        out.line("All findings", style="bold underline")
        for f in report.findings:
            out.styled([(f"{f.severity:<7} ", SEVERITY_STYLE.get(f.severity, "")),
                        (f"{f.rule} ", "bold"), (f.name, "magenta"), (f"  {f.title}", "")])
            if f.message:
                out.para(f.message, 8)
            if f.config_path:
                out.para(f"config: {config_where(f)} {f.config_path}", 8, body_style="dim")
            if f.fix:
                out.para(f.fix, 8, label="fix", style="bold green")
            for ev in f.evidence[:EVIDENCE_IN_TEXT]:
                out.evidence(ev, 8)
    if not report.symptoms:
        return
    out.line()
    table = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("symptom", "count", "first", "last", "ranks"):
        table.add_column(col, justify="right" if col == "count" else "left")
    names = out.names
    for s in report.symptoms:
        table.add_row(s.kind, str(s.count), f"{names.get(s.first.file, s.first.file)}:{s.first.line}",
                      f"{names.get(s.last.file, s.last.file)}:{s.last.line}", ranks_text(s.ranks))
    out.line("Symptoms", style="bold underline")
    out.console.print(table)
    for s in report.symptoms:
        summary = symptom_values_summary(s)
        out.styled([(s.kind, "bold"), (f"  {summary}" if summary else "", "")])
        for ev in s.evidence[:EVIDENCE_IN_TEXT]:
            out.evidence(ev, 2)


__all__ = ["render_text"]
