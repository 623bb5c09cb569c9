"""The pure-Python prefilter engine (logs/literal_engine.py): its literals are really required,
and whichever anchors it picks, its candidates are exactly the prefilters' matches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsdoctor.logs import literal_engine
from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.literal_engine import PythonEngine, expanded_literals

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = load_patterns()


def _lines() -> list[bytes]:
    """Real lines: every format's samples and negatives, and the sample logs."""
    out = []
    for p in PATTERNS:
        out += [s["line"].encode() for s in p.samples]
        out += [n.encode() for n in p.negatives]
    for log in sorted((ROOT / "sample_logs").glob("*/train.log")):
        out += log.read_bytes().splitlines()
    return out


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_every_prefilter_match_contains_an_expanded_literal(pattern) -> None:
    lits = expanded_literals(pattern.prefilter, pattern.caseless)
    assert lits, f"{pattern.id}: no literal (the engine would run its regex on every chunk)"
    rx = re.compile(pattern.prefilter.encode(), re.IGNORECASE if pattern.caseless else 0)
    for line in _lines():
        for m in rx.finditer(line):
            hay = m.group().lower() if pattern.caseless else m.group()
            assert any(lit in hay for lit in lits), (pattern.id, m.group())


def test_expansion_of_branches_and_classes() -> None:
    assert set(expanded_literals("NCCL ([Ee]rror|failure)", False)) == {
        b"NCCL Error", b"NCCL error", b"NCCL failure"}
    assert set(expanded_literals("(fp16|bf16)=", False)) == {b"fp16=", b"bf16="}
    assert set(expanded_literals("OVERFLOW!? x", True)) == {b"overflow x", b"overflow! x"}


def _truth(data: bytes, patterns) -> set[tuple[int, int]]:
    """(line start, pattern) of every prefilter match, line by line."""
    out = set()
    start = 0
    for line in data.split(b"\n"):
        for i, p in enumerate(patterns):
            if re.search(p.prefilter.encode(), line, re.IGNORECASE if p.caseless else 0):
                out.add((start, i))
        start += len(line) + 1
    return out


def _found(engine: PythonEngine, data: bytes) -> set[tuple[int, int]]:
    return {(data.rfind(b"\n", 0, off) + 1, i) for off, i in engine.candidates(data, len(data))}


@pytest.mark.parametrize("find_fraction", [-1.0, 1.0, 0.08])
def test_candidates_equal_the_prefilter_matches_whatever_the_anchors(
        monkeypatch, find_fraction) -> None:
    """All literals searched with find (every byte too common), all as regex anchors (none
    is), and the default: the same candidate lines, which are exactly the prefilters' matches."""
    monkeypatch.setattr(literal_engine, "PASS_NS", find_fraction)
    data = b"\n".join(_lines() * 3) + b"\n"
    engine = PythonEngine(PATTERNS)
    assert _found(engine, data) == _truth(data, PATTERNS)
