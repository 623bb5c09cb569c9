"""Lines of a followed log by number, and search in it, for the TUI's log view (no UI library).

A finding's evidence is ``file:line``; the log view jumps there. A log can be gigabytes, so lines
are not kept in memory: a sparse index holds the byte offset of every STRIDE-th line, extended as
the file grows, and a window of lines is read from the nearest indexed offset. Search reads the
file in blocks (bytes.find on lower-cased ASCII), never line by line. Line numbers count ``\\n``,
as the scanner's do (model.Evidence.line).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

STRIDE = 256  # one indexed offset per this many lines
BLOCK = 1 << 20  # bytes read at a time while indexing or searching
HEAD_BYTES = 64  # the file's identity: a truncated-and-regrown file is indexed again
MAX_SHOWN_CHARS = 400  # a line shown longer than this is cut (tqdm bars glued by \r, dumps)


@dataclass(frozen=True)
class Match:
    """Where a search found its text: the line, and the column in the shown line."""

    line: int
    column: int


class LogLines:
    """One log file: its lines by number and search in it. Reads the file; never writes it."""

    def __init__(self, path: str):
        self.path = path
        self._offsets = [0]  # byte offset of line 1, 1 + STRIDE, 1 + 2 * STRIDE, ...
        self._indexed_to = 0  # bytes counted so far (always just after a line end, or 0)
        self._lines = 0  # line ends in the first _indexed_to bytes
        self._size = 0
        self._head = b""

    def _reset(self) -> None:
        self._offsets, self._indexed_to, self._lines, self._head = [0], 0, 0, b""

    def refresh(self) -> int:
        """Index what was appended since the last call; the number of lines now (a last line
        without its newline counts)."""
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                head = fh.read(HEAD_BYTES)
                if size < self._indexed_to or not head.startswith(self._head[:len(head)]):
                    self._reset()  # truncated or replaced: its line numbers start again
                self._head = head
                fh.seek(self._indexed_to)
                pending = b""  # a line longer than a block waits for its end
                while True:
                    block = fh.read(min(BLOCK, max(0, size - fh.tell())))
                    if not block:
                        break
                    pending = self._index_block(pending + block)
                self._size = size
        except OSError:
            self._reset()
            self._size = 0
            return 0
        return self._lines + (1 if self._size > self._indexed_to else 0)

    def _index_block(self, block: bytes) -> bytes:
        """Index the complete lines of ``block`` (which starts at _indexed_to); the rest."""
        start = 0
        while True:
            nl = block.find(b"\n", start)
            if nl < 0:
                break
            self._lines += 1
            if self._lines % STRIDE == 0:
                self._offsets.append(self._indexed_to + nl + 1)
            start = nl + 1
        # only complete lines are indexed; a partial last line is read again next time
        self._indexed_to += start
        return block[start:]

    @property
    def line_count(self) -> int:
        return self._lines + (1 if self._size > self._indexed_to else 0)

    def _offset_of(self, fh, line: int) -> int:  # type: ignore[no-untyped-def]
        """Byte offset where ``line`` (1-based) starts; fh is positioned there."""
        slot = min((line - 1) // STRIDE, len(self._offsets) - 1)
        fh.seek(self._offsets[slot])
        for _ in range(line - 1 - slot * STRIDE):
            if not fh.readline():
                break
        return int(fh.tell())

    def read(self, first: int, count: int, cut: bool = True) -> list[str]:
        """Lines ``first`` .. ``first + count - 1`` (1-based) as text, cut for the screen
        (``cut=False``: whole, up to a MiB, for a search match far along a line)."""
        first = max(1, first)
        out: list[str] = []
        try:
            with open(self.path, "rb") as fh:
                self._offset_of(fh, first)
                for _ in range(count):
                    raw = fh.readline(1 << 20)
                    if not raw:
                        break
                    if not raw.endswith(b"\n"):
                        fh.readline()  # the rest of a giant line
                    out.append(shown(raw, cut=cut))
        except OSError:
            return []
        return out

    def search(self, query: str, after: int, forward: bool = True) -> Match | None:
        """The next (or previous) line containing ``query`` (case-insensitive) after (before) line
        ``after``, wrapping around the file's end; None when no line has it."""
        needle = query.lower().encode("utf-8", "replace")
        if not needle:
            return None
        self.refresh()
        try:
            with open(self.path, "rb") as fh:
                total = self._size
                cut = self._offset_of(fh, after + 1) if forward else self._offset_of(fh, after)
                if forward:
                    spans = ((cut, total), (0, cut))
                else:
                    spans = ((0, cut), (cut, total))
                for lo, hi in spans:
                    pos = (_find_first if forward else _find_last)(fh, needle, lo, hi)
                    if pos is not None:
                        return self._match_at(fh, pos, needle)
        except OSError:
            return None
        return None

    def _match_at(self, fh, pos: int, needle: bytes) -> Match:  # type: ignore[no-untyped-def]
        """The line and column of the byte offset ``pos``."""
        slot = bisect.bisect_right(self._offsets, pos) - 1
        fh.seek(self._offsets[slot])
        before = fh.read(pos - self._offsets[slot])  # at most STRIDE lines
        line = 1 + slot * STRIDE + before.count(b"\n")
        column = len(shown(before[before.rfind(b"\n") + 1:], cut=False))
        return Match(line, column)


def _find_first(fh, needle: bytes, lo: int, hi: int) -> int | None:  # type: ignore[no-untyped-def]
    pos = lo
    while pos < hi:
        fh.seek(pos)
        block = fh.read(min(BLOCK + len(needle), hi - pos)).lower()
        at = block.find(needle)
        if at >= 0:
            return pos + at
        pos += BLOCK
    return None


def _find_last(fh, needle: bytes, lo: int, hi: int) -> int | None:  # type: ignore[no-untyped-def]
    end = hi
    while end > lo:
        start = max(lo, end - BLOCK)
        fh.seek(start)
        block = fh.read(min(end + len(needle) - 1, hi) - start).lower()
        at = block.rfind(needle)
        if at >= 0 and start + at < end:
            return start + at
        end = start
    return None


def shown(raw: bytes, cut: bool = True) -> str:
    """A log line as the view shows it: decoded, line end dropped, carriage returns (tqdm's
    redraws) and tabs as spaces, control bytes out, at most MAX_SHOWN_CHARS."""
    text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
    text = text.replace("\r", " ").replace("\t", "    ")
    text = "".join(ch if ch >= " " or ch == "\x1b" else " " for ch in text)
    text = _strip_ansi(text)
    return text[:MAX_SHOWN_CHARS] if cut else text


def _strip_ansi(text: str) -> str:
    if "\x1b" not in text:
        return text
    import re  # noqa: PLC0415 - rare: only colored logs

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b", "", text)
