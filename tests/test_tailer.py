"""watch follows a log without losing lines (issue 14, items 4 and 6): backlogs are read whole,
rotations of every kind keep the lines written around them, bad paths are one line."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from dsdoctor.logs.scan import Scanner, TailScanner
from dsdoctor.watch.tailer import Tailer

# Real format: DeepSpeed loss scaler (DeepSpeed#931), as in tests/test_watch.py
OVERFLOW = ("[2023-04-28 06:51:31,392] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384\n")


def _args() -> argparse.Namespace:
    return argparse.Namespace(config=[], model=None, env=None, script=[], ds_version=None,
                              engine="auto", logs=[])


def _drain(t: Tailer) -> int:
    """Poll to the end; the number of overflow events seen."""
    for _ in range(50):
        if not t.poll() and not t.poll():
            break
    t.flush(final=True)
    return sum(1 for kind, _, _ in t.take_events() if kind == "fp16-overflow")


def _append(path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_rename_rotation_keeps_lines_written_before_the_switch(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(OVERFLOW)
    t = Tailer(str(path), _args())
    assert _drain(t) == 1
    _append(path, OVERFLOW)  # written just before the rotation, not yet read
    os.rename(path, str(path) + ".1")
    path.write_text(OVERFLOW * 2)
    assert _drain(t) == 3


def test_delete_and_recreate_keeps_lines(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(OVERFLOW)
    t = Tailer(str(path), _args())
    assert _drain(t) == 1
    _append(path, OVERFLOW)
    path.unlink()
    path.write_text(OVERFLOW)
    assert _drain(t) == 2


def test_copytruncate_keeps_lines_written_before_the_copy(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("starting\n" + OVERFLOW)
    t = Tailer(str(path), _args())
    assert _drain(t) == 1
    _append(path, OVERFLOW)  # copied to .1 by logrotate, then truncated away here
    shutil.copyfile(path, str(path) + ".1")
    with open(path, "r+") as fh:
        fh.truncate(0)
    _append(path, OVERFLOW + "more\n" * 10)  # regrows past the old position before the poll
    assert _drain(t) == 2  # the one copied away and the one after the truncation


def test_path_becoming_a_directory_is_an_error_line_not_an_exception(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(OVERFLOW)
    t = Tailer(str(path), _args())
    assert _drain(t) == 1
    path.unlink()
    path.mkdir()
    assert _drain(t) == 0
    assert "directory" in t.state.error
    assert "\n" not in t.state.error


def test_unterminated_line_is_not_buffered_without_limit():
    tail = TailScanner("live.log", Scanner())
    piece = b"x" * (4 << 20)
    peak = 0
    for _ in range(25):  # 100 MiB without a newline
        tail.feed(piece)
        peak = max(peak, len(tail._buf))
    assert peak <= TailScanner.MAX_PENDING_BYTES + len(piece)


def test_exit_on_idle_reads_the_whole_backlog(tmp_path):
    path = tmp_path / "train.log"
    n = 40_000  # about 6 MB: more than one read
    path.write_text(OVERFLOW * n)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(path), "--plain",
                           "--exit-on-idle", "0"], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr
    assert proc.stdout.count(": fp16-overflow:") == n


def test_watch_plain_survives_the_path_turning_into_a_directory(tmp_path, capsys):
    # driven poll by poll (no clock): the path turns into a directory between two polls
    from dsdoctor.watch.follow import Follower
    from dsdoctor.watch.plain import PlainWatch

    path = tmp_path / "train.log"
    path.write_text(OVERFLOW)
    said: list[str] = []
    plain = PlainWatch(Follower([str(path)], _args()), out=said.append)
    plain.follower.poll()
    plain.report()
    path.unlink()
    path.mkdir()
    plain.exit_on_idle = 0
    plain.run()
    assert sum(": fp16-overflow:" in s for s in said) == 1
    assert "is a directory" in capsys.readouterr().err


def test_watch_refuses_a_fifo_and_a_utf16_log_in_one_line(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    utf16 = tmp_path / "ps.log"
    utf16.write_bytes(OVERFLOW.encode("utf-16"))
    for path in (fifo, utf16):
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(path), "--plain",
                               "--exit-on-idle", "0"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
