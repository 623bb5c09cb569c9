"""Renderers: a Report in, text (rich), JSON or Markdown out. They never query the machine."""

from __future__ import annotations

import io
import json
import math
from typing import Any

from dsdoctor.model import Evidence, Report, Symptom, TimelinePoint, json_number

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
EVIDENCE_IN_TEXT = 3


def _clean(obj: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings, at any depth."""
    if isinstance(obj, float):
        return json_number(obj)
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def render_json(report: Report) -> str:
    return json.dumps(_clean(report.to_dict()), indent=2, ensure_ascii=False) + "\n"


# --- shared summaries --------------------------------------------------------------------------

def _fmt_num(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    if isinstance(v, str):
        return v
    return str(v)


def symptom_values_summary(s: Symptom) -> str:
    """Short human summary of extracted values ("attempted_scale 65536→1")."""
    parts = []
    for name, val in s.values.items():
        if isinstance(val, dict) and "min" in val:
            lo, hi, first, last = val["min"], val["max"], val["first"], val["last"]
            if lo == hi:
                parts.append(f"{name}={_fmt_num(lo)}")
            else:
                parts.append(f"{name} {_fmt_num(first)}→{_fmt_num(last)} "
                             f"(min {_fmt_num(lo)}, max {_fmt_num(hi)})")
        elif isinstance(val, list) and val:
            shown = ", ".join(val[:3]) + (", …" if len(val) > 3 else "")
            parts.append(f"{name}: {shown}")
    return "; ".join(parts)


def timeline_summary(points: tuple[TimelinePoint, ...]) -> str:
    if not points:
        return ""
    steps = [p.step for p in points if p.step is not None]
    losses = [p.loss for p in points if p.loss is not None]
    scales = [p.loss_scale for p in points if p.loss_scale is not None]
    skipped = [p.skipped for p in points if p.skipped is not None]
    parts = [f"{len(points)} points"]
    if steps:
        parts.append(f"steps {min(steps)}–{max(steps)}")
    if losses:
        parts.append(f"loss {_fmt_num(losses[0])} → {_fmt_num(losses[-1])}")
    if scales:
        parts.append(f"loss scale {_fmt_num(scales[0])} → {_fmt_num(scales[-1])}")
    if skipped:
        parts.append(f"skipped steps {max(skipped)}")
    return ", ".join(parts)


def _ev_line(ev: Evidence, name: str | None = None) -> str:
    rank = f" [rank {ev.rank}]" if ev.rank is not None else ""
    return f"{name or ev.file}:{ev.line}{rank}: {ev.text}"


def inputs_summary(report: Report) -> list[str]:
    """What the analysis used besides the log, one short line each (and what it lacked)."""
    inp = report.inputs or {}
    if "configs" not in inp:  # scan only (no rules engine)
        return []
    out = []
    ds = inp.get("deepspeed_config") or {}
    if inp.get("configs"):
        out.append("config: " + ", ".join(c["path"] for c in inp["configs"]))
    elif ds.get("source"):
        out.append(f"config: rebuilt from the log ({ds['source']})")
    out.append(f"environment: {inp['env']}" if inp.get("env")
               else "environment: not given (--env FILE from 'dsdoctor env --format json', "
                    "or --env local)")
    if inp.get("model"):
        out.append(f"model: {inp['model']}")
    if inp.get("scripts"):
        out.append("scripts: " + ", ".join(inp["scripts"]))
    ver = inp.get("ds_version") or {}
    if ver.get("release"):
        out.append(f"DeepSpeed release linted against: {ver['release']} (from {ver.get('source')})")
    ws = inp.get("world_size") or {}
    if ws.get("value"):
        out.append(f"world size: {ws['value']} (from {ws.get('source')})")
    return out


def _config_where(f) -> str:
    """``file:line`` of a finding's config key (``config`` when the file is not known)."""
    where = f.config_file or "config"
    return f"{where}:{f.config_line}" if f.config_line else where


def _counts(report: Report) -> dict[str, int]:
    c = {"error": 0, "warning": 0, "info": 0}
    for f in report.findings:
        c[f.severity] = c.get(f.severity, 0) + 1
    return c


def short_names(report: Report) -> dict[str, str]:
    """File -> the shortest unambiguous name (the base name when those are unique)."""
    import os  # noqa: PLC0415

    paths = [f.path for f in report.files]
    bases = [os.path.basename(p) for p in paths]
    if len(set(bases)) == len(bases):
        return dict(zip(paths, bases))
    return {p: p for p in paths}


# --- text (rich) -------------------------------------------------------------------------------

def render_text(report: Report, color: bool = True, width: int | None = None) -> str:
    # rich is imported here, not at module level: JSON and Markdown output do not need it
    from rich.console import Console  # noqa: PLC0415
    from rich.padding import Padding  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width or 110,
                      highlight=False, soft_wrap=False)
    names = short_names(report)

    def loc(ev: Evidence) -> str:
        return f"{names.get(ev.file, ev.file)}:{ev.line}"

    def evidence(ev: Evidence, indent: int) -> None:
        line = Text(" " * indent + "▸ ", style="dim")
        line.append(_ev_line(ev, names.get(ev.file)), style="dim")
        console.print(line, overflow="ellipsis", no_wrap=True)

    def para(text: Text | str, indent: int = 8) -> None:
        console.print(Padding(text if isinstance(text, Text) else Text(text), (0, 0, 0, indent),
                              expand=False))

    nlines = sum(f.lines for f in report.files)
    head = Text()
    head.append("dsdoctor analyze", style="bold")
    if report.files:
        shown = ", ".join(f.path for f in report.files[:3])
        more = f" and {len(report.files) - 3} more" if len(report.files) > 3 else ""
        head.append(f" — {shown}{more}: {nlines:,} lines")
    else:
        head.append(" — pre-flight check (no log)")
    console.print(head)
    for line in inputs_summary(report):
        console.print(Text(line, style="dim"))

    if report.findings:
        console.print()
        console.print(Text("Findings", style="bold underline"))
        for f in report.findings:
            line = Text()
            line.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            line.append(f"{f.rule} ", style="bold")
            line.append(f"{f.name}", style="magenta")
            line.append(f"  {f.title}")
            console.print(line)
            if f.message:
                para(f.message)
            if f.config_path:
                para(Text(f"config: {_config_where(f)} {f.config_path}", style="dim"))
            if f.fix:
                fix = Text("fix: ", style="bold green")
                fix.append(f.fix)
                para(fix)
            for ev in f.evidence[:EVIDENCE_IN_TEXT]:
                evidence(ev, 8)
    console.print()
    if report.symptoms:
        table = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("symptom")
        table.add_column("count", justify="right")
        table.add_column("first")
        table.add_column("last")
        table.add_column("ranks")
        for s in report.symptoms:
            table.add_row(s.kind, str(s.count), loc(s.first), loc(s.last), _ranks(s.ranks))
        console.print(Text("Symptoms", style="bold underline"))
        console.print(table)
        console.print()
        for s in report.symptoms:
            line = Text(f"{s.kind}", style="bold")
            summary = symptom_values_summary(s)
            if summary:
                line.append(f"  {summary}", style="")
            console.print(line)
            for ev in s.evidence[:EVIDENCE_IN_TEXT]:
                evidence(ev, 2)
    elif report.files:
        console.print(Text("No failure symptoms found in the log.", style="green"))
    tl = timeline_summary(report.timeline)
    if tl:
        console.print()
        console.print(Text(f"Timeline: {tl}"))
    if report.notes:
        console.print()
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    c = _counts(report)
    console.print()
    summary = Text()
    summary.append(f"{c['error']} error{'s' if c['error'] != 1 else ''}",
                   style="bold red" if c["error"] else "")
    summary.append(f", {c['warning']} warning{'s' if c['warning'] != 1 else ''}")
    summary.append(f", {c['info']} info; {len(report.symptoms)} symptom kind"
                   f"{'s' if len(report.symptoms) != 1 else ''}")
    console.print(summary)
    if report.findings:
        console.print(Text("Explain a rule: dsdoctor rules CODE", style="dim"))
    # rich pads wrapped paragraphs to their width; trailing blanks only get in the way of diffs
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    if len(ranks) > 6:
        return f"{','.join(map(str, ranks[:5]))},… ({len(ranks)})"
    return ",".join(map(str, ranks))


