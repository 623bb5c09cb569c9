"""The log view's lines and search (dsdoctor/watch/logview.py) on a real sample log."""

from __future__ import annotations

import shutil
from pathlib import Path

from dsdoctor.watch import logview
from dsdoctor.watch.logview import LogLines, Match

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs/healthy_zero2_trainer/train.log"


def test_lines_by_number_match_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(logview, "STRIDE", 7)  # many index slots on a small file
    path = tmp_path / "train.log"
    shutil.copy(SAMPLE, path)
    want = SAMPLE.read_bytes().split(b"\n")[:-1]  # the file ends with a newline
    lines = LogLines(str(path))
    assert lines.refresh() == len(want)
    for first in (1, 6, 7, 8, 50, 200, 240):
        got = lines.read(first, 5)
        assert got == [logview.shown(w) for w in want[first - 1:first + 4]]
    assert lines.read(300, 5) == []


def test_growth_and_truncation(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"one\ntwo\nthr")
    lines = LogLines(str(path))
    assert lines.refresh() == 3
    assert lines.read(3, 2) == ["thr"]
    with open(path, "ab") as fh:
        fh.write(b"ee\nfour\n")
    assert lines.refresh() == 4
    assert lines.read(3, 2) == ["three", "four"]
    path.write_bytes(b"new\n")  # truncated and rewritten: numbers start again
    assert lines.refresh() == 1
    assert lines.read(1, 3) == ["new"]


def test_search_forward_backward_and_wrap(tmp_path, monkeypatch):
    monkeypatch.setattr(logview, "BLOCK", 64)  # matches across block boundaries
    monkeypatch.setattr(logview, "STRIDE", 5)
    path = tmp_path / "train.log"
    shutil.copy(SAMPLE, path)
    text = SAMPLE.read_bytes().decode("utf-8", "replace").split("\n")
    hits = [i + 1 for i, t in enumerate(text) if "loss_type=none" in t.lower()]
    assert len(hits) >= 1
    lines = LogLines(str(path))
    lines.refresh()
    first = lines.search("LOSS_TYPE=None", 0)
    assert first is not None and first.line == hits[0]
    shown_line = lines.read(first.line, 1)[0]
    assert shown_line[first.column:first.column + 14].lower() == "loss_type=none"
    # n after the last hit wraps to the first; N before the first wraps to the last
    assert lines.search("loss_type=None", hits[-1]) == Match(hits[0], first.column)
    back = lines.search("loss_type=None", hits[0], forward=False)
    assert back is not None and back.line == hits[-1]
    assert lines.search("no such text anywhere", 10) is None
    assert lines.search("", 10) is None


def test_shown_line_has_no_control_bytes():
    assert logview.shown(b"\x1b[31mred\x1b[0m\tx\r 5%|bar\x07\r\n") == "red    x  5%|bar "


def test_a_match_far_along_a_giant_line(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"x\n" + b"." * 5000 + b"NEEDLE\n")
    lines = LogLines(str(path))
    lines.refresh()
    assert lines.search("needle", 0) == Match(2, 5000)
    assert len(lines.read(2, 1)[0]) == logview.MAX_SHOWN_CHARS
    assert lines.read(2, 1, cut=False)[0].endswith("NEEDLE")
