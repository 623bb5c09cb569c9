"""A progress bar on stderr for long scans: bytes, rate and ETA, one line per file.

Shown only when stderr is a terminal, the scan has run for about a second (small logs stay
silent) and ``--quiet`` is not given. A finished file keeps its line; the next file gets its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

#: Seconds a scan runs before the bar appears, and between two redraws.
SHOW_AFTER = 1.0
REDRAW_EVERY = 0.1
BAR_WIDTH = 24


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """Called as ``bar(name, bytes_read, size_or_None)`` after each chunk; ``close()`` at the end."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic,
                 enabled: bool | None = None):
        self.stream = stream
        self.clock = clock
        self.enabled = stream.isatty() if enabled is None else enabled
        self.started = clock()
        self._file: str | None = None
        self._file_started = self.started
        self._last_draw = 0.0
        self._last_call = self.started
        self._drawn = False  # a line of the current file is on screen

    def __call__(self, name: str, done: int, size: int | None) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if name != self._file:
            # a file's clock starts when the previous one ended (its first chunk is already read)
            self._end_line()
            self._file_started = self._last_call if self._file is not None else self.started
            self._file = name
        self._last_call = now
        if now - self.started < SHOW_AFTER or (self._drawn and now - self._last_draw < REDRAW_EVERY
                                                 and (size is None or done < size)):
            return
        self._last_draw = now
        elapsed = max(now - self._file_started, 1e-6)
        rate = done / elapsed
        if size:
            frac = min(done / size, 1.0)
            filled = int(frac * BAR_WIDTH)
            eta = (size - done) / rate if rate > 0 and done < size else 0.0
            text = (f"{name}  [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {frac:4.0%}  "
                    f"{_size(done)} / {_size(size)}  {_size(rate)}/s  ETA {_clock(eta)}")
        else:  # a pipe or a compressed log: no total to measure against
            text = f"{name}  {_size(done)}  {_size(rate)}/s"
        self.stream.write("\r\x1b[2K" + text)
        self.stream.flush()
        self._drawn = True

    def _end_line(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn = False

    def close(self) -> None:
        """Leave the last file's line on screen and move to a new line."""
        self._end_line()


def add_quiet_option(parser: object) -> None:
    """``--quiet``: no progress bar (it only ever goes to a terminal's stderr)."""
    parser.add_argument("--quiet", "-q", action="store_true",  # type: ignore[attr-defined]
                        help="no progress bar on stderr for long scans")


def progress_bar(quiet: bool, stream: TextIO) -> ProgressBar:
    """The bar for a command's scan: silent with --quiet or when ``stream`` is no terminal."""
    return ProgressBar(stream, enabled=False if quiet else None)


__all__ = ["ProgressBar", "add_quiet_option", "progress_bar"]
