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
HEAD_BYTES = 64  # the first bytes: a second check of identity across truncation
ANCHOR_BYTES = 64  # the last bytes read: still there at the next read, or it was truncated
RETIRE_QUIET_POLLS = 100  # a rotated-away file is closed after this many polls without growth
MAX_OLD_FILES = 8  # rotated-away files kept open at once (the oldest is read to its end first)
MAX_COPY_CANDIDATES = 32  # siblings checked for the rotated copy after a copytruncate


@dataclass
class WatchState:
    """What the UI shows; replaced (not mutated) by the worker under a lock."""

    lines: int = 0
    bytes: int = 0
    symptoms: tuple = ()
    findings: tuple[Finding, ...] = ()
    timeline: str = ""
    error: str = ""


def _pread(fh: BinaryIO, n: int, offset: int) -> bytes:
    """``n`` bytes of an open file at ``offset``, in one read where the OS has pread (so a check
    of the bytes before our position and the new bytes come from the same file state)."""
    if n <= 0:
        return b""
    if hasattr(os, "pread"):
        return os.pread(fh.fileno(), n, offset)
    fh.seek(offset)
    return fh.read(n)


def _head_of(fh: BinaryIO, n: int) -> bytes:
    """The first ``n`` bytes of an open file."""
    return _pread(fh, n, 0)


class _Truncated(Exception):
    """The open file no longer holds the bytes we read: it was truncated (and maybe regrown)."""


@dataclass(eq=False)
class _Source:
    """One open file of the followed path: the live one, or an older one still drained.

    ``pos`` is the file offset read up to; ``anchor`` the bytes just before it (what we read
    last), checked again at each read, so that a truncation is seen even when the file has
    regrown past ``pos`` before the next poll, and even when its first bytes are unchanged.
    """

    fh: BinaryIO
    ident: tuple[int, int]
    tail: TailScanner
    pos: int = 0
    head: bytes = b""
    anchor: bytes = b""
    newlines: int = 0  # line ends fed so far: the line number of a tqdm tick
    carry: bytes = b""  # the unfinished end of the last chunk (for tqdm ticks)
    complete: bool = False  # a rotated copy: nothing more will be written to it
    quiet: int = 0  # polls without new bytes since it was retired
    skip_nul: bool = False  # after a truncation: the hole a non-append writer leaves

    def read(self) -> bytes:
        """The next bytes (at most READ_BYTES), checked to continue what was read before."""
        if os.fstat(self.fh.fileno()).st_size < self.pos:
            raise _Truncated
        a = len(self.anchor)
        buf = _pread(self.fh, a + READ_BYTES, self.pos - a)
        if buf[:a] != self.anchor or (
                self.head and _head_of(self.fh, len(self.head)) != self.head):
            raise _Truncated
        data = buf[a:]
        if data:
            self.pos += len(data)
            self.anchor = (self.anchor + data)[-ANCHOR_BYTES:]
            if len(self.head) < HEAD_BYTES:
                self.head = _head_of(self.fh, min(HEAD_BYTES, self.pos))
        return data


def _same_bytes_at(fh: BinaryIO, offset: int, expected: bytes) -> bool:
    return _pread(fh, len(expected), offset) == expected


