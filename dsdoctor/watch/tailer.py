"""Follow a growing log for ``dsdoctor watch``: read new bytes, scan them, evaluate the rules.

Used by the TUI (tui.py) and by ``watch --plain``; it imports no UI library.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from dsdoctor.diagnose.pipeline import findings_of
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import Scanner, ScanResult, TailScanner
from dsdoctor.model import Evidence, Finding, TimelinePoint
from dsdoctor.render.analysis import _fmt_num
from dsdoctor.safeio import one_line
from dsdoctor.watch.progress import TICK_CARRY_BYTES, TqdmTick, find_ticks

POLL_SECONDS = 0.5
OVERFLOW = "fp16-overflow"  # the symptom of a scaler's "OVERFLOW! ... Skipping step" line
READ_BYTES = 4 << 20
HEAD_BYTES = 64  # identity of the followed file, to notice a truncate-and-regrow
MAX_RECOVERED_BYTES = 64 << 20  # most bytes read back from a copytruncate copy


@dataclass
class WatchState:
    """What the UI shows; replaced (not mutated) by the worker under a lock."""

    lines: int = 0
    bytes: int = 0
    symptoms: tuple = ()
    findings: tuple[Finding, ...] = ()
    timeline: str = ""
    error: str = ""


def _head_of(fh: BinaryIO, n: int) -> bytes:
    """The first ``n`` bytes of an open file, its position unchanged."""
    if hasattr(os, "pread"):
        return os.pread(fh.fileno(), n, 0)
    pos = fh.tell()
    fh.seek(0)
    try:
        return fh.read(n)
    finally:
        fh.seek(pos)


class Tailer:
    """Follows one path like ``tail -F``, feeding a TailScanner, without losing lines.

    * The open file is kept: after a rename rotation or delete-and-recreate, what was written
      to the old file before the switch is read to its end first, then the new file from 0.
    * copytruncate: the lines written between our last read and the truncation were copied to
      the rotated file (``PATH.1``, checked by its first bytes); they are read from there.
    * A path that disappears, becomes a directory or unreadable sets ``error`` (one line) and
      is retried; nothing raises.
    """

    def __init__(self, path: str, inputs: AnalysisInputs, from_start: bool = True,
                 scanner: Scanner | None = None):
        self.path = path
        self.inputs = inputs
        self.events: list[tuple[str, Evidence, dict]] = []
        # hook for watch/follow.py: timeline events are progress (stall detection)
        self.on_progress: Callable[[Evidence, dict], None] | None = None
        # and the fp16 scaler's overflow lines (a skipped step, the scale it goes to)
        self.on_overflow: Callable[[Evidence, dict], None] | None = None
        # and tqdm ticks, found in the raw bytes (a bar without a loss has no format pattern)
        self.on_tick: Callable[[str, TqdmTick], None] | None = None
        self._newlines = 0  # line ends fed so far: the line number of a tick
        self._carry = b""  # the unfinished end of the last chunk (no line end in it)
        self._lock = threading.Lock()
        self._fh: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._head = b""  # the first bytes of the followed file: its identity across truncation
        self._pos = 0
        # several logs followed together share one Scanner, so their symptoms aggregate
        self._new_scanner(scanner)
        self.state = WatchState()
        self.notes: list[str] = []  # rotations and truncations, for --plain
        if not from_start:
            try:
                self._pos = os.path.getsize(path)
            except OSError:
                self._pos = 0

    def _new_scanner(self, scanner: Scanner | None = None) -> None:
        self._scanner = scanner or Scanner(engine=self.inputs.engine)
        self.tail = TailScanner(self.path, self._scanner, on_event=self._on_event)

    def _feed(self, data: bytes) -> None:
        self.tail.feed(data)
        if self.on_tick is not None:
            buf = self._carry + data
            ticks = find_ticks(buf)
            end = ticks[-1][0] + len(ticks[-1][1].text) if ticks else 0
            for offset, tick in ticks:
                line = self._newlines + buf.count(b"\n", 0, offset) + 1
                self.on_tick(f"{self.path}:{line}", tick)
            cut = max(end, buf.rfind(b"\n") + 1, len(buf) - TICK_CARRY_BYTES)
            self._carry = buf[cut:]
        self._newlines += data.count(b"\n")

    def _on_event(self, kind: str, ev: Evidence, values: dict) -> None:
        if kind == "timeline" and self.on_progress is not None:
            self.on_progress(ev, values)
        if kind == OVERFLOW and self.on_overflow is not None:
            self.on_overflow(ev, values)
        if kind == "timeline" or kind.startswith("fact:"):
            return
        with self._lock:
            self.events.append((kind, ev, values))

    def take_events(self) -> list[tuple[str, Evidence, dict]]:
        with self._lock:
            out, self.events = self.events, []
        return out

    def _set_error(self, message: str) -> None:
        self.state = dataclasses.replace(self.state, error=one_line(message))

    def _read_some(self) -> bytes:
        assert self._fh is not None
        return self._fh.read(READ_BYTES)

    def _open_current(self) -> bool:
        """Open the path (again); False with ``error`` set when it cannot be followed now."""
        try:
            # non-blocking open: a FIFO put at the path must not hang the watcher
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            fh = os.fdopen(fd, "rb")
        except FileNotFoundError:
            self._set_error(f"waiting for {self.path}")
            return False
        except IsADirectoryError:
            self._set_error(f"{self.path}: is a directory now; waiting for the log file")
            return False
        except OSError as exc:
            self._set_error(f"{self.path}: cannot read ({exc.strerror or exc}); waiting")
            return False
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            fh.close()
            self._set_error(f"{self.path}: not a regular file now; waiting for the log file")
            return False
        if self._fh is not None:
            self._fh.close()
        self._fh = fh
        self._ino = (st.st_dev, st.st_ino)
        fh.seek(self._pos)
        self._head = _head_of(fh, HEAD_BYTES)
        if self.state.error:
            self._set_error("")
        return True

    def _restart(self, note: str) -> None:
        """A new file at the path: scan it from its start with a fresh scanner."""
        self.tail.flush(final=True)
        self.notes.append(note)
        self._pos = 0
        self._head = b""
        self._newlines, self._carry = 0, b""
        # the symptoms seen so far stay (same Scanner); line numbers start again at 1
        self._new_scanner(self._scanner)

    def _rotated_copy_tail(self) -> bytes:
        """After copytruncate: the bytes past our position in the rotated copy, if we find it."""
        for cand in (self.path + ".1", self.path + ".0"):
            try:
                with open(cand, "rb") as fh:
                    if self._head and fh.read(len(self._head)) != self._head:
                        continue
                    fh.seek(self._pos)
                    return fh.read(MAX_RECOVERED_BYTES)
            except OSError:
                continue
        return b""

    def _truncated(self) -> bool:
        """The open file got shorter than our position, or its first bytes changed."""
        assert self._fh is not None
        try:
            if os.fstat(self._fh.fileno()).st_size < self._pos:
                return True
            return bool(self._head) and _head_of(self._fh, len(self._head)) != self._head
        except OSError:
            return False

    def poll(self) -> bool:
        """Read what is new; True when something was read."""
        if self._fh is None and not self._open_current():
            return False
        assert self._fh is not None
        if self._truncated():
            # copytruncate: recover what was copied away, then start over on the truncated file
            lost = self._rotated_copy_tail()
            if lost:
                self._pos += len(lost)
                self._feed(lost)
            self._restart(f"{self.path}: truncated (copytruncate); following it from its start")
            self._fh.seek(0)
            return True
        data = self._read_some()
        if data:
            self._pos += len(data)
            self._feed(data)
            return True
        # At the end of the open file: has the path moved on to another file, or been truncated?
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._set_error(f"waiting for {self.path}")
            return False
        except OSError as exc:
            self._set_error(f"{self.path}: cannot stat ({exc.strerror or exc}); waiting")
            return False
        if stat.S_ISDIR(st.st_mode):
            self._set_error(f"{self.path}: is a directory now; waiting for the log file")
            return False
        if (st.st_dev, st.st_ino) != self._ino:
            # rename rotation or delete-and-recreate: read the old file to its very end first
            while data := self._read_some():
                self._pos += len(data)
                self._feed(data)
            self._restart(f"{self.path}: a new file appeared (rotation); following it from its start")
            self._fh.close()
            self._fh = None
            return self._open_current() and self.poll()
        if len(self._head) < HEAD_BYTES and self._pos:
            self._head = _head_of(self._fh, min(HEAD_BYTES, self._pos))
        self.tail.flush()
        return False

    def snapshot(self) -> WatchState:
        return watch_state(self.inputs, self.tail.result(), self.state)


def live_timeline(points: list[TimelinePoint], skipped_seen: int = 0) -> str:
    """The status line's run summary, short enough for 80 columns, skipped steps by the steps:
    ``steps 0-17, skipped steps 17, loss 2.3 → nan, loss scale 65536 → 1``. ``skipped_seen``
    counts the overflow lines, which come before the next step line says ``skipped=N``."""
    steps = [p.step for p in points if p.step is not None]
    losses = [p.loss for p in points if p.loss is not None]
    scales = [p.loss_scale for p in points if p.loss_scale is not None]
    skipped = max([p.skipped for p in points if p.skipped is not None] + [skipped_seen])
    parts = []
    if steps:
        parts.append(f"steps {min(steps)}–{max(steps)}")
    if skipped:
        parts.append(f"skipped steps {skipped}")
    if losses:
        parts.append(f"loss {_fmt_num(losses[0])} → {_fmt_num(losses[-1])}")
    if scales:
        parts.append(f"loss scale {_fmt_num(scales[0])} → {_fmt_num(scales[-1])}")
    return ", ".join(parts)


def watch_state(inputs: AnalysisInputs, res: ScanResult, previous: WatchState,
                skipped: int = 0) -> WatchState:
    """What the UI shows for a scan so far: the rules evaluated on it (one or several logs);
    ``skipped``: the steps skipped as counted from the overflow lines (LiveSeries.overflow)."""
    try:
        findings = findings_of(inputs, res)
        error = ""
    except Exception as exc:  # noqa: BLE001 - a rule failing must not kill the watcher
        findings, error = list(previous.findings), f"rules: {exc}"
    return WatchState(
        lines=sum(f.lines for f in res.files),
        bytes=sum(f.bytes for f in res.files),
        symptoms=tuple(sorted(res.symptoms.values(), key=lambda s: (s.first.file, s.first.line))),
        findings=tuple(findings),
        timeline=live_timeline(res.timeline, skipped),
        error=error,
    )
