"""The progress bar of long scans (cli/progress.py) and the scanner's progress callback."""

from __future__ import annotations

import io
from pathlib import Path

from dsdoctor.cli.progress import ProgressBar, progress_bar
from dsdoctor.logs.scan import CHUNK_BYTES, scan_files

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "fp16_loss_scale_collapse" / "train.log"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_before_a_second_then_bytes_rate_and_eta() -> None:
    clock, out = Clock(), Terminal()
    bar = ProgressBar(out, clock=clock)
    bar("big.log", 8 << 20, 64 << 20)
    assert out.getvalue() == ""  # a short scan stays silent
    clock.now += 2.0
    bar("big.log", 16 << 20, 64 << 20)
    shown = out.getvalue().split("\r\x1b[2K")[-1]
    assert "big.log" in shown and "25%" in shown and "16.0 MiB / 64.0 MiB" in shown
    assert "8.0 MiB/s" in shown and "ETA 0:00:06" in shown  # 48 MiB left at 8 MiB/s
    bar.close()
    assert out.getvalue().endswith("\n")


def test_one_line_per_file_and_the_last_state_of_each() -> None:
    clock, out = Clock(), Terminal()
    bar = ProgressBar(out, clock=clock)
    clock.now += 1.5
    bar("rank0.log", 10, 10)
    bar("rank1.log", 5, 20)
    bar.close()
    lines = out.getvalue().split("\n")
    assert "rank0.log" in lines[0] and "100%" in lines[0]
    assert "rank1.log" in lines[1] and "25%" in lines[1]


def test_unknown_size_shows_bytes_and_rate_only() -> None:
    clock, out = Clock(), Terminal()
    bar = ProgressBar(out, clock=clock)
    clock.now += 2.0
    bar("<stdin>", 4 << 20, None)
    shown = out.getvalue()
    assert "<stdin>  4.0 MiB  2.0 MiB/s" in shown and "ETA" not in shown


def test_silent_when_not_a_terminal_or_quiet() -> None:
    for stream, quiet in ((io.StringIO(), False), (Terminal(), True)):
        clock = Clock()
        bar = progress_bar(quiet, stream)
        bar.clock = clock
        clock.now += 5
        bar("big.log", 1, 2)
        bar.close()
        assert stream.getvalue() == ""


def test_the_scanner_reports_every_chunk_up_to_the_file_size(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    text = SAMPLE.read_bytes()
    log.write_bytes(text * (CHUNK_BYTES // len(text) + 2))  # a little over one chunk
    seen: list[tuple[str, int, int | None]] = []
    scan_files([str(log)], on_progress=lambda *a: seen.append(a))
    size = log.stat().st_size
    assert len(seen) >= 2 and all(name == str(log) and total == size for name, _, total in seen)
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and done[-1] == size
