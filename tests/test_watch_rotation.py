"""watch loses no event line (issue 24, item 8): numbered event lines written through a backlog,
logrotate's copytruncate and create, a delete and recreate and a swap of the log's directory are
each reported exactly once, counted against the lines written. No clock: the tests drive the
follower's poll themselves (or synchronize a writer thread with a lock) and bound loops by
attempts."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.plain import PlainWatch

# Real formats with a counter in a number field: DeepSpeed's loss scaler (DeepSpeed#931, the rank)
# and torch's CUDA OOM (tests/test_checks_advice.py's OOM_80G, the process id).
OVERFLOW = ("[2023-04-28 06:51:31,392] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank {n} Skipping step. Attempted loss scale: 32768, reducing to 16384\n")
OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 has a "
       "total capacity of 79.32 GiB of which 2.40 GiB is free. Process {n} has 76.92 GiB memory in "
       "use.\n")
NUMBER = re.compile(r"OVERFLOW! Rank (\d+) |Process (\d+) has")
MAX_POLLS = 10_000  # a bound on any drain, never reached when the follower makes progress


class Writer:
    """A training process's log handler: one handle in append mode (logging.FileHandler), kept
    across rotations until told to reopen (logrotate's postrotate HUP)."""

    def __init__(self, path: Path):
        self.path = path
        self.fh = open(path, "a")  # noqa: SIM115 - kept open across rotations, as a process does
        self.written = 0
        self.lock = threading.Lock()

    def write(self, count: int) -> None:
        for _ in range(count):
            with self.lock:
                n = self.written
                line = (OVERFLOW if n % 2 else OOM).format(n=n)
                # a line of noise of varying length between events: no two lines alike
                self.fh.write(line + f"step {n} took {n % 7}.{n % 97:02d}s\n")
                self.fh.flush()
                self.written += 1

    def reopen(self) -> None:
        with self.lock:
            self.fh.close()
            self.fh = open(self.path, "a")  # noqa: SIM115

    def close(self) -> None:
        self.fh.close()


def _numbers(texts, strict: bool = True) -> Counter:
    """How many times each numbered line is in ``texts`` (``strict``: every text is one)."""
    seen: Counter = Counter()
    for text in texts:
        m = NUMBER.search(text)
        if not m:
            assert not strict, text
            continue
        seen[int(m.group(1) or m.group(2))] += 1
    return seen


class Reader:
    """The follower as --plain and the TUI drive it, the events it reports counted."""

    def __init__(self, path: Path):
        self.follower = Follower([str(path)], AnalysisInputs.of(engine="python"))
        self.texts: list[str] = []

    def poll(self) -> None:
        self.follower.poll()
        self.texts += [ev.text for kind, ev, _ in self.follower.take_events()
                       if kind in ("fp16-overflow", "gpu-oom")]

    def drain(self, strict: bool = True) -> Counter:
        for _ in range(MAX_POLLS):
            if not self.follower.poll() and not self.follower.poll():
                break
        else:
            raise AssertionError("the follower never reached the end of the log")
        self.follower.flush(final=True)
        self.poll()
        return _numbers(self.texts, strict)


def _exactly_once(seen: Counter, written: int) -> None:
    missing = [n for n in range(written) if seen[n] == 0]
    twice = [n for n, c in seen.items() if c > 1]
    assert not missing and not twice, (f"{len(missing)} of {written} lines missing "
                                       f"(first {missing[:5]}), {len(twice)} twice")
    assert set(seen) == set(range(written))


def _shift(path: Path) -> None:
    """logrotate's numbering: PATH.1 becomes PATH.2 (and so on) before a new PATH.1."""
    n = 1
    while Path(f"{path}.{n}").exists():
        n += 1
    for k in range(n, 1, -1):
        os.rename(f"{path}.{k - 1}", f"{path}.{k}")


def _copytruncate(path: Path) -> None:
    _shift(path)
    shutil.copyfile(path, f"{path}.1")
    with open(path, "r+") as fh:
        fh.truncate(0)


def _rename_create(path: Path) -> None:
    _shift(path)
    os.rename(path, f"{path}.1")
    path.touch()


def _delete_recreate(path: Path) -> None:
    path.unlink()
    path.touch()


def _swap_directory(path: Path) -> None:
    folder = path.parent
    n = 1
    while Path(f"{folder}.old{n}").exists():
        n += 1
    os.rename(folder, f"{folder}.old{n}")
    folder.mkdir()
    path.touch()


ROTATIONS = {"copytruncate": _copytruncate, "create": _rename_create,
             "delete-recreate": _delete_recreate, "directory-swap": _swap_directory}


@pytest.mark.parametrize("poll_between", [True, False], ids=["polled", "unpolled"])
@pytest.mark.parametrize("rotation", list(ROTATIONS))
def test_every_line_is_reported_once_through_a_rotation(tmp_path, rotation, poll_between):
    path = tmp_path / "logs" / "train.log"
    path.parent.mkdir()
    writer = Writer(path)
    reader = Reader(path)
    writer.write(300)
    reader.poll()  # read part of it: the rest is written before the rotation, unread
    writer.write(200)
    for _ in range(3):  # three rotations, the follower polled at least once between two
        ROTATIONS[rotation](path)
        if poll_between:
            reader.poll()
        if rotation != "copytruncate":
            writer.write(150)  # the process still writes to the old file until told to reopen
            if poll_between:
                reader.poll()
            writer.reopen()
        # the new file grows past the old position before the follower looks again
        writer.write(700)
        reader.poll()
    writer.close()
    _exactly_once(reader.drain(), writer.written)


def test_a_backlog_larger_than_one_read_rotated_while_read(tmp_path):
    path = tmp_path / "train.log"
    writer = Writer(path)
    writer.write(40_000)  # about 12 MB: several reads of READ_BYTES
    reader = Reader(path)
    reader.poll()  # one read of the backlog
    _rename_create(path)
    writer.write(100)
    writer.reopen()
    writer.write(100)
    reader.poll()
    _copytruncate(path)
    writer.write(3000)
    writer.close()
    _exactly_once(reader.drain(), writer.written)


def test_copytruncate_by_a_writer_without_append_mode(tmp_path):
    """A writer that does not open with O_APPEND keeps its offset after the truncation: the file
    starts with a hole of NULs, which is no line of the log."""
    path = tmp_path / "train.log"
    fh = open(path, "w")  # noqa: SIM115
    reader = Reader(path)
    texts = [OVERFLOW.format(n=n) for n in range(200)]
    fh.write("".join(texts[:100]))
    fh.flush()
    reader.poll()
    _copytruncate(path)
    fh.write("".join(texts[100:]))
    fh.close()
    _exactly_once(reader.drain(), 200)
    assert reader.follower.tailers[0].lines_read == 200


def test_copytruncate_race_with_a_free_running_writer(tmp_path):
    """A writer thread never stops; logrotate's copy and truncate run while it writes. The lines
    it writes after the copy was taken and before the truncation exist in no file (logrotate's
    own caveat): each of them is reported at most once; every other line exactly once."""
    path = tmp_path / "train.log"
    writer = Writer(path)
    reader = Reader(path)
    stop = threading.Event()
    tokens = threading.Semaphore(0)  # ten lines each: the writer is bounded, never paced by a clock
    wrote = threading.Condition()

    def write_on() -> None:
        while tokens.acquire() and not stop.is_set():
            writer.write(10)
            with wrote:
                wrote.notify_all()

    thread = threading.Thread(target=write_on)
    thread.start()
    windows = []
    started = 0  # the first line of the file as it is now
    target = 0  # lines released so far
    try:
        for _ in range(5):
            tokens.release(30)
            target += 300
            # the reader first sees lines of this file (on a loaded machine the writer thread may
            # not have run yet: a reader that read nothing cannot tell the rotated copy)
            with wrote:
                wrote.wait_for(lambda need=target - 290: writer.written >= need, timeout=600)
            for _ in range(5):
                reader.poll()
            tokens.release(30)  # still writing while the file is copied and truncated
            target += 300
            shutil.copyfile(path, f"{path}.1")
            copied = _numbers(Path(f"{path}.1").read_text().splitlines(), strict=False)
            with writer.lock:  # the truncation between two of the writer's lines
                with open(path, "r+") as fh:
                    fh.truncate(0)
                # after the copy's last whole line, up to the truncation: in no file
                windows.append(range(max(copied, default=started - 1) + 1, writer.written))
                started = writer.written
    finally:
        stop.set()
        tokens.release()
        thread.join()
    writer.close()
    seen = reader.drain(strict=False)  # a line cut by the copy is an event without its number
    racy = {n for window in windows for n in window}
    assert all(c == 1 for c in seen.values())
    missing = [n for n in range(writer.written) if seen[n] == 0 and n not in racy]
    assert not missing, f"{len(missing)} lines outside the copy-to-truncate windows missing"


def test_plain_says_every_line_once_through_rotations(tmp_path):
    path = tmp_path / "logs" / "train.log"
    path.parent.mkdir()
    writer = Writer(path)
    said: list[str] = []
    plain = PlainWatch(Follower([str(path)], AnalysisInputs.of(engine="python")), out=said.append)
    writer.write(200)
    for rotation in ROTATIONS.values():
        plain.follower.poll()
        plain.report()
        writer.write(100)
        rotation(path)
        writer.write(50)
        writer.reopen()
        writer.write(300)
    writer.close()
    plain.exit_on_idle = 0  # --exit-on-idle 0: the rest is read whole before leaving
    plain.run()
    events = [s for s in said if ": fp16-overflow: " in s or ": gpu-oom: " in s]
    _exactly_once(_numbers(events), writer.written)


def test_the_tui_counts_every_line_through_rotations(tmp_path):
    pytest.importorskip("textual")
    from dsdoctor.watch.app import WatchApp

    path = tmp_path / "logs" / "train.log"
    path.parent.mkdir()
    writer = Writer(path)
    writer.write(200)
    follower = Follower([str(path)], AnalysisInputs.of(engine="python"))
    received: list[str] = []

    class CountingApp(WatchApp):
        def _apply(self, state, events):
            received.extend(ev.text for kind, ev, _ in events
                            if kind in ("fp16-overflow", "gpu-oom"))
            super()._apply(state, events)

    async def scenario():
        app = CountingApp(follower, poll=0.05, py_spy_note=lambda: None)
        async with app.run_test() as pilot:

            async def caught_up() -> None:
                """Every line written so far received (at most 300 pauses: bounded, no clock)."""
                for _ in range(300):
                    await pilot.pause(0.05)
                    if len(received) >= writer.written:
                        return

            for rotation in ROTATIONS.values():
                await caught_up()  # one rotation between two polls at most (docs/watch.md)
                writer.write(100)
                rotation(path)
                writer.write(50)
                writer.reopen()
                writer.write(300)
            await caught_up()
            await pilot.press("q")

    asyncio.run(scenario())
    writer.close()
    _exactly_once(_numbers(received), writer.written)
