"""One job's outcome as triage tells and keeps it: the verdict and its deciding cause."""

from __future__ import annotations

from dataclasses import dataclass

from dsdoctor.model import Report


@dataclass(frozen=True)
class Outcome:
    """What triage keeps of one job's analysis (a row of the table and of the history)."""

    job: str
    where: str
    fate: str  # a verdict fate, or "error" when the job's files could not be analyzed
    cause: str = ""
    rule: str = ""
    retriable: str = "unknown"
    fingerprint: str = ""
    steps_lost: int | None = None
    sentence: str = ""
    exit_code: int = 0

    @classmethod
    def of(cls, job: str, where: str, report: Report, exit_code: int) -> Outcome:
        """The verdict and the problem that decided it (the first problem), when the run failed
        or something is wrong; a run with no problem has no cause."""
        v = report.verdict
        first = report.problems[0] if report.problems else None
        return cls(job=job, where=where, fate=v.fate if v is not None else "unknown",
                   cause=first.cause if first is not None else "",
                   rule=first.rules[0] if first is not None and first.rules else "",
                   retriable=(v.retriable or "unknown") if v is not None else "unknown",
                   fingerprint=first.fingerprint if first is not None else "",
                   steps_lost=v.steps_lost if v is not None else None,
                   sentence=v.sentence if v is not None else "", exit_code=exit_code)

    @classmethod
    def failed_to_read(cls, job: str, where: str, message: str) -> Outcome:
        return cls(job=job, where=where, fate="error", sentence=message, exit_code=2)


__all__ = ["Outcome"]
