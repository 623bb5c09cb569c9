"""The pure-Python prefilter engine's searches (logs/literal_engine.py): whichever way it plans
them, its candidate lines are exactly the prefilters' matches, and the Hyperscan engine's.

Inputs are real lines: every format's sample and negative lines and the repository's sample
logs (copied from real runs). Some tests change their case or repeat them to move the engine's
plan; they say so."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from dsdoctor.logs import literal_engine
from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.literal_engine import SAMPLE_BYTES, PythonEngine, _minimal
from dsdoctor.logs.prefilter import HyperscanEngine, hyperscan_available
from tests.test_scan_literals import real_lines

try:  # Python 3.11+
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = load_patterns()


LINES = real_lines()  # every format's samples and negatives, and the sample logs
# the caseless patterns' sample lines with their case swapped: a caseless literal must be found
# in any case, in the same passes as the exact ones (derived from real lines, not samples)
SWAPPED = [s["line"].encode().swapcase() for p in PATTERNS if p.caseless for s in p.samples]
DATA = b"\n".join(LINES * 3 + SWAPPED) + b"\n"


def _truth(data: bytes, limit: int | None = None) -> set[tuple[int, int]]:
    """(line start, pattern) of every prefilter match inside data[:limit], line by line."""
    data = data[:limit]
    out = set()
    start = 0
    for line in data.split(b"\n"):
        for i, p in enumerate(PATTERNS):
            if re.search(p.prefilter.encode(), line, re.IGNORECASE if p.caseless else 0):
                out.add((start, i))
        start += len(line) + 1
    return out


def _found(engine, data, limit: int | None = None) -> set[tuple[int, int]]:
    limit = len(data) if limit is None else limit
    return {(data.rfind(b"\n", 0, off) + 1, i) for off, i in engine.candidates(data, limit)}


# each way of planning: the default, every literal on its own (no byte is worth a pass),
# every literal at an anchor byte, every anchor byte found by memchr, none by memchr
PLANS = {
    "default": {},
    "literals alone": {"PASS_NS": -1.0},
    "all anchored": {"PASS_NS": 1e9},
    "all memchr": {"MEMCHR_HIT_NS": 0.0, "MEMCHR_NS": 0.0},
    "no memchr": {"MEMCHR_NS": 1e9},
}


@pytest.fixture(params=list(PLANS))
def plan(request, monkeypatch) -> str:
    for name, value in PLANS[request.param].items():
        monkeypatch.setattr(literal_engine, name, value)
    return request.param


def test_candidates_are_the_prefilter_matches_whatever_the_plan(plan) -> None:
    engine = PythonEngine(PATTERNS)
    assert _found(engine, DATA) == _truth(DATA)
    p = engine.plan(DATA, len(DATA))
    rare = {b for b, _, _ in p.rare}
    if plan == "all memchr":
        assert not [r for r, a in p.passes if len(a.found) > 1] and rare
    if plan == "no memchr":
        assert not rare
    if plan == "literals alone":  # but the caseless ones, which have no pass of their own
        assert sum(len(a.found) == 1 for _, a in p.passes) > 50


def test_a_literal_at_the_start_of_the_data_or_cut_by_the_limit(plan) -> None:
    """Every real line on its own (lookbehinds at offset 0), in a bytearray as the scanner
    passes its buffer, and cut short: a literal cut by the limit is not there."""
    engine = PythonEngine(PATTERNS)
    for line in LINES[::7] + SWAPPED:
        buf = bytearray(line + b"\n" + line)
        assert _found(engine, buf) == _truth(bytes(buf)), line
        cut = len(line) + 1 + len(line) // 2
        assert _found(engine, buf, cut) == _truth(bytes(buf), cut), line


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
def test_same_candidate_lines_as_hyperscan() -> None:
    python, hyperscan = PythonEngine(PATTERNS), HyperscanEngine(PATTERNS)
    assert _found(python, DATA) == _found(hyperscan, DATA)


class _CountedLower(bytearray):
    """A chunk that counts how often it is lower-cased as a whole."""

    lowered = 0

    def lower(self):  # type: ignore[override]
        _CountedLower.lowered += 1
        return super().lower()


def test_every_pass_starts_with_a_literal_and_the_chunk_is_never_lowered() -> None:
    """sre searches a regex that starts with a literal in a tight loop; a set of first bytes
    (or an ``(?i)`` first byte) costs several times more. Caseless literals share the passes:
    the chunk is never lower-cased."""
    engine = PythonEngine(PATTERNS)
    data = _CountedLower(DATA)
    assert _found(engine, data) == _truth(DATA)
    assert _CountedLower.lowered == 0
    p = engine.plan(data, len(data))
    for regex, _ in p.passes:
        op, _ = sre_parse.parse(regex.pattern.decode("latin-1"))[0]
        assert op is sre_constants.LITERAL, regex.pattern[:40]
    caseless = {lit.text for _, a in p.passes + [(r, a) for _, r, a in p.rare]
                for (_, lit), _ in a.found if lit.caseless}
    # every caseless literal is searched, a longer one through the shorter it contains (fairseq's
    # "overflow detected, setting loss scale to:" inside "... loss scale to")
    assert caseless == set(_minimal(engine._folded))  # noqa: SLF001
    assert all(any(short in lit for short in caseless) for lit in engine._folded)  # noqa: SLF001


def test_a_stream_fed_in_pieces_is_measured_as_its_sample_doubles() -> None:
    engine = PythonEngine(PATTERNS)
    piece = 4 << 10
    offset = 0
    fed = 0
    while fed < 2 * SAMPLE_BYTES:
        cut = DATA.find(b"\n", offset + piece) + 1 or len(DATA)
        chunk = DATA[offset:cut]
        assert _found(engine, chunk) == _truth(chunk)
        fed += len(chunk)
        offset = 0 if cut >= len(DATA) else cut
    # measured on the first piece, then at each doubling up to SAMPLE_BYTES, then never again
    assert engine.plans_measured <= 2 + math.log2(SAMPLE_BYTES / piece)
    assert engine.plans_measured >= math.log2(SAMPLE_BYTES / piece)
    measured = engine.plans_measured
    _found(engine, DATA)
    assert engine.plans_measured == measured


def test_a_rare_byte_that_turns_common_is_measured_again() -> None:
    """The plan is measured on the log's first bytes; when a byte it found by memchr (a Python
    step per occurrence) floods a later chunk, the next chunk is measured again and the byte is
    no longer taken for rare (its literals are then anchored by a regex pass: its own, or another
    byte's when that is cheaper). (The flood: a real line that holds the byte, repeated.)"""
    engine = PythonEngine(PATTERNS)
    head = (ROOT / "sample_logs" / "healthy_zero2_trainer" / "train.log").read_bytes()
    while len(head) < SAMPLE_BYTES:
        head += head
    assert _found(engine, head) == _truth(head)
    rare = [b for b, _, _ in engine.plan(head, len(head)).rare]
    line = max(LINES, key=lambda x: max((x.count(b) for b in rare), default=0))
    byte = max(rare, key=line.count)
    assert line.count(byte), "no real line holds a byte the plan takes for rare"
    flood = (line + b"\n") * (1 + 4 * literal_engine.RARE_MIN_HITS // line.count(byte))
    assert _found(engine, flood) == _truth(flood)
    assert engine.plans_measured == 1
    assert _found(engine, flood) == _truth(flood)
    assert engine.plans_measured == 2
    plan = engine.plan(flood, len(flood))
    assert byte not in {b for b, _, _ in plan.rare}
    # every literal that holds the byte is still anchored: by a regex pass, or at another byte
    # that is rare in this chunk (the flood holds few distinct bytes: most of the others are)
    anchored = [a for _, a in plan.passes] + [a for _, _, a in plan.rare]
    found = {lit.text for a in anchored for (_, lit), _others in a.found}
    holding = {lit.text for lit in engine._lits if byte in lit.text}
    assert holding and holding <= found, holding - found


class _CountedRegex:
    """A prefilter regex that counts how often it is run."""

    def __init__(self, regex: re.Pattern[bytes]):
        self.regex, self.runs = regex, 0

    def finditer(self, *args):
        self.runs += 1
        return self.regex.finditer(*args)


def test_a_literal_that_is_a_whole_match_needs_no_regex() -> None:
    """A prefilter that is a finite set of strings (``NCCL (error|failure)``) is matched by
    its literals themselves: its regex never runs, and the candidates are the same."""
    engine = PythonEngine(PATTERNS)
    counted = [_CountedRegex(r) for r in engine._regexes]  # noqa: SLF001
    engine._regexes = counted  # type: ignore[assignment] # noqa: SLF001
    assert _found(engine, DATA) == _truth(DATA)
    lits = engine._lits  # noqa: SLF001
    # (a pattern one of whose strings holds another pattern's literal is confirmed by its
    # regex where that literal is found)
    whole = {i for lit in lits for i in lit.whole} - {i for lit in lits for i in lit.patterns}
    assert len(whole) > len(PATTERNS) // 3
    assert all(counted[i].runs == 0 for i in whole)
    assert sum(c.runs for c in counted) > 0
    assert set(literal_engine.whole_language("NCCL ([Ee]rror|failure)", False)) == {
        b"NCCL Error", b"NCCL error", b"NCCL failure"}
    assert literal_engine.whole_language("OVERFLOW!", True) == {b"overflow!"}
    assert literal_engine.whole_language(r"return code = -?[0-9]+", False) is None


def test_every_pattern_confirmed_by_its_regex(monkeypatch) -> None:
    monkeypatch.setattr(literal_engine, "whole_language", lambda *_: None)
    engine = PythonEngine(PATTERNS)
    assert not any(lit.whole for lit in engine._lits)  # noqa: SLF001
    assert _found(engine, DATA) == _truth(DATA)


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_whole_language_strings_are_matches(pattern) -> None:
    """An occurrence of a whole-language string is taken for a match without the regex: each
    must be one, whatever surrounds it (no anchors or lookarounds)."""
    language = literal_engine.whole_language(pattern.prefilter, pattern.caseless)
    if language is None:
        return
    rx = re.compile(pattern.prefilter.encode(), re.IGNORECASE if pattern.caseless else 0)
    for text in language:
        assert rx.fullmatch(text), (pattern.id, text)
        assert rx.search(b"x" + text + b"x"), (pattern.id, text)


class _CountedBounds(bytearray):
    """A chunk that counts the searches for a line's bounds."""

    searches = 0

    def rfind(self, *args):  # type: ignore[override]
        _CountedBounds.searches += 1
        return super().rfind(*args)


def test_a_long_line_with_many_hits_finds_its_bounds_once() -> None:
    """A log whose newlines were lost: thousands of real messages on one line. Searching back
    to the line's start for each hit made the engine quadratic; it is done once per line."""
    line = b" ".join(s["line"].encode() for p in PATTERNS for s in p.samples).replace(b"\n", b" ")
    data = _CountedBounds(line * 20 + b"\n" + line + b"\n")
    assert _found(PythonEngine(PATTERNS), data) == _truth(bytes(data))
    # _found maps each candidate to its line with rfind itself: count the engine's own searches
    engine = PythonEngine(PATTERNS)
    _CountedBounds.searches = 0
    hits = engine.candidates(data, len(data))
    plan = engine.plan(data, len(data))
    # at most once per line and regex pass (each pass goes through the lines in order)
    assert _CountedBounds.searches <= 2 * (len(plan.passes) + len(plan.rare)) < len(hits) // 4
