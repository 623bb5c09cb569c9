"""Property tests: random bytes and mutated real logs never make the reader or parsers raise,
and both prefilter engines always agree.

The example budget is small by default (the suite stays fast); set DSDOCTOR_FUZZ_EXAMPLES
(e.g. 100000) for a long fuzzing run of the readers and config loaders."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdoctor.errors import UsageError
from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.prefilter import hyperscan_available
from dsdoctor.logs.reader import normalize
from dsdoctor.logs.scan import Scanner
from tests.comparable import comparable

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
        assert comparable(a.symptoms) == comparable(b.symptoms)
        assert comparable(a.timeline) == comparable(b.timeline)
        assert comparable(a.facts) == comparable(b.facts)


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
def test_engines_agree_on_every_real_log():
    for data in CORPUS:
        a, b = _scan(data, "python"), _scan(data, "hyperscan")
        assert comparable(a.symptoms) == comparable(b.symptoms)
        assert comparable(a.timeline) == comparable(b.timeline)
        assert comparable(a.facts) == comparable(b.facts)


# ------------------------------------------------------------ readers and loaders (issue 14)
FUZZ = int(os.environ.get("DSDOCTOR_FUZZ_EXAMPLES", "0") or 0)


def _budget(default: int) -> settings:
    return settings(max_examples=FUZZ or default, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


_WRAP = {"plain": lambda b: b, "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
         "utf16": lambda b: b.decode("utf-8", "replace").encode("utf-16"),
         "cut-gzip": lambda b: gzip.compress(b)[: max(len(gzip.compress(b)) // 2, 3)],
         "gzip+junk": lambda b: gzip.compress(b) + b"junk\x00\xff"}


@_budget(60)
@given(st.one_of(st.binary(max_size=4096), mutated_logs()), st.sampled_from(sorted(_WRAP)))
def test_open_log_is_a_stream_or_one_usage_error(tmp_path_factory, data, wrap):
    p = tmp_path_factory.mktemp("fuzz") / "train.log"
    p.write_bytes(_WRAP[wrap](data[:20000]))
    s = Scanner(PATTERNS, engine="python")
    try:
        s.scan_path(str(p))
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert s.files[0].path.endswith("train.log")


_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
              st.text(max_size=20)),
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(st.text(max_size=10), kids, max_size=4)),
    max_leaves=20)


@st.composite
def config_texts(draw):
    import json

    kind = draw(st.integers(0, 3))
    if kind == 0:
        return json.dumps(draw(st.dictionaries(st.text(max_size=12), _JSONISH, max_size=6)))
    if kind == 1:  # YAML-ish lines with tags, anchors, merges, odd scalars
        atoms = st.sampled_from(["a: 1", "b: &x {c: 2}", "<<: *x", "!!int abc", "? !!str k\n: v",
                                 "- [", "]]]", "num_processes: " + "9" * 50, "zero_stage: .nan",
                                 "!!python/object:os.system", "deepspeed_config:", "  x: y",
                                 "compute_environment: LOCAL_MACHINE", "\t", "k: \"\\ud800\""])
        return "\n".join(draw(st.lists(atoms, max_size=12)))
    if kind == 2:
        return draw(st.text(max_size=400))
    base = '{"zero_optimization": {"stage": 3}, "fp16": {"enabled": true}}'
    pos = draw(st.integers(0, len(base)))
    return base[:pos] + draw(st.text(max_size=30)) + base[pos:]


@_budget(150)
@given(config_texts(), st.sampled_from(["ds.json", "accelerate.yaml"]))
def test_config_loader_is_a_config_or_one_usage_error(tmp_path_factory, text, name):
    from dsdoctor.facts.configfile import load_config

    p = tmp_path_factory.mktemp("cfg") / name
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_config(str(p))
    except UsageError as exc:
        assert "\n" not in str(exc).strip()


@_budget(80)
@given(config_texts())
def test_snapshot_loader_is_a_snapshot_or_one_usage_error(tmp_path_factory, text):
    from dsdoctor.facts.envinfo import load_snapshot

    p = tmp_path_factory.mktemp("env") / "env.json"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_snapshot(str(p))
    except UsageError:
        pass


@_budget(200)
@given(st.text(max_size=300))
def test_terminal_safe_leaves_no_control_character(text):
    import re

    from dsdoctor.safeio import one_line, terminal_safe

    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", terminal_safe(text))
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", one_line(text))
    assert not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]", normalize(text.encode("utf-8",
                                                                                   "replace")).text)
