"""Fold a stream of events into symptoms, a timeline and facts, in constant memory.

A log can hold a million OVERFLOW lines: we keep counts, value statistics and a handful of
evidence lines (first, last, strongest, first per rank), never the events themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.model import Evidence, Fact, Symptom, TimelinePoint, json_number

MAX_EVIDENCE = 8
MAX_RANK_EVIDENCE = 8
MAX_TEXT_VALUES = 10
MAX_TIMELINE_POINTS = 4000
MAX_FACTS_PER_NAME = 400

TIMELINE_FIELDS = ("step", "loss", "grad_norm", "loss_scale", "skipped", "lr", "throughput",
                   "epoch")


@dataclass
class _KindState:
    kind: str
    count: int = 0
    first: Evidence | None = None
    last: Evidence | None = None
    firsts: list[Evidence] = field(default_factory=list)
    strongest: list[tuple[int, int, Evidence]] = field(default_factory=list)
    by_rank: dict[int, Evidence] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    files: dict[str, None] = field(default_factory=dict)
    patterns: dict[str, int] = field(default_factory=dict)
    numbers: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)


class SymptomAggregator:
    """Events in, :class:`Symptom` per kind out."""

    def __init__(self) -> None:
        self._state: dict[str, _KindState] = {}
        self._seq = 0

    def add(self, kind: str, pattern_id: str, strength: int, ev: Evidence,
            values: dict[str, Any]) -> None:
        st = self._state.get(kind)
        if st is None:
            st = self._state[kind] = _KindState(kind)
        self._seq += 1
        st.count += 1
        if st.first is None:
            st.first = ev
        st.last = ev
        st.files.setdefault(ev.file, None)
        st.patterns[pattern_id] = st.patterns.get(pattern_id, 0) + 1
        if ev.rank is not None:
            st.ranks.add(ev.rank)
            if ev.rank not in st.by_rank and len(st.by_rank) < MAX_RANK_EVIDENCE:
                st.by_rank[ev.rank] = ev
        if len(st.firsts) < 3:
            st.firsts.append(ev)
        # keep the 3 strongest (earliest wins ties)
        item = (strength, -self._seq, ev)
        if len(st.strongest) < 3:
            st.strongest.append(item)
            st.strongest.sort(key=lambda t: (t[0], t[1]), reverse=True)
        elif strength > st.strongest[-1][0]:
            st.strongest[-1] = item
            st.strongest.sort(key=lambda t: (t[0], t[1]), reverse=True)
        for name, val in values.items():
            if name == "rank":
                continue
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                lst = st.texts.setdefault(name, [])
                sval = str(val)
                if sval not in lst and len(lst) < MAX_TEXT_VALUES:
                    lst.append(sval)
                continue
            stats = st.numbers.get(name)
            if stats is None:
                st.numbers[name] = {"first": val, "last": val, "min": val, "max": val, "count": 1}
            else:
                stats["last"] = val
                stats["count"] += 1
                if not (isinstance(val, float) and math.isnan(val)):
                    if _lt(val, stats["min"]):
                        stats["min"] = val
                    if _lt(stats["max"], val):
                        stats["max"] = val

    def build(self) -> dict[str, Symptom]:
        out: dict[str, Symptom] = {}
        for kind, st in self._state.items():
            assert st.first is not None and st.last is not None
            chosen: list[Evidence] = []

            def take(ev: Evidence, chosen: list[Evidence] = chosen) -> None:
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
            out[kind] = Symptom(
                kind=kind,
                count=st.count,
                evidence=tuple(chosen),
                first=st.first,
                last=st.last,
                ranks=tuple(sorted(st.ranks)),
                files=tuple(st.files),
                patterns=dict(st.patterns),
                values=values,
            )
        return out


def _lt(a: Any, b: Any) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return True
    return a < b


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
        self._facts.append(Fact(name=name, values=dict(values), evidence=ev))

    def facts(self) -> list[Fact]:
        return list(self._facts)
