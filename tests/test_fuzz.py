"""Property tests: random bytes and mutated real logs never make the reader or parsers raise,
and both prefilter engines always agree."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.prefilter import hyperscan_available
from dsdoctor.logs.reader import normalize
from dsdoctor.logs.scan import Scanner

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "real_logs"


def _corpus() -> list[bytes]:
    files = sorted(SHARED.glob("*.log")) + sorted((REPO / "sample_logs").glob("*/*.log"))
    out = [f.read_bytes()[:200_000] for f in files]
    return out or [b"[INFO] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"]


CORPUS = _corpus()
PATTERNS = load_patterns()


def _scan(data: bytes, engine: str):
    s = Scanner(PATTERNS, engine=engine)
    s._scan_stream("fuzz.log", io.BytesIO(data), len(data), False, None)
    return s.result()


@st.composite
def mutated_logs(draw):
    base = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.integers(0, 3))
        pos = draw(st.integers(0, max(len(base) - 1, 0)))
        junk = draw(st.binary(min_size=1, max_size=64))
        if op == 0:
            base[pos:pos] = junk  # insert
        elif op == 1:
            del base[pos:pos + len(junk)]  # delete
        elif op == 2:
            base[pos:pos] = draw(st.sampled_from([b"\r", b"\n", b"\x1b[31m", b"> ", b"[rank7]: ",
                                                  b"\x00", b"\xff", b"\r\n"]))
        else:
            base[pos:pos + len(junk)] = junk  # overwrite
    return bytes(base)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_normalize_never_raises(data):
    seg = normalize(data)
    assert isinstance(seg.text, str)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=8192), mutated_logs()))
def test_scanner_never_raises_and_engines_agree(data):
    a = _scan(data, "python")
    assert a.files[0].bytes == len(data)
    if hyperscan_available():
        b = _scan(data, "hyperscan")
        assert a.symptoms == b.symptoms
        assert a.timeline == b.timeline
        assert a.facts == b.facts


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
def test_engines_agree_on_every_real_log():
    for data in CORPUS:
        a, b = _scan(data, "python"), _scan(data, "hyperscan")
        assert a.symptoms == b.symptoms
        assert a.timeline == b.timeline
        assert a.facts == b.facts
