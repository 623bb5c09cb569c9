"""Scan one big log on several cores: byte ranges cut at line starts, scanned in forked worker
processes, merged in file order into exactly what one process would have found.

Each worker runs the ordinary scanner over its range (reading LOOKAHEAD_BYTES past its end for
hard-wrapped messages) with recorders instead of aggregators: the symptoms it aggregated (bounded),
the timeline points and facts it saw, in order. The parent shifts the workers' line numbers by the
lines of the ranges before them and folds them in order. Only regular, uncompressed UTF-8 files
above a size threshold take this path, and only where ``fork`` is available (the workers inherit
the compiled engines and the open file; nothing is re-imported or re-opened by path).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from dsdoctor.logs.aggregate import (
    MAX_FACTS_PER_NAME,
    MAX_RANK_EVIDENCE,
    MAX_TEXT_VALUES,
    SymptomAggregator,
    _KindState,
)
from dsdoctor.logs.jobs import PositionedReader
from dsdoctor.logs.rankfacts import RankCollector
from dsdoctor.model import Evidence

PROBE_BYTES = 1 << 20  # how far past a split point a line start is looked for
PREVIOUS_LINE_BYTES = 256 << 10  # how far before a range the previous line start is looked for


def split_points(fd: int, size: int, parts: int) -> list[int]:
    """Range starts: 0 and the first line start after each ``size * k / parts``."""
    starts = [0]
    for k in range(1, parts):
        probe = size * k // parts
        if probe <= starts[-1]:
            continue
        data = os.pread(fd, PROBE_BYTES, probe - 1)
        nl = data.find(b"\n")
        if nl == -1:
            continue  # one giant line: fewer ranges
        start = probe + nl
        if start < size:
            starts.append(start)
    return starts


def first_mark(fd: int, start: int, stride: int) -> int:
    """The first timeline mark whose window starts at or after ``start``: marks up to the start
    of the line before ``start`` belong to the range before."""
    if start == 0:
        return 0
    lo = max(0, start - PREVIOUS_LINE_BYTES)
    before = os.pread(fd, start - 1 - lo, lo)  # up to the newline that ends the previous line
    prev_line = lo + before.rfind(b"\n") + 1 if b"\n" in before else lo
    return (prev_line // stride + 1) * stride


# ------------------------------------------------------------------------- worker side

class TimelineRecorder:
    """Stands in for the Timeline in a worker: keeps every point, in order (big files sample
    the timeline, so there are at most a few thousand)."""

    def __init__(self) -> None:
        self.adds: list[tuple[str, Evidence, dict]] = []

    def add(self, source: str, ev: Evidence, values: dict) -> None:
        self.adds.append((source, ev, values))


class FactRecorder:
    """Stands in for the FactCollector: the first MAX_FACTS_PER_NAME facts of each name, in
    order (the parent keeps at most that many, the earliest)."""

    def __init__(self) -> None:
        self.adds: list[tuple[str, Evidence, dict]] = []
        self._counts: dict[str, int] = {}

    def add(self, name: str, ev: Evidence, values: dict) -> None:
        n = self._counts.get(name, 0)
        if n < MAX_FACTS_PER_NAME:
            self._counts[name] = n + 1
            self.adds.append((name, ev, dict(values)))


class ExtremesAggregator(SymptomAggregator):
    """A SymptomAggregator that also keeps each number's min and max over its non-NaN values:
    a range whose first value is NaN keeps max at NaN, yet the same values after another
    range's would raise its max."""

    def __init__(self) -> None:
        super().__init__()
        self.extremes: dict[tuple[str, str], list[Any]] = {}

    def add_hit(self, kind: str, pattern_id: str, strength: int, file: str, line: int,
                text: str, rank: int | None, values: dict[str, Any]) -> None:
        super().add_hit(kind, pattern_id, strength, file, line, text, rank, values)
        for name, val in values.items():
            if name == "rank" or isinstance(val, bool) or not isinstance(val, (int, float)):
                continue
            if isinstance(val, float) and math.isnan(val):
                continue
            ext = self.extremes.get((kind, name))
            if ext is None:
                self.extremes[(kind, name)] = [val, val]
            else:
                ext[0] = min(ext[0], val)
                ext[1] = max(ext[1], val)


@dataclasses.dataclass
class RangeResult:
    newlines: int
    scanned: int
    last_byte: bytes
    states: dict[str, _KindState]
    seq: int
    extremes: dict[tuple[str, str], list[Any]]
    timeline: list[tuple[str, Evidence, dict]]
    facts: list[tuple[str, Evidence, dict]]
    notes: list[str]
    huge_skipped: dict[tuple[str, int, str], int]  # hits past the per-line cap (scan.py), by line
    ranks: RankCollector  # what each rank's lines in this range said last


_SCANNER: Any = None  # the parent's Scanner, inherited by the forked workers
_PROGRESS: list[Any] = []  # one shared counter per worker


def _scan_one(job: tuple[int, str, int, int, int, int, int]) -> RangeResult:
    k, name, fd, size, start, stop, mark = job
    scanner = _SCANNER
    scanner.symptoms = ExtremesAggregator()
    scanner.timeline = TimelineRecorder()
    scanner.facts = FactRecorder()
    scanner.ranks = RankCollector()
    scanner.notes = []
    scanner._huge_line, scanner._huge_matched, scanner._huge_skipped = None, {}, {}
    counter = _PROGRESS[k]

    def progress(_name: str, done: int, _size: int | None) -> None:
        counter.value = done

    scanner.on_progress = progress
    newlines, scanned, last = scanner._scan_range(name, PositionedReader(fd, start), size, False,
                                                  None, start=start, stop=stop, mark=mark)
    agg = scanner.symptoms
    agg.settle()
    return RangeResult(newlines, scanned, last, agg._state, agg._seq, agg.extremes,
                       scanner.timeline.adds, scanner.facts.adds, scanner.notes,
                       scanner._huge_skipped, scanner.ranks)


