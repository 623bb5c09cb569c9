"""Fold a stream of events into symptoms, a timeline and facts, in constant memory.

A log can hold a million OVERFLOW lines: we keep counts, value statistics and a handful of
evidence lines (first, last, strongest, first per rank), never the events themselves. The
evidence text is cut and checked for half secrets (``evidence_text``) only for the lines that are
kept, at ``build()``: a million events cost a million counts, not a million cuts (issue 14). An
:class:`Evidence` is made only for a line that is kept (``add_hit``; the last line is kept as a
plain tuple until ``settle()``): a million of them cost 0.85 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsdoctor.model import Evidence, Fact, Symptom, TimelinePoint, json_number
from dsdoctor.redact.redactor import cut_without_half_secret

MAX_EVIDENCE = 8
MAX_RANK_EVIDENCE = 8
MAX_TEXT_VALUES = 10
MAX_TIMELINE_POINTS = 4000
MAX_FACTS_PER_NAME = 400

EVIDENCE_CHARS = 500  # an evidence line longer than this is cut

TIMELINE_FIELDS = ("step", "loss", "grad_norm", "loss_scale", "skipped", "lr", "throughput",
                   "epoch")


#: Separates a symptom kind from the pattern ids that veto it in a tally key (see tally_kind).
_UNLESS = "?unless="


def tally_kind(kind: str, unless: tuple[str, ...] = ()) -> str:
    """The aggregator's key for a pattern's events: ``kind``, or, for a pattern whose events count
    only when no event of the patterns ``unless`` was seen, ``kind`` marked with them.

    One occurrence can be printed by several releases' lines: DeepSpeed's non-ZeRO fp16 optimizer
    printed "Overflow detected. Skipping step" on rank 0 next to "Reducing dynamic loss scale" on
    every rank up to 0.19.7, and only the latter from 0.19.8 on. The marked events are kept apart
    and folded into ``kind`` at :meth:`SymptomAggregator.build` only when the whole analysis has
    none of the vetoing patterns' events (which the scan cannot know until its end).
    """
    return f"{kind}{_UNLESS}{','.join(unless)}" if unless else kind


def _split_tally(key: str) -> tuple[str, frozenset[str]]:
    kind, _, unless = key.partition(_UNLESS)
    return kind, frozenset(unless.split(",")) if unless else frozenset()


def evidence_text(text: str) -> str:
    """The evidence text of a segment, cut to EVIDENCE_CHARS. A secret across the cut is dropped,
    not kept in half (half a token is too short for any secret format to recognise later; the
    rest of the line is redacted with the report). Bounded work per call."""
    return cut_without_half_secret(text.strip(), EVIDENCE_CHARS)


def finished(ev: Evidence) -> Evidence:
    """``ev`` with its text cut as evidence (see :func:`evidence_text`)."""
    text = evidence_text(ev.text)
    return ev if text == ev.text else Evidence(file=ev.file, line=ev.line, text=text, rank=ev.rank)


@dataclass
class _KindState:
    kind: str
    count: int = 0
    first: Evidence | None = None
    last: Evidence | None = None  # set from last_raw by SymptomAggregator.settle()
    last_raw: tuple[str, int, str, int | None] | None = None  # (file, line, text, rank)
    firsts: list[Evidence] = field(default_factory=list)
    strongest: list[tuple[int, int, Evidence]] = field(default_factory=list)
    by_rank: dict[int, Evidence] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    files: dict[str, None] = field(default_factory=dict)
    patterns: dict[str, int] = field(default_factory=dict)
    numbers: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)


class SymptomAggregator:
    """Events in, :class:`Symptom` per kind out.

    ``add`` takes the evidence with the segment's whole text (never copied, only referenced);
    ``build`` cuts the few kept ones with :func:`finished`.
    """

    def __init__(self) -> None:
        self._state: dict[str, _KindState] = {}
        self._seq = 0

    def add(self, kind: str, pattern_id: str, strength: int, ev: Evidence,
            values: dict[str, Any]) -> None:
        self.add_hit(kind, pattern_id, strength, ev.file, ev.line, ev.text, ev.rank, values)

    def add_hit(self, kind: str, pattern_id: str, strength: int, file: str, line: int,
                text: str, rank: int | None, values: dict[str, Any]) -> None:
        """One event; its Evidence is made only if it is kept (first, by rank, strongest)."""
        st = self._state.get(kind)
        if st is None:
            st = self._state[kind] = _KindState(kind)
        self._seq += 1
        st.count += 1
        ev: Evidence | None = None
        if st.first is None:
            ev = st.first = Evidence(file, line, text, rank)
        st.last_raw = (file, line, text, rank)
        if file not in st.files:
            st.files[file] = None
        st.patterns[pattern_id] = st.patterns.get(pattern_id, 0) + 1
        if rank is not None:
            st.ranks.add(rank)
            if rank not in st.by_rank and len(st.by_rank) < MAX_RANK_EVIDENCE:
                ev = st.by_rank[rank] = ev or Evidence(file, line, text, rank)
        if len(st.firsts) < 3:
            ev = ev or Evidence(file, line, text, rank)
            st.firsts.append(ev)
        # keep the 3 strongest (earliest wins ties)
        strongest = st.strongest
        if len(strongest) < 3:
            strongest.append((strength, -self._seq, ev or Evidence(file, line, text, rank)))
            strongest.sort(key=lambda t: (t[0], t[1]), reverse=True)
        elif strength > strongest[-1][0]:
            strongest[-1] = (strength, -self._seq, ev or Evidence(file, line, text, rank))
            strongest.sort(key=lambda t: (t[0], t[1]), reverse=True)
        numbers = st.numbers
        for name, val in values.items():
            cls = type(val)
            if cls is not int and cls is not float:  # bool and str: distinct texts, a few
                if name == "rank":
                    continue
                lst = st.texts.setdefault(name, [])
                sval = str(val)
                if len(lst) < MAX_TEXT_VALUES and sval not in lst:  # a full list: no search
                    lst.append(sval)
                continue
            if name == "rank":
                continue
            stats = numbers.get(name)
            if stats is None:
                numbers[name] = {"first": val, "last": val, "min": val, "max": val, "count": 1}
                continue
            stats["last"] = val
            stats["count"] += 1
            if val == val:  # not NaN; a NaN min or max (the first value) gives way to a number
                mn = stats["min"]
                if val < mn or mn != mn:
                    stats["min"] = val
                mx = stats["max"]
                if mx < val or mx != mx:
                    stats["max"] = val

    def settle(self) -> None:
        """Make the Evidence of each kind's last line (kept as a tuple while adding)."""
        for st in self._state.values():
            if st.last_raw is not None:
                st.last = Evidence(*st.last_raw)
                st.last_raw = None

    def build(self) -> dict[str, Symptom]:
        self.settle()
        out: dict[str, Symptom] = {}
        done: dict[int, Evidence] = {}

        def fin(ev: Evidence) -> Evidence:
            got = done.get(id(ev))
            if got is None:
                got = done[id(ev)] = finished(ev)
            return got

        for kind, st in self._state.items():
            if _UNLESS in kind:
                continue  # folded below, once every plain kind is known
            out[kind] = self._symptom(kind, st, fin)
        for key, st in self._state.items():
            kind, unless = _split_tally(key)
            if not unless:
                continue
            plain = self._state.get(kind)
            if plain is not None and unless & plain.patterns.keys():
                continue  # the same occurrences were counted from the vetoing patterns' lines
            mine = self._symptom(kind, st, fin)
            out[kind] = mine if kind not in out else combined(out[kind], mine)
        return out

    @staticmethod
    def _symptom(kind: str, st: _KindState, fin: Any) -> Symptom:
        """One kind's state as its Symptom (evidence cut by ``fin``)."""
        assert st.first is not None and st.last is not None
        chosen: list[Evidence] = []

        def take(ev: Evidence, chosen: list[Evidence] = chosen) -> None:
            ev = fin(ev)
            if ev not in chosen and len(chosen) < MAX_EVIDENCE:
                chosen.append(ev)

        for _, _, ev in st.strongest:
            take(ev)
        take(st.first)
        for ev in st.firsts:
            take(ev)
        take(st.last)
        for ev in st.by_rank.values():
            take(ev)
        values: dict[str, Any] = {
            k: {kk: json_number(vv) for kk, vv in v.items()} for k, v in st.numbers.items()
        }
        values.update(st.texts)
        return Symptom(
            kind=kind,
            count=st.count,
            evidence=tuple(chosen),
            first=fin(st.first),
            last=fin(st.last),
            ranks=tuple(sorted(st.ranks)),
            files=tuple(st.files),
            patterns=dict(st.patterns),
            values=values,
        )


