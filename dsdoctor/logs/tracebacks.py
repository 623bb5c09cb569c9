"""A traceback says an exception was raised, even when no line of the log names the exception.

The paste stops in the frames, a killed rank never printed its last line, a bare ``raise`` printed
only ``AssertionError``: the python-exception patterns (an exception line with its message) see
nothing, but the traceback's first line, its frames and its last line (facts of
formats/python-traceback.yaml) are there. When no python-exception symptom exists, those facts
become one, counted once per traceback (its header, else its frames), so that a failure is never
silence (issue 19). Tracebacks that all end in an interrupt (Ctrl-C's KeyboardInterrupt,
SystemExit) are the stop's, not an exception: run-stopped tells them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from dsdoctor.model import Fact, Symptom

#: The facts that mark a traceback, and the pattern ids a derived symptom names for them.
TRACEBACK_MARKS = frozenset({"traceback-start", "traceback-frame"})
INTERRUPTS = ("KeyboardInterrupt", "SystemExit")
MAX_EVIDENCE = 8
#: What those marks' lines look like (evidence carries no pattern id): a header, a frame.
TRACEBACK_LINE = re.compile(r'Traceback \(most recent call last\)|^\s*File "[^"]+", line \d+|^│ ')


#: Frames of a launcher's own code: torchrun's ``ChildFailedError`` traceback, DeepSpeed's runner
#: and Accelerate's CLI re-raising a rank's exit. A traceback of these frames alone is the
#: launcher reporting a rank's end (its exit line says how), not an exception of the run.
LAUNCHER_FRAME = re.compile(
    r'/bin/(?:torchrun|deepspeed|accelerate)", line \d+|torch/distributed/(?:run\.py|launcher/api\.py|'
    r'elastic/)|deepspeed/launcher/runner\.py|accelerate/commands/(?:launch|accelerate_cli)\.py')


def _launcher_only(frames: Sequence[Fact]) -> bool:
    """True when every frame the log shows is a launcher's (see LAUNCHER_FRAME)."""
    return bool(frames) and all(LAUNCHER_FRAME.search(f.evidence.text) for f in frames)


def is_interrupt(exc_type: object) -> bool:
    """Whether an exception type (``KeyboardInterrupt``, ``builtins.SystemExit``) is an interrupt."""
    return str(exc_type).rsplit(".", 1)[-1] in INTERRUPTS


def traceback_only(exc: Symptom) -> bool:
    """True when a python-exception symptom rests on traceback marks alone: no line of the log
    names the exception (every traceback of it is cut)."""
    return set(exc.patterns) <= TRACEBACK_MARKS


def with_raised_exceptions(symptoms: Mapping[str, Symptom], facts: Sequence[Fact]
                           ) -> dict[str, Symptom]:
    """``symptoms``, plus a python-exception derived from the tracebacks when none is there."""
    out = dict(symptoms)
    if "python-exception" in out:
        return out
    ends = [f for f in facts if f.name == "traceback-end"]
    types = [str(f.values.get("exc_type")) for f in ends if f.values.get("exc_type")]
    if types and all(is_interrupt(t) for t in types):
        return out
    starts = [f for f in facts if f.name == "traceback-start"]
    frames = [f for f in facts if f.name == "traceback-frame"]
    marks = starts or frames
    if not marks and not types:
        return out
    if not types and _launcher_only(frames):
        return out  # the launcher's traceback, cut before its ChildFailedError: not the run's
    named = [t for t in types if not is_interrupt(t)]
    evidence = [f.evidence for f in [*marks, *ends]]
    evidence.sort(key=lambda e: (e.file, e.line))
    chosen = evidence[:1] + evidence[-1:] if len(evidence) > 1 else evidence
    for ev in evidence:  # one per rank after the first and the last
        if len(chosen) >= MAX_EVIDENCE:
            break
        if ev not in chosen and ev.rank not in {c.rank for c in chosen}:
            chosen.append(ev)
    patterns = {}
    if marks:
        patterns[marks[0].name] = len(marks)
    if named:
        patterns["traceback-end"] = len(named)
    out["python-exception"] = Symptom(
        kind="python-exception", count=max(len(starts), len(named), 1),
        evidence=tuple(chosen), first=evidence[0], last=evidence[-1],
        ranks=tuple(sorted({e.rank for e in evidence if e.rank is not None})),
        files=tuple(dict.fromkeys(e.file for e in evidence)),
        patterns=patterns,
        values={"exc_type": list(dict.fromkeys(named))[:10]} if named else {})
    return out


__all__ = ["INTERRUPTS", "TRACEBACK_LINE", "TRACEBACK_MARKS", "is_interrupt", "traceback_only",
           "with_raised_exceptions"]
