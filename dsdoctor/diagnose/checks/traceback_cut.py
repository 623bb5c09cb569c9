"""DS121: a traceback cut before its exception line (the paste, or the log, stops inside it).

The last line of a Python traceback names what the rank died on; a paste that stops in the
frames leaves only where it happened. Nothing is guessed then: the finding says the traceback
is incomplete and which lines to paste. A traceback counts as cut when, for its file and rank,
no exception line follows its last ``Traceback (most recent call last):`` line and nothing else
dsdoctor recognizes follows either (a later symptom, fact or progress line of that rank means
the log went on past it: its exception line is there, in a form the formats do not know).
It is reported only when nothing else in the log names what the run died on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.diagnose.verdict import FATAL_CAUSES
from dsdoctor.facts.context import Context
from dsdoctor.logs.aggregate import MAX_FACTS_PER_NAME
from dsdoctor.logs.tracebacks import TRACEBACK_LINE, traceback_only
from dsdoctor.model import Evidence, Finding

#: A traceback this many lines before the end of its log is not "cut by the paste": frames and
#: code lines of even deep tracebacks (DeepSpeed's ZeRO-3 hooks) stay under a few hundred.
MAX_TRACEBACK_LINES = 400
_TRACEBACK_FACTS = ("traceback-start", "traceback-frame", "traceback-end")

def _same_stream(ev: Evidence, file: str, rank: int | None) -> bool:
    """Whether ``ev`` was printed where the traceback was: same file, same rank (or either
    without a rank, e.g. a launcher's line after the rank's traceback)."""
    return ev.file == file and (rank is None or ev.rank is None or ev.rank == rank)


def _later_lines(ctx: Context, file: str, rank: int | None, after: int) -> bool:
    """Whether anything dsdoctor recognized was printed after line ``after`` of that stream."""
    for s in ctx.symptoms.values():
        # a frame of the same traceback is no line "after" it (python-exception's frame evidence)
        if any(_same_stream(ev, file, rank) and ev.line > after and not TRACEBACK_LINE.search(ev.text)
               for ev in (*s.evidence, s.last)):
            return True
    if any(f.name not in _TRACEBACK_FACTS and _same_stream(f.evidence, file, rank)
           and f.evidence.line > after for f in ctx.facts):
        return True
    return any(p.file == file and (rank is None or p.rank in (None, rank)) and p.line > after
               for p in ctx.timeline)


def cut_tracebacks(ctx: Context) -> list[Evidence]:
    """The ``Traceback`` lines (one per file and rank) whose traceback has no end in the log."""
    starts = [f for f in ctx.facts if f.name == "traceback-start"]
    ends = [f.evidence for f in ctx.facts if f.name == "traceback-end"]
    if not starts or len(starts) >= MAX_FACTS_PER_NAME or len(ends) >= MAX_FACTS_PER_NAME:
        return []  # capped: the last ones are not known
    last: dict[tuple[str, int | None], Evidence] = {}
    for f in starts:
        key = (f.evidence.file, f.evidence.rank)
        if key not in last or f.evidence.line > last[key].line:
            last[key] = f.evidence
    lines = {fs.path: fs.lines for fs in ctx.files}
    cut = []
    for (file, rank), start in sorted(last.items(), key=lambda kv: (kv[0][0], kv[1].line)):
        if any(ev.file == file and ev.rank == rank and ev.line > start.line for ev in ends):
            continue
        if lines.get(file, start.line) - start.line > MAX_TRACEBACK_LINES:
            continue
        if not _later_lines(ctx, file, rank, start.line):
            cut.append(start)
    return cut


def traceback_cut(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS121: say which traceback has no exception line and what to paste, when nothing else in
    the log says what the run died on (a failure the formats name, or another exception line:
    then the cut traceback is usually the launcher's or another rank's echo of it)."""
    exc = ctx.symptom("python-exception")
    if (exc is not None and not traceback_only(exc)) or any(
            ctx.has_symptom(k) for k, _ in FATAL_CAUSES):
        return
    cut = cut_tracebacks(ctx)
    if not cut:
        return
    first = cut[0]
    where = ", ".join(f"{PurePath(ev.file).name}:{ev.line}"
                      + (f" (rank {ev.rank})" if ev.rank is not None else "")
                      for ev in cut[:4])
    total = {fs.path: fs.lines for fs in ctx.files}.get(first.file)
    ends = f"the log ends at line {total}, inside it" if total else "the log ends inside it"
    many = len(cut) > 1
    yield finding(
        f"{'These tracebacks have' if many else 'The traceback at'} {where} "
        f"{'no' if many else 'has no'} exception line: {ends}. The last line of a traceback "
        "(`SomeError: message`) says what the rank died on; without it the frames only say "
        "where, so dsdoctor names no exception for it.",
        fix=(f"Paste the log from line {first.line} to the end of that traceback, up to and "
             "including its last line (the exception type and message)"
             + ("; for several ranks, each rank's own log (deepspeed --enable_each_rank_log DIR,"
                " torchrun --log-dir DIR --redirects 3)" if any(ev.rank is not None for ev in cut)
                else "") + "."),
        evidence=tuple(cut[:8]))
