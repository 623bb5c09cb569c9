"""The text (rich) rendering of a Report: the verdict first, then each problem once.

Default output: the verdict line, what the analysis used, each problem (what happened, at most
three evidence lines, why, the fix and the exact change), the timeline, notes, one summary line.
No evidence line is printed twice. ``verbose`` adds every finding and every symptom in full.
"""

from __future__ import annotations

import io

from dsdoctor.model import Evidence, Problem, Report
from dsdoctor.render.analysis import (EVIDENCE_IN_TEXT, SEVERITY_STYLE, change_text, config_where,
                                      ev_line, inputs_summary, problem_heading, ranks_text,
                                      short_names, summary_counts, symptom_values_summary,
                                      timeline_summary, verdict_line)

FATE_STYLE = {"FAILED": "bold red", "HUNG": "bold red", "NOT-LEARNING": "bold red",
              "RECOVERED": "bold green", "HEALTHY": "bold green", "UNKNOWN": "bold yellow"}
WIDTH = 100


def render_text(report: Report, color: bool = True, width: int | None = None,
                verbose: bool = False) -> str:
    # rich is imported here, not at module level: JSON and Markdown output do not need it
    from rich.console import Console  # noqa: PLC0415
    from rich.padding import Padding  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width or WIDTH,
                      highlight=False, soft_wrap=False)
    names = short_names(report)

    def evidence(ev: Evidence, indent: int) -> None:
        line = Text(" " * indent + "▸ ", style="dim")
        line.append(ev_line(ev, names.get(ev.file)), style="dim")
        console.print(line, overflow="ellipsis", no_wrap=True)

    def para(text: Text | str, indent: int = 2) -> None:
        console.print(Padding(text if isinstance(text, Text) else Text(text), (0, 0, 0, indent),
                              expand=False))

    def labelled(label: str, body: str, style: str = "bold") -> None:
        t = Text(f"{label}: ", style=style)
        t.append(body)
        para(t)

    fate, rest = verdict_line(report)
    first = Text(fate, style=FATE_STYLE.get(fate, "bold"))
    first.append(f": {rest}")
    console.print(first)
    nlines = sum(f.lines for f in report.files)
    if report.files:
        shown = ", ".join(f.path for f in report.files[:3])
        more = f" and {len(report.files) - 3} more" if len(report.files) > 3 else ""
        what = f"log: {shown}{more} ({nlines:,} lines)"
    else:
        what = "pre-flight check (no log)"
    # one paragraph for what was read: the problems, not the inputs, should fill the screen
    console.print(Text("; ".join([what, *inputs_summary(report)]), style="dim"))

    for i, p in enumerate(report.problems, 1):
        console.print()
        _problem(console, Text, p, problem_heading(i, len(report.problems), p), evidence, para,
                 labelled)
    if not report.problems and report.files:
        console.print()
        console.print(Text("No failure symptoms found in the log.", style="green"))
    if verbose:
        _verbose(report, console, Text, evidence, para, names)
    tl = timeline_summary(report.timeline)
    console.print()
    if tl:
        console.print(Text(f"Timeline: {tl}"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    tail = Text(summary_counts(report))
    if not verbose and (report.findings or report.symptoms):
        tail.append("; all of them: --verbose", style="dim")
    console.print(tail)
    # rich pads wrapped paragraphs to their width; trailing blanks only get in the way of diffs
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _problem(console, Text, p: Problem, heading: str, evidence, para, labelled) -> None:  # noqa: N803
    console.print(Text(heading, style=SEVERITY_STYLE.get(p.severity, "bold")))
    para(p.what)
    for ev in p.evidence:
        evidence(ev, 2)
    if p.why:
        labelled("why", p.why[0], "bold")
        for extra in p.why[1:]:
            labelled("also", extra, "dim")
    if p.fix:
        labelled("fix", p.fix, "bold green")
    change = change_text(p.fix_change)
    if change:
        where = f" ({p.config_where})" if p.config_where else ""
        labelled("change", change + where, "bold green")
    elif p.config_where:
        labelled("config", p.config_where, "dim")


def _verbose(report: Report, console, Text, evidence, para, names) -> None:  # noqa: N803
    """Every finding and every symptom, as the JSON has them (evidence capped per item)."""
    from rich.table import Table  # noqa: PLC0415

    if report.findings:
        console.print()
        console.print(Text("All findings", style="bold underline"))
        for f in report.findings:
            line = Text()
            line.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            line.append(f"{f.rule} ", style="bold")
            line.append(f"{f.name}", style="magenta")
            line.append(f"  {f.title}")
            console.print(line)
            if f.message:
                para(f.message, 8)
            if f.config_path:
                para(Text(f"config: {config_where(f)} {f.config_path}", style="dim"), 8)
            if f.fix:
                fix = Text("fix: ", style="bold green")
                fix.append(f.fix)
                para(fix, 8)
            for ev in f.evidence[:EVIDENCE_IN_TEXT]:
                evidence(ev, 8)
    if not report.symptoms:
        return
    console.print()
    table = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("symptom", "count", "first", "last", "ranks"):
        table.add_column(col, justify="right" if col == "count" else "left")
    for s in report.symptoms:
        table.add_row(s.kind, str(s.count), f"{names.get(s.first.file, s.first.file)}:{s.first.line}",
                      f"{names.get(s.last.file, s.last.file)}:{s.last.line}", ranks_text(s.ranks))
    console.print(Text("Symptoms", style="bold underline"))
    console.print(table)
    for s in report.symptoms:
        line = Text(f"{s.kind}", style="bold")
        summary = symptom_values_summary(s)
        if summary:
            line.append(f"  {summary}")
        console.print(line)
        for ev in s.evidence[:EVIDENCE_IN_TEXT]:
            evidence(ev, 2)


__all__ = ["render_text"]
