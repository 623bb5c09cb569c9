"""The Markdown rendering of a Report: the same story as the text output (verdict, problems)."""

from __future__ import annotations

from dsdoctor.model import Report
from dsdoctor.render.analysis import (
    EVIDENCE_IN_TEXT,
    change_text,
    config_where,
    counts,
    ev_line,
    inputs_summary,
    problem_heading,
    ranks_text,
    retry_line,
    summary_counts,
    symptom_values_summary,
    timeline_summary,
    verdict_line,
)


def md_cell(s: str) -> str:
    """Text safe inside a Markdown table cell."""
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, verbose: bool = False) -> str:
    out: list[str] = []
    fate, rest = verdict_line(report)
    out.append("## dsdoctor analysis")
    out.append("")
    out.append(f"**{fate}**: {rest}")
    out.append("")
    retry = retry_line(report)
    if retry is not None:
        out.append(f"**Retry**: {retry}")
        out.append("")
    if report.ranks is not None:
        out.append(f"Ranks ({len(report.ranks.ranks)}, by state):")
        out.append("")
        out.append("```text")
        out.extend(report.ranks.lines())
        out.append("```")
        out.append("")
    nlines = sum(f.lines for f in report.files)
    if report.files:
        names = ", ".join(f"`{f.path}`" for f in report.files)
        out.append(f"{len(report.files)} log file(s) ({names}), {nlines:,} lines. "
                   f"{summary_counts(report)}.")
    else:
        out.append(f"Pre-flight check (no log). {summary_counts(report)}.")
    out.append("")
    inputs = inputs_summary(report)
    if inputs:
        out.append("Inputs: " + "; ".join(inputs) + ".")
        out.append("")
    total = len(report.problems)
    for i, p in enumerate(report.problems, 1):
        heading = problem_heading(i, total, p)
        out.append(f"### {heading[:1].upper()}{heading[1:]}")
        out.append("")
        out.append(p.what)
        out.append("")
        if p.evidence:
            out.append("```text")
            out.extend(ev_line(ev) for ev in p.evidence)
            out.append("```")
            out.append("")
        if p.why:
            out.append(f"- why: {p.why[0]}")
            out.extend(f"- why: {extra}" for extra in p.why[1:])
        if p.fix:
            out.append(f"- fix: {p.fix}")
        change = change_text(p.fix_change)
        if change:
            where = f" (`{p.config_where}`)" if p.config_where else ""
            out.append(f"- change: `{change}`{where}")
        elif p.config_where:
            out.append(f"- config: `{p.config_where}`")
        out.extend(f"- also: {note}" for note in p.also)
        out.append("")
    if not report.problems and report.files:
        out.append("No failure symptoms found in the log.")
        out.append("")
    if verbose:
        out.extend(_verbose(report))
    tl = timeline_summary(report.timeline)
    if tl:
        out.append(f"Timeline: {tl}.")
        out.append("")
    for note in report.notes:
        out.append(f"> note: {note}")
    return "\n".join(out).rstrip() + "\n"


def _verbose(report: Report) -> list[str]:
    """Every finding and every symptom (what ``--verbose`` adds to the text output)."""
    out: list[str] = []
    c = counts(report)
    if report.findings:
        out.append(f"### All findings ({c['error']} error(s), {c['warning']} warning(s), "
                   f"{c['info']} info)")
        out.append("")
        for f in report.findings:
            out.append(f"- **{f.severity}** `{f.rule}` {f.name}: {f.title}")
            if f.message:
                out.append(f"  - {f.message}")
            if f.config_path:
                out.append(f"  - config: `{config_where(f)}` `{f.config_path}`")
            if f.fix:
                out.append(f"  - fix: {f.fix}")
            if f.evidence:
                out.append("")
                out.append("  ```text")
                out.extend(f"  {ev_line(ev)}" for ev in f.evidence[:EVIDENCE_IN_TEXT])
                out.append("  ```")
        out.append("")
    if report.symptoms:
        out.append("### Symptoms")
        out.append("")
        out.append("| symptom | count | first | last | ranks | values |")
        out.append("| --- | ---: | --- | --- | --- | --- |")
        for s in report.symptoms:
            out.append(f"| {s.kind} | {s.count} | `{s.first.location}` | `{s.last.location}` | "
                       f"{ranks_text(s.ranks)} | {md_cell(symptom_values_summary(s))} |")
        out.append("")
        out.append("```text")
        for s in report.symptoms:
            out.append(f"# {s.kind}")
            out.extend(ev_line(ev) for ev in s.evidence[:EVIDENCE_IN_TEXT])
        out.append("```")
        out.append("")
    return out


__all__ = ["render_markdown"]
