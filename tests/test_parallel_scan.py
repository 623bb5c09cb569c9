"""The parallel scan (logs/parallel.py) gives exactly the single-process result.

Inputs are the repository's real sample logs (sample_logs/*/train.log, copied from real runs) and
the format files' real sample lines, concatenated past the 2 MiB line-by-line timeline limit so the
sampled timeline windows are exercised; the split threshold is forced down to 1 byte.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dsdoctor.logs import jobs, parallel
from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.prefilter import available_engines
from dsdoctor.logs.scan import TIMELINE_FULL_BYTES, Scanner, ScanResult

pytestmark = pytest.mark.skipif(not jobs.fork_available(), reason="needs fork")

ROOT = Path(__file__).resolve().parents[1]


def _as_json(res: ScanResult) -> str:
    """Everything the scan found (the engine's name aside)."""
    return json.dumps(dataclasses.asdict(dataclasses.replace(res, engine="")), sort_keys=True,
                      default=str)


def _scan(path: Path, jobs: int, engine: str = "python") -> ScanResult:
    s = Scanner(engine=engine, jobs=jobs, parallel_min_bytes=1)
    s.scan_path(str(path))
    return s.result()


def _sample_lines() -> bytes:
    """Every format's real sample lines (hard-wrapped ones keep their line breaks)."""
    out = []
    for p in load_patterns():
        for s in p.samples:
            out.append(s["line"])
    return ("\n".join(out) + "\n").encode()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    logs = sorted((ROOT / "sample_logs").glob("*/train.log"))
    assert logs, "sample_logs/*/train.log missing"
    body = b"".join(p.read_bytes() for p in logs) + _sample_lines()
    path = tmp_path_factory.mktemp("par") / "rank3.log"  # a rank in the name, like real runs
    reps = TIMELINE_FULL_BYTES * 3 // len(body) + 1
    path.write_bytes(body * reps + b"tail without newline " + body[:200].replace(b"\n", b" "))
    return path


@pytest.mark.parametrize("jobs", [2, 3, 7])
def test_parallel_equals_single_process(big_log: Path, jobs: int) -> None:
    one = _scan(big_log, 1)
    many = _scan(big_log, jobs)
    assert one.files == many.files
    assert one.timeline and one.symptoms and one.facts  # the input exercises all three
    assert _as_json(one) == _as_json(many)


def test_both_engines_parallel(big_log: Path) -> None:
    if "hyperscan" not in available_engines():
        pytest.skip("hyperscan not installed")
    assert _as_json(_scan(big_log, 2, "hyperscan")) == _as_json(_scan(big_log, 2, "python"))


def test_split_at_every_line_of_a_wrapped_message(tmp_path: Path, monkeypatch) -> None:
    """Range boundaries right inside hard-wrapped messages, tqdm \\r redraws and rank-prefixed
    lines: the look-ahead past a range's end still joins the continuation lines."""
    region = (b"[rank1]: AssertionError: Check batch related parameters. train_batch_size is not\n"
              b"equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 *\n"
              b"8 * 1\n"
              + _sample_lines())
    filler = (ROOT / "sample_logs/fp16_loss_scale_collapse/train.log").read_bytes()
    reps = TIMELINE_FULL_BYTES // len(filler) + 2
    head = filler * reps
    path = tmp_path / "train.log"
    path.write_bytes(head + region + filler)
    one = _scan(path, 1)
    assert "batch-size-mismatch" in one.symptoms
    starts = [len(head)] + [len(head) + i + 1 for i, b in enumerate(region[:600]) if b == 10]
    for cut in starts[:6]:
        monkeypatch.setattr(parallel, "split_points", lambda fd, size, parts, c=cut: [0, c])
        assert _as_json(_scan(path, 2)) == _as_json(one), cut


def test_small_or_compressed_files_stay_in_one_process(tmp_path: Path, monkeypatch) -> None:
    import gzip

    calls: list[int] = []
    real = parallel.scan_parallel
    monkeypatch.setattr("dsdoctor.logs.parallel.scan_parallel",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    small = tmp_path / "small.log"
    small.write_bytes(b"[rank0]: hello\n" * 100)
    gz = tmp_path / "big.log.gz"
    gz.write_bytes(gzip.compress(b"x\n" * (TIMELINE_FULL_BYTES)))
    for p in (small, gz):
        s = Scanner(engine="python", jobs=2, parallel_min_bytes=1)
        s.scan_path(str(p))
    assert calls == []
    s = Scanner(engine="python", jobs=1, parallel_min_bytes=1)
    big = tmp_path / "big.log"
    big.write_bytes(b"x\n" * TIMELINE_FULL_BYTES)
    s.scan_path(str(big))
    assert calls == []
    Scanner(engine="python", jobs=2, parallel_min_bytes=1).scan_path(str(big))
    assert calls == [1]


def test_split_points_are_line_starts(tmp_path: Path) -> None:
    import os

    path = tmp_path / "x.log"
    data = b"".join(b"line %d " % i + b"y" * (i % 50) + b"\n" for i in range(20000))
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        starts = parallel.split_points(fd, len(data), 4)
    finally:
        os.close(fd)
    assert starts[0] == 0 and len(starts) == 4
    assert all(data[s - 1:s] == b"\n" for s in starts[1:])


def test_capped_huge_line_noted_with_its_line_in_parallel(big_log: Path, tmp_path: Path,
                                                         monkeypatch) -> None:
    # A line past the per-line match cap (scan.py) in a worker's range: the note names its line
    # in the whole file, as the single-process scan does.
    if "hyperscan" not in available_engines():
        pytest.skip("the cap applies to windowed hits (hyperscan)")
    from dsdoctor.logs import scan

    monkeypatch.setattr(scan, "MAX_WINDOW_MATCHES_PER_LINE", 20)
    overflow = ("[2025-01-09 10:50:51,231] [INFO] [loss_scaler.py:190:update_scale] "
                "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, "
                "reducing to 32768")  # the DeepSpeed 0.14 line of the samples
    huge = (" ".join([overflow] * 300) + "\n").encode()
    path = tmp_path / "huge.log"
    path.write_bytes(big_log.read_bytes() + huge + b"after\n")
    one, many = _scan(path, 1, "hyperscan"), _scan(path, 2, "hyperscan")
    noted = [n for n in one.notes if "without line breaks" in n]
    assert noted and noted == [n for n in many.notes if "without line breaks" in n]
    assert _as_json(one) == _as_json(many)
