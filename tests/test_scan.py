"""The streaming scanner: line numbers, ranks, chunk boundaries, gzip, stdin, both engines."""

from __future__ import annotations

import gzip
import io
import sys

import pytest

from dsdoctor.logs import scan as scan_mod
from dsdoctor.logs.formats import load_file
from dsdoctor.logs.prefilter import available_engines, hyperscan_available
from dsdoctor.logs.scan import Scanner
from tests.comparable import comparable

# Patterns for these tests only, written from real formats (DeepSpeed loss_scaler.py, the
# DeepSpeed launcher, DeepSpeed's batch assertion, HF Trainer dicts). The shipped formats live in
# dsdoctor/logs/formats and have their own tests.
TEST_FORMATS = r"""
format: test
patterns:
  - id: t-overflow
    emits: fp16-overflow
    prefilter: 'OVERFLOW'
    regex: 'OVERFLOW!\s*(?:Rank\s+(?P<rank>\d+)\s+)?Skipping step\.\s*Attempted loss scal\s*e:\s*(?P<attempted_scale>[\d.]+)(?:,\s*reducing to\s*(?P<new_scale>[\d.]+))?'
    fields: {attempted_scale: float, new_scale: float, rank: int}
    strength: 2
    samples: ["[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"]
  - id: t-exit
    emits: launcher-nonzero-exit
    prefilter: 'exits with return code = '
    regex: 'exits with return code = (?P<exit_code>-?\d+)'
    fields: {exit_code: int}
    samples: ["[2023-07-04 17:31:27,755] [ERROR] [launch.py:321:sigkill_handler] ['python'] exits with return code = 1"]
  - id: t-batch
    emits: batch-size-mismatch
    prefilter: 'train_batch_size is not'
    regex: 'train_batch_size is not\s+equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s+(?P<train_batch>\d+) != (?P<micro>\d+) \* (?P<accum>\d+) \* (?P<world>\d+)'
    join_next: 3
    fields: {train_batch: int, micro: int, accum: int, world: int}
    samples: ["AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 * 8 * 1"]
  - id: t-trainer
    emits: timeline
    prefilter: "\\{'loss': "
    regex: "\\{'loss': (?P<loss>nan|inf|[-+]?[\\d.]+(?:e[-+]?\\d+)?)(?:.*?'grad_norm': (?P<grad_norm>nan|inf|[-+]?[\\d.]+(?:e[-+]?\\d+)?))?"
    fields: {loss: float, grad_norm: float}
    samples: ["{'loss': 0.48828125, 'grad_norm': 4.11375999, 'learning_rate': 1e-05}"]
"""

OVERFLOW = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}")


@pytest.fixture(scope="module")
def patterns():
    return load_file(TEST_FORMATS, "test.yaml")


ENGINES = available_engines()


def scan_bytes(patterns, data: bytes, engine: str, name: str = "t.log"):
    s = Scanner(patterns, engine=engine)
    s._scan_stream(name, io.BytesIO(data), len(data), False, None)
    return s.result()


@pytest.mark.parametrize("engine", ENGINES)
def test_line_numbers_ranks_and_values(patterns, engine):
    lines = ["noise"] * 5 + [OVERFLOW.format(a=65536, b=32768)] + ["noise"] * 3 + [
        "[rank1]: " + OVERFLOW.format(a=32768, b=16384).replace("Rank 0", "Rank 1")]
    res = scan_bytes(patterns, ("\n".join(lines) + "\n").encode(), engine)
    sym = res.symptoms["fp16-overflow"]
    assert sym.count == 2
    assert (sym.first.line, sym.last.line) == (6, 10)
    assert sym.ranks == (0, 1)
    assert sym.values["attempted_scale"]["max"] == 65536
    assert sym.values["new_scale"]["last"] == 16384
    assert res.files[0].lines == 10


@pytest.mark.parametrize("engine", ENGINES)
def test_carriage_return_segments_keep_the_physical_line(patterns, engine):
    # tqdm redraws with \r; a DeepSpeed line glued after a bar (transformers#14531)
    bar = "  0%|▋    | 98/24128 [00:40<2:40:10,  2.50it/s]"
    line = "\r".join([bar, bar + OVERFLOW.format(a=1, b=1), bar, bar + OVERFLOW.format(a=1, b=1)])
    data = ("first line\n" + line + "\nlast\n").encode()
    res = scan_bytes(patterns, data, engine)
    sym = res.symptoms["fp16-overflow"]
    assert sym.count == 2
    assert sym.first.line == sym.last.line == 2
    assert sym.first.text.startswith("0%|") or "OVERFLOW!" in sym.first.text


@pytest.mark.parametrize("engine", ENGINES)
def test_hard_wrapped_message_is_joined(patterns, engine):
    # bigcode-project/starcoder#77: the assertion message wrapped over three lines
    data = (b"AssertionError: Check batch related parameters. train_batch_size is not\n"
            b"equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 *\n"
            b"8 * 1\n")
    res = scan_bytes(patterns, data, engine)
    sym = res.symptoms["batch-size-mismatch"]
    assert sym.first.line == 1
    assert sym.values["train_batch"]["first"] == 64
    assert sym.values["accum"]["first"] == 8


