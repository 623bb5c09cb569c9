"""Renderers: a Report in, text (rich), JSON or Markdown out. They never query the machine.

This module holds JSON and what the text (render/text.py) and Markdown (render/markdown.py)
renderers share. Renderers only render: the verdict and the grouping of findings into problems
are decided in diagnose/ before a report reaches them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dsdoctor.model import (
    Evidence,
    Problem,
    Report,
    Symptom,
    TimelinePoint,
    json_number,
)
from dsdoctor.model import change_text as change_text  # the renderers' name for it (re-export)

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


# Stands in for the timeline while the rest is indented (json.dumps escapes the NUL bytes, so no
# report text can collide with it).
_TIMELINE_SLOT = "\0timeline\0"


def render_json(report: Report) -> str:
    """The report as indented JSON, each timeline point on one line: a big log's 3,000 sampled
    points were 25,000 of its 25,400 lines, and indenting them ran the pure-Python encoder over
    all of them (70 ms of a 0.5 s analysis of 512 MiB); one compact line per point is the C
    encoder's, and reads as a table."""
    data = _clean(report.to_dict())
    points = data.get("timeline") or []
    if points:
        data["timeline"] = _TIMELINE_SLOT
    text = json.dumps(data, indent=2, ensure_ascii=False)
    if points:
        rows = ",\n    ".join(json.dumps(p, ensure_ascii=False, separators=(", ", ": "))
                             for p in points)
        text = text.replace(json.dumps(_TIMELINE_SLOT), "[\n    " + rows + "\n  ]", 1)
    return text + "\n"


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
    epochs = [p.epoch for p in points if p.epoch is not None]
    parts = [f"{len(points)} points"]
    # a range only when the points span one: the Trainer's dicts carry epochs, not steps, and
    # DeepSpeed's single step-0 line is no "steps 0–0"
    if len(set(steps)) > 1:
        parts.append(f"steps {min(steps)}–{max(steps)}")
    elif len(set(epochs)) > 1:
        parts.append(f"epochs {_fmt_num(min(epochs))}–{_fmt_num(max(epochs))}")
    elif steps:
        parts.append(f"step {steps[0]}")
    if losses:
        parts.append(f"loss {_fmt_num(losses[0])} → {_fmt_num(losses[-1])}")
    if scales:
        parts.append(f"loss scale {_fmt_num(scales[0])} → {_fmt_num(scales[-1])}")
    if skipped:
        parts.append(f"skipped steps {max(skipped)}")
    return ", ".join(parts)


def ev_line(ev: Evidence, name: str | None = None) -> str:
    """``train.log:246 [rank 0]: text``."""
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
               else "environment: not given (--env FILE from 'dsdoctor env', or --env local)")
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


def config_where(f) -> str:
    """``file:line`` of a finding's config key (``config`` when the file is not known)."""
    where = f.config_file or "config"
    return f"{where}:{f.config_line}" if f.config_line else where


def counts(report: Report) -> dict[str, int]:
    """Findings per severity."""
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


def problem_heading(i: int, total: int, p: Problem) -> str:
    """``problem 1 of 2 · error · loss-scale · DS102, DS103``."""
    rules = f" · {', '.join(p.rules)}" if p.rules else ""
    return f"problem {i} of {total} · {p.severity} · {p.cause}{rules}"


def verdict_line(report: Report) -> tuple[str, str]:
    """(fate in capitals, the rest of the verdict sentence) for the first line of the output."""
    v = report.verdict
    if v is None:
        return "UNKNOWN", "no verdict (the report was built without the diagnosis step)"
    rest = v.sentence.split(": ", 1)[1] if ": " in v.sentence else v.sentence
    if v.preflight_errors is not None:  # no run to judge: the check's own result leads
        rest = rest.removeprefix("pre-flight check (no log): ")
        return ("PRE-FLIGHT FAILED" if v.preflight_errors else "PRE-FLIGHT OK"), rest
    return v.fate.upper(), rest


def retry_line(report: Report) -> str | None:
    """``no — <why>`` for a run that failed, hung, was killed or stopped (``unknown (a resume
    from the checkpoint of step 5 loses 3 steps) — <why>`` where a retry may help and the log
    shows a save); None for the others (a healthy run has nothing to retry)."""
    v = report.verdict
    if v is None or not v.is_error:
        return None
    lost = ""
    if v.steps_lost is not None and v.retriable != "no":
        n = f"{v.steps_lost} step{'s' if v.steps_lost != 1 else ''}" if v.steps_lost else "no step"
        lost = f" (a resume from the checkpoint of step {v.checkpoint_step} loses {n})"
    return f"{v.retriable}{lost} — {v.retriable_reason}"  # the cost first: text cuts the why


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 and word != 'info' else ''}"


def summary_counts(report: Report) -> str:
    """``1 problem (1 error) from 2 findings and 5 symptom kinds``: severities are the problems'
    only. A problem takes the worst of its findings and is an error when it decided a failed
    verdict (a warning rule's timeout that hung the run), so the findings' own severities would
    contradict the problems shown; ``--verbose`` and the JSON list them."""
    c: dict[str, int] = {}
    for p in report.problems:
        c[p.severity] = c.get(p.severity, 0) + 1
    parts = [_plural(c[sev], sev) for sev in ("error", "warning", "info") if c.get(sev)]
    by_severity = f" ({', '.join(parts)})" if parts else ""
    return (f"{_plural(len(report.problems), 'problem')}{by_severity} from "
            f"{_plural(len(report.findings), 'finding')} and "
            f"{_plural(len(report.symptoms), 'symptom kind')}")


def ranks_text(ranks: tuple[int, ...]) -> str:
    """``0,1`` or ``0,1,2,3,4,… (8)`` or ``-``."""
    if not ranks:
        return "-"
    if len(ranks) > 6:
        return f"{','.join(map(str, ranks[:5]))},… ({len(ranks)})"
    return ",".join(map(str, ranks))


def render_text(report: Report, color: bool = True, width: int | None = None,
                verbose: bool = False) -> str:
    from dsdoctor.render import text  # noqa: PLC0415 - rich is imported only for text output

    return text.render_text(report, color=color, width=width, verbose=verbose)


def render_markdown(report: Report, verbose: bool = False) -> str:
    from dsdoctor.render import markdown  # noqa: PLC0415

    return markdown.render_markdown(report, verbose=verbose)


def render_jsonl(report: Report, **extra: Any) -> str:
    """The report as one line of JSON (``--format jsonl``, triage's records): ``extra`` keys
    (``input``, ``job``) first, then the same keys as :func:`render_json`."""
    data = {**extra, **_clean(report.to_dict())}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


def render(report: Report, fmt: str, color: bool = False, verbose: bool = False,
           width: int | None = None) -> str:
    """The report in ``fmt`` (text, json, markdown); JSON always holds every detail; ``width``:
    the text's columns (default: render.text.WIDTH)."""
    if fmt == "json":
        return render_json(report)
    if fmt == "jsonl":
        return render_jsonl(report)
    if fmt == "markdown":
        return render_markdown(report, verbose=verbose)
    return render_text(report, color=color, verbose=verbose, width=width)