class Tailer:
    """Follows one path like ``tail -F``, feeding a TailScanner, without losing lines.

    * Rename rotation (logrotate ``create``), delete-and-recreate, the log's directory swapped:
      the old file stays open and keeps being read (before the new one, so old lines come
      first) while its writer may still write to it; it is closed once the new file has grown
      and the old one stayed quiet for RETIRE_QUIET_POLLS polls.
    * copytruncate: the bytes before our position are checked at every read, so a truncation is
      seen even when the file regrew past our position; the lines written between our last read
      and the copy are read from the rotated copy (a sibling ``PATH.1``, ``PATH-DATE``..., the
      one holding our last bytes at our position), then the truncated file from its start.
      Lines written after logrotate's copy and before its truncation exist in no file: see
      docs/watch.md.
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
        self._lock = threading.Lock()
        self._cur: _Source | None = None
        self._old: list[_Source] = []  # rotated away, still drained, oldest first
        self._start = 0  # where to start reading the path's first file
        self._closed_lines = 0  # lines of the files already closed
        # several logs followed together share one Scanner, so their symptoms aggregate
        self._scanner = scanner or Scanner(engine=self.inputs.engine)
        self.tail = self._new_tail()
        self.state = WatchState()
        self.notes: list[str] = []  # rotations and truncations, for --plain
        if not from_start:
            try:
                self._start = os.path.getsize(path)
            except OSError:
                self._start = 0

    def _new_tail(self) -> TailScanner:
        # the symptoms seen so far stay (same Scanner); line numbers start again at 1
        return TailScanner(self.path, self._scanner, on_event=self._on_event)

    @property
    def lines_read(self) -> int:
        """Every line read from the path, across all its files (rotations included)."""
        return self._closed_lines + sum(s.tail.lines_read for s in self._old) + self.tail.lines_read

    def flush(self, final: bool = False) -> None:
        """Scan the held-back lines of every open file (``final``: a last line without newline)."""
        for src in self._old:
            src.tail.flush(final=final)
        self.tail.flush(final=final)

    def _feed(self, src: _Source, data: bytes) -> None:
        if src.skip_nul:
            # a writer without O_APPEND keeps its offset after a truncation: the file starts
            # with a hole of NULs, no line of the log
            kept = data.lstrip(b"\0")
            if not kept:
                return
            src.skip_nul, data = False, kept
        src.tail.feed(data)
        if self.on_tick is not None:
            buf = src.carry + data
            ticks = find_ticks(buf)
            end = ticks[-1][0] + len(ticks[-1][1].text) if ticks else 0
            for offset, tick in ticks:
                line = src.newlines + buf.count(b"\n", 0, offset) + 1
                self.on_tick(f"{self.path}:{line}", tick)
            cut = max(end, buf.rfind(b"\n") + 1, len(buf) - TICK_CARRY_BYTES)
            src.carry = buf[cut:]
        src.newlines += data.count(b"\n")

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

    def _open_path(self) -> tuple[BinaryIO, os.stat_result] | None:
        """The file now at the path, open; None with ``error`` set when it cannot be followed."""
        try:
            # non-blocking open: a FIFO put at the path must not hang the watcher
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            fh = os.fdopen(fd, "rb")
        except FileNotFoundError:
            self._set_error(f"waiting for {self.path}")
            return None
        except IsADirectoryError:
            self._set_error(f"{self.path}: is a directory now; waiting for the log file")
            return None
        except OSError as exc:
            self._set_error(f"{self.path}: cannot read ({exc.strerror or exc}); waiting")
            return None
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            fh.close()
            self._set_error(f"{self.path}: not a regular file now; waiting for the log file")
            return None
        if self.state.error:
            self._set_error("")
        return fh, st

    def _open_first(self) -> bool:
        opened = self._open_path()
        if opened is None:
            return False
        fh, st = opened
        start = min(self._start, st.st_size)
        src = _Source(fh, (st.st_dev, st.st_ino), self.tail, pos=start,
                      head=_head_of(fh, min(HEAD_BYTES, start)),
                      anchor=_pread(fh, min(ANCHOR_BYTES, start), start - min(ANCHOR_BYTES, start)))
        self._cur = src
        return True

    def _close(self, src: _Source) -> None:
        src.tail.flush(final=True)
        self._closed_lines += src.tail.lines_read
        src.fh.close()

    def _retire(self, src: _Source) -> None:
        """Keep reading ``src`` (rotated away) after the switch; at most MAX_OLD_FILES such."""
        src.quiet = 0
        self._old.append(src)
        while len(self._old) > MAX_OLD_FILES:
            oldest = self._old.pop(0)
            self._drain(oldest, limit=None)
            self._close(oldest)

    def _drain(self, src: _Source, limit: int | None = 1) -> tuple[bool, bool]:
        """Read ``src`` (``limit`` reads, None: to its end); (read something, more pending)."""
        read = False
        n = 0
        while limit is None or n < limit:
            try:
                data = src.read()
            except (_Truncated, OSError):
                return read, False
            if not data:
                return read, False
            read = True
            n += 1
            self._feed(src, data)
            if len(data) < READ_BYTES:  # a short read: at its end for now
                return read, False
        return read, True

    def _poll_old(self) -> tuple[bool, bool]:
        """Drain the rotated-away files first; (read something, one of them has more)."""
        read = more = False
        grown = self._cur is not None and self._cur.pos > 0
        for src in list(self._old):
            got, pending = self._drain(src)
            read |= got
            more |= pending
            src.quiet = 0 if got else src.quiet + 1
            if (src.complete and not pending) or (grown and src.quiet >= RETIRE_QUIET_POLLS):
                self._old.remove(src)
                self._close(src)
        return read, more

    def _rotated_copy(self, src: _Source) -> BinaryIO | None:
        """After copytruncate: the rotated copy of ``src``, the sibling that holds the bytes we
        read last at our position (and our first bytes at its start)."""
        if src.pos == 0 or not src.anchor:
            return None
        folder = os.path.dirname(self.path) or "."
        base = os.path.basename(self.path)
        try:
            names = [n for n in os.listdir(folder) if n.startswith(base) and n != base]
        except OSError:
            return None
        cands = []
        for name in names:
            full = os.path.join(folder, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size >= src.pos:
                cands.append((name != base + ".1", -st.st_mtime_ns, full))
        for _, _, full in sorted(cands)[:MAX_COPY_CANDIDATES]:
            try:
                fh = open(full, "rb")  # noqa: SIM115 - kept open as a source
            except OSError:
                continue
            at = src.pos - len(src.anchor)
            if _same_bytes_at(fh, at, src.anchor) and _same_bytes_at(fh, 0, src.head):
                return fh
            fh.close()
        return None

    def _truncated(self, src: _Source) -> None:
        """copytruncate: read the rest from the rotated copy, follow the file from its start."""
        copy = self._rotated_copy(src)
        if copy is not None:
            st = os.fstat(copy.fileno())
            old = dataclasses.replace(src, fh=copy, ident=(st.st_dev, st.st_ino), complete=True)
            self._retire(old)
            self.notes.append(f"{self.path}: truncated (copytruncate); the lines before the "
                              f"truncation are read from {copy.name}, then the file from its start")
        else:
            src.tail.flush(final=True)
            self._closed_lines += src.tail.lines_read
            self.notes.append(f"{self.path}: truncated, and no rotated copy holding its last lines "
                              "was found next to it: lines written since the last read may be "
                              "missing; following it from its start")
        self.tail = self._new_tail()
        self._cur = _Source(src.fh, src.ident, self.tail, skip_nul=True)

    def _switch(self, opened: tuple[BinaryIO, os.stat_result]) -> None:
        """A new file at the path (rotation, delete and recreate, directory swap)."""
        assert self._cur is not None
        fh, st = opened
        self._retire(self._cur)
        self.notes.append(f"{self.path}: a new file appeared (rotation); following it from its "
                          "start, and the old one while it is still written")
        self.tail = self._new_tail()
        self._cur = _Source(fh, (st.st_dev, st.st_ino), self.tail)

    def poll(self) -> bool:
        """Read what is new; True when something was read."""
        read, more = self._poll_old()
        if more:  # old lines before new ones
            return True
        if self._cur is None and not self._open_first():
            return read
        for _ in range(4):  # a truncation or a new file, then its bytes
            cur = self._cur
            assert cur is not None
            try:
                data = cur.read()
            except _Truncated:
                self._truncated(cur)
                read = True
                if self._poll_old()[1]:
                    return True
                continue
            except OSError as exc:
                self._set_error(f"{self.path}: cannot read ({exc.strerror or exc}); waiting")
                return read
            if data:
                self._feed(cur, data)
                read = True
                if len(data) == READ_BYTES:  # more to read: at the next poll
                    return True
            # at the end of the open file: has the path moved on to another file?
            if not self._moved_on():
                break
            read = True
        cur = self._cur
        assert cur is not None
        cur.tail.flush()
        return read

    def _moved_on(self) -> bool:
        """The path holds another file now (switched to it then)."""
        assert self._cur is not None
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
        if (st.st_dev, st.st_ino) == self._cur.ident:
            if self.state.error:
                self._set_error("")
            return False
        opened = self._open_path()
        if opened is None:
            return False
        if (opened[1].st_dev, opened[1].st_ino) == self._cur.ident:  # moved back in between
            opened[0].close()
            return False
        self._switch(opened)
        return True

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
