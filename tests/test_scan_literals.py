"""The pure-Python prefilter engine's literals (logs/literal_engine.py) are really required by
their prefilters (its searches: tests/test_literal_engine.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.literal_engine import expanded_literals

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = load_patterns()


def real_lines() -> list[bytes]:
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
    for line in real_lines():
        for m in rx.finditer(line):
            hay = m.group().lower() if pattern.caseless else m.group()
            assert any(lit in hay for lit in lits), (pattern.id, m.group())


def test_expansion_of_branches_and_classes() -> None:
    assert set(expanded_literals("NCCL ([Ee]rror|failure)", False)) == {
        b"NCCL Error", b"NCCL error", b"NCCL failure"}
    assert set(expanded_literals("(fp16|bf16)=", False)) == {b"fp16=", b"bf16="}
    assert set(expanded_literals("OVERFLOW!? x", True)) == {b"overflow x", b"overflow! x"}
