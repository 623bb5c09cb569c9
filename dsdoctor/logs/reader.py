"""Open logs as binary streams and normalize the pieces of lines that the scanner looks at.

Logs are never decoded whole: the scanner works on raw byte chunks and only decodes the few
segments that a prefilter selected. A *segment* is one ``\\n``- or ``\\r``-delimited piece of a
physical line (tqdm redraws its bar with ``\\r``, so one physical line can hold thousands of them).
"""

from __future__ import annotations

import gzip
import os
import re
import sys
from dataclasses import dataclass
from typing import BinaryIO

from dsdoctor.errors import UsageError

#: Longest normalized text kept for one segment (evidence and matching). Lines of many MB exist.
MAX_SEGMENT_CHARS = 16_384

ANSI_RE = re.compile(
    r"\x1b\[[0-9;?<=>]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
)
# Markdown quote markers of pasted logs: "> ", ">> ", "> > ".
_QUOTE_RE = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+")
# Rank prefixes added by launchers, peeled off so that one pattern serves every launcher.
_RANK_PREFIXES = (
    re.compile(r"^\[rank(?P<rank>\d+)\]:[ \t]?"),  # torch >= 2.2 ([rank3]:)
    re.compile(r"^\[default(?P<rank>\d+)\]:[ \t]?"),  # torchrun --tee / --redirects
    re.compile(r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:[ \t]?"),  # mpirun --tag-output
    re.compile(r"^(?P<rank>\d{1,5}):[ \t]"),  # srun --label, deepspeed multinode "3: "
    # pdsh / deepspeed multi-node host prefix ("node-12: ", "gpu001: "): a host name with a digit.
    re.compile(r"^(?P<host>[a-z][a-z0-9-]*[0-9][a-z0-9.-]*):[ \t]"),
)
_RANK_IN_NAME_RE = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?:\D|$)", re.IGNORECASE)

_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_BINARY_MAGIC = {
    b"PK\x03\x04": "a zip archive (a torch checkpoint?)",
    b"\x7fELF": "an executable (ELF)",
    b"\x93NUMPY": "a NumPy array",
    b"\x89HDF": "an HDF5 file",
}


@dataclass(frozen=True)
class Segment:
    """A normalized piece of a log line, ready for the precise patterns."""

    text: str
    rank: int | None
    host: str | None = None


def normalize(raw: bytes) -> Segment:
    """Decode and clean one segment: bad UTF-8, NUL, ANSI, quote markers, rank prefixes."""
    if len(raw) > MAX_SEGMENT_CHARS * 4:
        raw = raw[: MAX_SEGMENT_CHARS * 4]
    text = raw.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    text = text.rstrip("\r\n")
    rank: int | None = None
    host: str | None = None
    # Peel in a loop: "node-1: [rank3]: > text" carries several layers.
    for _ in range(4):
        before = text
        m = _QUOTE_RE.match(text)
        if m and m.end():
            text = text[m.end():]
        for pat in _RANK_PREFIXES:
            m = pat.match(text)
            if m:
                gd = m.groupdict()
                if gd.get("rank") is not None:
                    rank = int(gd["rank"])
                elif gd.get("host"):
                    host = gd["host"]
                text = text[m.end():]
                break
        if text == before:
            break
    if len(text) > MAX_SEGMENT_CHARS:
        text = text[:MAX_SEGMENT_CHARS]
    return Segment(text=text, rank=rank, host=host)


def rank_from_filename(path: str) -> int | None:
    """One log per rank is common (``rank3.log``, ``train_rank_3.txt``)."""
    m = _RANK_IN_NAME_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


@dataclass
class OpenedLog:
    """A binary stream and what we know of it."""

    name: str
    stream: BinaryIO
    size: int | None  # bytes on disk (compressed size for .gz), None for stdin
    compressed: bool

    def close(self) -> None:
        if self.stream is not sys.stdin.buffer:
            self.stream.close()


def _sniff(path: str, head: bytes) -> None:
    """Refuse files that are clearly not logs, with one line that says what they look like."""
    if head.startswith(_PICKLE_MAGIC) or path.endswith((".pkl", ".pickle")) and head[:1] == b"\x80":
        raise UsageError(
            f"{path}: looks like a Python pickle, not a log (dsdoctor never unpickles); "
            "pass the training log instead"
        )
    for magic, what in _BINARY_MAGIC.items():
        if head.startswith(magic):
            raise UsageError(f"{path}: looks like {what}, not a text log; pass the training log")
    if head:
        sample = head[:65536]
        controls = sum(1 for b in sample if b < 9 or 13 < b < 27 or 27 < b < 32)
        if controls > 0.3 * len(sample):
            raise UsageError(
                f"{path}: does not look like a text log ({100 * controls // len(sample)}% "
                "binary bytes at its start); pass the training log"
            )


def open_log(path: str) -> OpenedLog:
    """Open a plain or gzip log, or standard input for ``-``. Raises UsageError on bad input."""
    if path == "-":
        return OpenedLog("<stdin>", sys.stdin.buffer, None, False)
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory; pass the log files in it (e.g. {path}/*.log)")
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; check the path") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; make it readable") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot open ({exc.strerror or exc})") from None
    size = os.fstat(fh.fileno()).st_size
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=fh, mode="rb")
        try:
            peek = gz.read(65536)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            if isinstance(exc, EOFError):
                peek = b""  # truncated within the first block: nothing readable
            else:
                fh.close()
                raise UsageError(f"{path}: corrupt gzip file ({exc}); re-copy the log") from None
        _sniff(path, peek)
        fh.seek(0)
        return OpenedLog(path, gzip.GzipFile(fileobj=fh, mode="rb"), size, True)
    head = fh.read(65536)
    fh.seek(0)
    _sniff(path, head)
    return OpenedLog(path, fh, size, False)