class Timeline:
    """Progress points, decimated (keep every 2nd, then every 4th, ...) beyond a cap."""

    def __init__(self, cap: int = MAX_TIMELINE_POINTS) -> None:
        self._points: list[TimelinePoint] = []
        self._cap = cap
        self._stride = 1
        self._seen = 0

    def add(self, source: str, ev: Evidence, values: dict[str, Any]) -> None:
        self._seen += 1
        if (self._seen - 1) % self._stride:
            return
        kw = {k: values[k] for k in TIMELINE_FIELDS if k in values}
        if "step" in kw:
            try:
                kw["step"] = int(kw["step"])
            except (TypeError, ValueError):
                kw.pop("step")
        for k in ("loss", "grad_norm", "loss_scale", "lr", "throughput", "epoch"):
            if k in kw and not isinstance(kw[k], (int, float)):
                kw.pop(k)
        if "skipped" in kw and not isinstance(kw["skipped"], int):
            kw.pop("skipped")
        if not kw:
            return
        self._points.append(TimelinePoint(file=ev.file, line=ev.line, source=source, rank=ev.rank,
                                          **kw))
        if len(self._points) >= self._cap:
            self._points = self._points[::2]
            self._stride *= 2

    def points(self) -> list[TimelinePoint]:
        return list(self._points)