# --- markdown ----------------------------------------------------------------------------------

def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    out: list[str] = []
    c = _counts(report)
    nlines = sum(f.lines for f in report.files)
    out.append("## dsdoctor analysis")
    out.append("")
    if report.files:
        names = ", ".join(f"`{f.path}`" for f in report.files)
        out.append(f"{len(report.files)} log file(s) ({names}), {nlines:,} lines. "
                   f"**{c['error']} error(s), {c['warning']} warning(s), {c['info']} info.**")
    else:
        out.append(f"Pre-flight check (no log). **{c['error']} error(s), {c['warning']} "
                   f"warning(s), {c['info']} info.**")
    out.append("")
    inputs = inputs_summary(report)
    if inputs:
        out.append("Inputs: " + "; ".join(inputs) + ".")
        out.append("")
    if report.findings:
        out.append("### Findings")
        out.append("")
        for f in report.findings:
            out.append(f"- **{f.severity}** `{f.rule}` {f.name}: {f.title}")
            if f.message:
                out.append(f"  - {f.message}")
            if f.config_path:
                out.append(f"  - config: `{_config_where(f)}` `{f.config_path}`")
            if f.fix:
                out.append(f"  - fix: {f.fix}")
            if f.evidence:
                out.append("")
                out.append("  ```text")
                for ev in f.evidence[:EVIDENCE_IN_TEXT]:
                    out.append(f"  {_ev_line(ev)}")
                out.append("  ```")
        out.append("")
    if report.symptoms:
        out.append("### Symptoms")
        out.append("")
        out.append("| symptom | count | first | last | ranks | values |")
        out.append("| --- | ---: | --- | --- | --- | --- |")
        for s in report.symptoms:
            out.append(f"| {s.kind} | {s.count} | `{s.first.location}` | `{s.last.location}` | "
                       f"{_ranks(s.ranks)} | {_md_cell(symptom_values_summary(s))} |")
        out.append("")
        out.append("<details><summary>Evidence</summary>")
        out.append("")
        out.append("```text")
        for s in report.symptoms:
            out.append(f"# {s.kind}")
            for ev in s.evidence[:EVIDENCE_IN_TEXT]:
                out.append(_ev_line(ev))
        out.append("```")
        out.append("")
        out.append("</details>")
        out.append("")
    elif report.files:
        out.append("No failure symptoms found in the log.")
        out.append("")
    tl = timeline_summary(report.timeline)
    if tl:
        out.append(f"Timeline: {tl}.")
        out.append("")
    for note in report.notes:
        out.append(f"> note: {note}")
    return "\n".join(out).rstrip() + "\n"


def render(report: Report, fmt: str, color: bool = False) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "markdown":
        return render_markdown(report)
    return render_text(report, color=color)