# ------------------------------------------------------------------------- parent side

def scan_parallel(scanner: Any, name: str, fd: int, size: int, jobs: int, stride: int,
                  on_progress: Callable[[str, int, int | None], None] | None
                  ) -> tuple[int, int, bytes] | None:
    """Scan the regular file open at ``fd`` with ``jobs`` workers into ``scanner``'s aggregators.
    Returns (newlines, bytes, last byte) like Scanner._scan_range, or None when the file could
    not be split (one giant line): the caller scans it in one process."""
    global _SCANNER
    starts = split_points(fd, size, jobs)
    if len(starts) < 2:
        return None
    stops = starts[1:] + [size]
    import multiprocessing  # noqa: PLC0415 - only big files need it (it imports socket, pickle)

    ctx = multiprocessing.get_context("fork")
    _PROGRESS[:] = [ctx.Value("q", 0, lock=False) for _ in starts]
    job_list = [(k, name, fd, size, a, b, first_mark(fd, a, stride))
                for k, (a, b) in enumerate(zip(starts, stops))]
    scanner._engine(False)  # compiled (or loaded) once, here, and inherited by every worker
    scanner.engine_timeline  # noqa: B018 - the same for the timeline windows' engine
    saved = (scanner.symptoms, scanner.timeline, scanner.facts, scanner.notes,
             scanner.on_progress, scanner.ranks)
    _SCANNER = scanner
    try:
        with ctx.Pool(len(job_list)) as pool:
            pending = pool.map_async(_scan_one, job_list, chunksize=1)
            while not pending.ready():
                pending.wait(0.25)
                if on_progress is not None:
                    on_progress(name, sum(c.value for c in _PROGRESS), size)
            parts = pending.get()
    finally:
        _SCANNER = None
        (scanner.symptoms, scanner.timeline, scanner.facts, scanner.notes,
         scanner.on_progress, scanner.ranks) = saved
    shift = 0
    for part in parts:
        merge_symptoms(scanner.symptoms, part, shift)
        for source, ev, values in part.timeline:
            scanner.timeline.add(source, _moved(ev, shift), values)
        for fact, ev, values in part.facts:
            scanner.facts.add(fact, _moved(ev, shift), values)
        scanner.notes.extend(part.notes)
        scanner.ranks.merge(part.ranks, shift)
        for (fname, line, pid), skipped in part.huge_skipped.items():  # noted by _summarize
            scanner._huge_skipped[(fname, line + shift, pid)] = skipped
        shift += part.newlines
    if on_progress is not None:
        on_progress(name, size, size)
    return shift, sum(p.scanned for p in parts), parts[-1].last_byte


def _moved(ev: Evidence | None, shift: int) -> Any:
    return ev if ev is None or not shift else dataclasses.replace(ev, line=ev.line + shift)


def merge_symptoms(agg: SymptomAggregator, part: RangeResult, shift: int) -> None:
    """Fold a later range's symptoms into ``agg`` as if its events had followed in one process
    (see SymptomAggregator.add: first/last, the first three, the three strongest with the
    earliest winning ties, the first evidence of each rank, value statistics)."""
    agg.settle()  # a last line kept as a tuple is older than the part's
    seq0 = agg._seq
    for kind, b in part.states.items():
        strongest = [(s, q - seq0, _moved(ev, shift)) for s, q, ev in b.strongest]
        a = agg._state.get(kind)
        if a is None:
            a = agg._state[kind] = _KindState(kind)
        a.count += b.count
        if a.first is None:
            a.first = _moved(b.first, shift)
        a.last = _moved(b.last, shift)
        for ev in b.firsts[:max(0, 3 - len(a.firsts))]:
            a.firsts.append(_moved(ev, shift))
        a.strongest = sorted(a.strongest + strongest, key=lambda t: (t[0], t[1]),
                             reverse=True)[:3]
        for rank, ev in b.by_rank.items():
            if rank not in a.by_rank and len(a.by_rank) < MAX_RANK_EVIDENCE:
                a.by_rank[rank] = _moved(ev, shift)
        a.ranks |= b.ranks
        for f in b.files:
            a.files.setdefault(f, None)
        for pid, n in b.patterns.items():
            a.patterns[pid] = a.patterns.get(pid, 0) + n
        for name, vals in b.texts.items():
            lst = a.texts.setdefault(name, [])
            for v in vals:
                if v not in lst and len(lst) < MAX_TEXT_VALUES:
                    lst.append(v)
        for name, stats in b.numbers.items():
            mine = a.numbers.get(name)
            if mine is None:
                a.numbers[name] = dict(stats)
                continue
            mine["last"] = stats["last"]
            mine["count"] += stats["count"]
            ext = part.extremes.get((kind, name))
            if ext is not None:  # the same updates as add() for each non-NaN value
                lo, hi = ext
                if mine["min"] != mine["min"] or lo < mine["min"]:
                    mine["min"] = lo
                if mine["max"] < hi:
                    mine["max"] = hi
    agg._seq = seq0 + part.seq