class FactCollector:
    """Facts the log states, the first few hundred of each name."""

    def __init__(self) -> None:
        self._facts: list[Fact] = []
        self._counts: dict[str, int] = {}

    def add(self, name: str, ev: Evidence, values: dict[str, Any]) -> None:
        n = self._counts.get(name, 0)
        if n >= MAX_FACTS_PER_NAME:
            return
        self._counts[name] = n + 1
        self._facts.append(Fact(name=name, values=dict(values), evidence=finished(ev)))

    def facts(self) -> list[Fact]:
        return list(self._facts)


def combined(a: Symptom, b: Symptom) -> Symptom:
    """One kind's two symptoms (of different patterns, their lines interleaved) as one: counts
    added, first and last the earliest and latest line (files in scan order), each value's
    statistics joined, the evidence of both (``a``'s first) up to MAX_EVIDENCE."""
    files = tuple(dict.fromkeys(a.files + b.files))

    def at(ev: Evidence) -> tuple[int, int]:
        return (files.index(ev.file) if ev.file in files else len(files), ev.line)

    a_first, a_last = at(a.first) <= at(b.first), at(a.last) >= at(b.last)
    values: dict[str, Any] = {}
    for name in dict.fromkeys([*a.values, *b.values]):
        va, vb = a.values.get(name), b.values.get(name)
        if va is None or vb is None:
            values[name] = va if vb is None else vb
        elif isinstance(va, dict) and isinstance(vb, dict):
            values[name] = _joined_stats(va, vb, a_first, a_last)
        elif isinstance(va, list) and isinstance(vb, list):
            values[name] = list(dict.fromkeys(va + vb))[:MAX_TEXT_VALUES]
        else:
            values[name] = va
    evidence = tuple(dict.fromkeys(a.evidence + b.evidence))[:MAX_EVIDENCE]
    patterns = dict(a.patterns)
    for pid, n in b.patterns.items():
        patterns[pid] = patterns.get(pid, 0) + n
    return Symptom(kind=a.kind, count=a.count + b.count, evidence=evidence,
                   first=a.first if a_first else b.first, last=a.last if a_last else b.last,
                   ranks=tuple(sorted(set(a.ranks) | set(b.ranks))), files=files,
                   patterns=patterns, values=values)


def _joined_stats(a: dict[str, Any], b: dict[str, Any], a_first: bool, a_last: bool
                  ) -> dict[str, Any]:
    """Two {first, last, min, max, count} statistics of one value as one (NaN/inf kept as the
    strings json_number wrote; a number wins a min or max over such a string)."""

    def pick(x: Any, y: Any, lower: bool) -> Any:
        if not isinstance(x, (int, float)):
            return y
        if not isinstance(y, (int, float)):
            return x
        return min(x, y) if lower else max(x, y)

    return {"first": a["first"] if a_first else b["first"],
            "last": a["last"] if a_last else b["last"],
            "min": pick(a["min"], b["min"], True), "max": pick(a["max"], b["max"], False),
            "count": a["count"] + b["count"]}