@pytest.mark.parametrize("engine", ENGINES)
def test_chunk_boundaries_do_not_change_results(patterns, engine, monkeypatch):
    lines = []
    for i in range(3000):
        lines.append(f"{{'loss': {1.0 + i / 1000:.4f}, 'grad_norm': 0.5, 'learning_rate': 1e-05}}")
        if i % 97 == 0:
            lines.append(OVERFLOW.format(a=2 ** (i % 16 + 1), b=2 ** (i % 16)))
    data = ("\n".join(lines) + "\n").encode()
    whole = scan_bytes(patterns, data, engine)
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(scan_mod, "LOOKAHEAD_BYTES", 512)
    chunked = scan_bytes(patterns, data, engine)
    assert comparable(whole.symptoms) == comparable(chunked.symptoms)
    assert [p.line for p in whole.timeline] == [p.line for p in chunked.timeline]
    assert whole.files[0].lines == chunked.files[0].lines == len(lines)


def test_engines_agree(patterns):
    if not hyperscan_available():
        pytest.skip("hyperscan not installed: only the pure-Python engine runs here")
    data = ("\n".join([OVERFLOW.format(a=8, b=4), "x\r" + OVERFLOW.format(a=4, b=2) + "\rtail",
                       "[rank2]: ... exits with return code = -9", "{'loss': nan}"]) + "\n").encode()
    a = scan_bytes(patterns, data, "python")
    b = scan_bytes(patterns, data, "hyperscan")
    assert comparable(a.symptoms) == comparable(b.symptoms)
    assert comparable(a.timeline) == comparable(b.timeline)


def test_gzip_and_stdin_match_plain(patterns, tmp_path, monkeypatch):
    data = ("\n".join(["a", OVERFLOW.format(a=8, b=4), "b", "exits with return code = -9"]) +
            "\n").encode()
    plain = tmp_path / "rank2.log"
    plain.write_bytes(data)
    gz = tmp_path / "rank2.log.gz"
    gz.write_bytes(gzip.compress(data))
    s1 = Scanner(patterns, engine="python")
    s1.scan_path(str(plain))
    s2 = Scanner(patterns, engine="python")
    s2.scan_path(str(gz))
    r1, r2 = s1.result(), s2.result()
    assert [(k, v.count, v.first.line) for k, v in r1.symptoms.items()] == \
        [(k, v.count, v.first.line) for k, v in r2.symptoms.items()]
    assert r2.files[0].compressed
    # the rank comes from the file name when the line has no rank
    assert r1.symptoms["launcher-nonzero-exit"].first.rank == 2

    class FakeStdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr(sys, "stdin", FakeStdin)
    s3 = Scanner(patterns, engine="python")
    s3.scan_path("-")
    r3 = s3.result()
    assert r3.files[0].path == "<stdin>"
    assert r3.symptoms["fp16-overflow"].first.line == 2


def test_truncated_gzip_gives_partial_result_and_note(patterns, tmp_path):
    data = ("\n".join([OVERFLOW.format(a=8, b=4)] * 2000) + "\n").encode()
    blob = gzip.compress(data)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(blob[: len(blob) // 2])
    s = Scanner(patterns, engine="python")
    s.scan_path(str(p))
    r = s.result()
    assert any("truncated gzip" in n for n in r.notes)


@pytest.mark.parametrize("engine", ENGINES)
def test_giant_line_without_newline(patterns, engine, monkeypatch):
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(scan_mod, "MAX_BUFFER_BYTES", 4 << 20)
    data = b"x" * (6 << 20) + OVERFLOW.format(a=8, b=4).encode() + b"y" * (1 << 20)
    res = scan_bytes(patterns, data, engine)
    assert res.symptoms["fp16-overflow"].count == 1
    assert len(res.symptoms["fp16-overflow"].first.text) <= 500


def test_big_file_timeline_is_sampled_and_bounded(patterns, monkeypatch):
    monkeypatch.setattr(scan_mod, "TIMELINE_FULL_BYTES", 1000)
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(scan_mod, "LOOKAHEAD_BYTES", 4 << 10)
    lines = [f"{{'loss': {i}.5, 'grad_norm': 1.0}}" for i in range(40_000)]
    lines[30_000] = OVERFLOW.format(a=8, b=4)
    res = scan_bytes(patterns, ("\n".join(lines) + "\n").encode(), "python")
    assert 10 < len(res.timeline) < 4000
    # sampled points carry their true line numbers
    for p in res.timeline:
        assert p.loss == pytest.approx(p.line - 1 + 0.5)
    assert res.symptoms["fp16-overflow"].first.line == 30_001


def test_every_shipped_pattern_compiles():
    # the shipped formats compile their precise regexes lazily at run time: check them all here
    from dsdoctor.logs.formats import load_patterns, with_unique_group_names

    for p in load_patterns():
        assert p.regex.pattern == with_unique_group_names(p.source)


def test_hyperscan_database_cache_gives_the_same_results(patterns, tmp_path, monkeypatch):
    if not hyperscan_available():
        pytest.skip("hyperscan not installed")
    from dsdoctor.logs import prefilter  # noqa: PLC0415

    monkeypatch.setenv("DSDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    # as a new process: an earlier test's scan left the database loaded in this one
    monkeypatch.setattr(prefilter, "_LOADED", {})
    data = ("\n".join(["x", OVERFLOW.format(a=8, b=4), "exits with return code = -9"]) + "\n").encode()
    first = scan_bytes(patterns, data, "hyperscan")  # compiles and stores
    assert list((tmp_path / "cache").glob("hs-*.db"))
    prefilter._LOADED.clear()
    second = scan_bytes(patterns, data, "hyperscan")  # loads
    assert comparable(first.symptoms) == comparable(second.symptoms)
    for f in (tmp_path / "cache").glob("hs-*.db"):
        f.write_bytes(b"garbage")  # a corrupt cache entry is recompiled, not trusted
    prefilter._LOADED.clear()
    third = scan_bytes(patterns, data, "hyperscan")
    assert comparable(third.symptoms) == comparable(first.symptoms)
