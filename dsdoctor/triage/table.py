"""Triage's text: a table of jobs, then the causes counted across them; and the history's summary.
Plain text (one line per row), for terminals, logs and mail alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from dsdoctor.triage.history import Summary
from dsdoctor.triage.outcome import Outcome

_COLUMNS = ("JOB", "VERDICT", "CAUSE", "RETRY", "FINGERPRINT", "LOST")


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _cause(o: Outcome) -> str:
    if o.fate == "error":
        return "unreadable"
    return f"{o.cause} ({o.rule})" if o.rule else (o.cause or "-")


def jobs_table(outcomes: Sequence[Outcome], width: int = 60) -> str:
    """One row per job, then the causes counted over the jobs (most jobs first)."""
    rows = [list(_COLUMNS)]
    for o in outcomes:
        lost = "" if o.steps_lost is None else str(o.steps_lost)
        rows.append([o.job[:width], o.fate, _cause(o), o.retriable if o.fate != "error" else "-",
                     o.fingerprint or "-", lost])
    lines = _table(rows)
    counted = Counter((_cause(o), o.fingerprint, o.retriable) for o in outcomes
                      if o.fingerprint or o.fate == "error")
    fates = Counter(o.fate for o in outcomes)
    lines += ["", f"{len(outcomes)} job(s): " + ", ".join(f"{n} {f}" for f, n in fates.most_common())]
    if counted:
        lines += ["", "causes across jobs:"]
        crows = [["JOBS", "CAUSE", "FINGERPRINT", "RETRY"]]
        crows += [[str(n), cause, fp or "-", retry] for (cause, fp, retry), n in counted.most_common()]
        lines += ["  " + line for line in _table(crows)]
    errors = [o for o in outcomes if o.fate == "error"]
    for o in errors:
        lines.append(f"{o.job}: not analyzed: {o.sentence}")
    return "\n".join(lines) + "\n"


def summary_text(s: Summary, db: str, since: str) -> str:
    lines = [f"{db}: {s.jobs} job(s) in the last {since}"
             + (": " + ", ".join(f"{n} {f}" for f, n in s.fates) if s.fates else "")]
    if s.causes:
        rows = [["JOBS", "CAUSE", "FINGERPRINT", "RETRY", "EXAMPLE"]]
        for c in s.causes:
            cause = f"{c.cause} ({c.rule})" if c.rule else c.cause
            rows.append([str(c.jobs), cause, c.fingerprint, c.retriable, c.example[:90]])
        lines += ["", "causes:"] + ["  " + line for line in _table(rows)]
    return "\n".join(lines) + "\n"


__all__ = ["jobs_table", "summary_text"]
