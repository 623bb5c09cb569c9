"""A symptom told by fact lines alone: the shape that ``teardown.py`` (a launcher ending its
ranks) and ``timeouts.py`` (a timeout's location line) give the lines they read when no pattern
told the symptom itself."""

from __future__ import annotations

from collections.abc import Sequence

from dsdoctor.model import Fact, Symptom

MAX_EVIDENCE = 8


def symptom_from_facts(kind: str, fact: str, facts: Sequence[Fact]) -> Symptom | None:
    """A ``kind`` symptom whose evidence is the lines of every ``fact``, in file order; None
    when the log has no such fact."""
    evidence = sorted((f.evidence for f in facts if f.name == fact),
                      key=lambda e: (e.file, e.line))
    if not evidence:
        return None
    return Symptom(
        kind=kind, count=len(evidence), evidence=tuple(evidence[:MAX_EVIDENCE]),
        first=evidence[0], last=evidence[-1],
        ranks=tuple(sorted({e.rank for e in evidence if e.rank is not None})),
        files=tuple(dict.fromkeys(e.file for e in evidence)),
        patterns={fact: len(evidence)}, values={})


__all__ = ["MAX_EVIDENCE", "symptom_from_facts"]
