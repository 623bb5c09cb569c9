"""Open logs as binary streams and normalize the pieces of lines that the scanner looks at.

Logs are never decoded whole: the scanner works on raw byte chunks and only decodes the few
segments that a prefilter selected. A *segment* is one ``\\n``- or ``\\r``-delimited piece of a
physical line (tqdm redraws its bar with ``\\r``, so one physical line can hold thousands of them).
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import BinaryIO

from dsdoctor.errors import UsageError
from dsdoctor.logs.paste import Repair, repair_paste
from dsdoctor.logs.streams import (
    Chained,
    Decompressed,
    Transcoded,
    compression_of,
    legacy_encoding_of,
    read_up_to,
    utf_encoding_of,
    zstd_available,
)
from dsdoctor.safeio import one_line

#: Longest normalized text kept for one segment (evidence and matching). Lines of many MB exist.
MAX_SEGMENT_CHARS = 16_384

ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC: titles, links
    r"|\x1b[ -/]+[0-~]"  # nF: charset switches (ESC ( 0), ESC # 8
    r"|\x1b[0-~]"  # two-byte escapes: full reset (ESC c), keypad modes, ESC 7/8
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|\x9d[^\x07\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC
)
# What is left after the sequences: lone ESC, other C0 controls but tab, DEL, the C1 block.
# Removed, so that no log line can drive the terminal of whoever reads dsdoctor's output.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# What random or compressed bytes decode to, and a text log rarely holds.
_BINARY_CHAR_RE = re.compile(r"[\ufffd\x01-\x08\x0e-\x1a\x1c-\x1f]")
# Markdown quote markers of pasted logs: "> ", ">> ", "> > ".
_QUOTE_RE = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+")
# Markdown around a pasted line: "**RuntimeError: ...**", "`[rank0]: ...`", a fence glued to the
# first line ("```python Traceback ...") or to the last ("...Error: ...```"). Only a pair of bold
# or single backticks is peeled ("ValueError: `x` must be set" keeps its backticks).
_MARKUP_RE = re.compile(r"^[ \t]*(?:```(?:[a-z][a-z0-9+-]*)?[ \t]+|```(?=\S)|(?P<pair>\*\*|`)(?=\S))")
_FENCE_END_RE = re.compile(r"[ \t]*```[ \t]*$")
#: torchrun's --tee prefix: the role and the node's *local* rank (``[default3]:``).
_LOCAL_RANK_PREFIX = re.compile(r"^\[default(?P<rank>\d+)\]:[ \t]?")
# Rank prefixes added by launchers, peeled off so that one pattern serves every launcher.
_RANK_PREFIXES = (
    re.compile(r"^\[rank(?P<rank>\d+)\]:[ \t]?"),  # torch >= 2.2 ([rank3]:)
    _LOCAL_RANK_PREFIX,  # torchrun --tee / --redirects
    re.compile(r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:[ \t]?"),  # mpirun --tag-output
    re.compile(r"^(?P<rank>\d{1,5}):[ \t]"),  # srun --label, deepspeed multinode "3: "
    # pdsh / deepspeed multi-node host prefix ("node-12: ", "gpu001: "): a host name with a digit.
    re.compile(r"^(?P<host>[a-z][a-z0-9-]*[0-9][a-z0-9.-]*):[ \t]"),
    # NeMo-Run / torchx role prefix before torchrun's: "i.pretrain/0 [default2]:[rank2]: ".
    re.compile(r"^[\w.-]+/\d+[ \t](?=\[(?:default|rank)\d+\]:)"),
    # Ray's log-collector prefix on every worker line: "(WorkerDict pid=12504, ip=10.0.0.1) ".
    re.compile(r"^\((?:raylet|[A-Za-z_][\w.]*(?: pid=\d+)(?:, ip=[\w.-]+)?)\)(?:[ \t]|$)"),
    # SageMaker's mpirun (smddp): "[1,mpirank:0,algo-1]<stderr>:" (rank and host; a real job log
    # in pacman100/accelerate-aws-sagemaker's README).
    re.compile(r"^\[\d+,mpirank:(?P<rank>\d+),(?P<host>[\w.-]+)\]<std(?:out|err)>:[ \t]?"),
    # Kubernetes CRI log files (a node's /var/log/pods, Loki/Promtail exports): "<RFC 3339> stdout F "
    # (time, stream, F = full line or P = partial; Grafana Loki's docs of its "cri" stage).
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) std(?:out|err) [FP] "),
)
# Indentation before a bracketed launcher prefix or a quote marker (a paste that indented every
# line: "    [rank0]: Traceback ..."). Not before "3: " or "node-1: ": indented, those are list
# items and key-value lines far more often than srun's or pdsh's prefixes.
_INDENT_RE = re.compile(r"^[ \t]+(?=\[(?:rank|default)\d+\]:|\[\d+,(?:mpirank:)?\d+(?:,[\w.-]+)?\]<std|>)")
# Could any quote marker, markup or prefix above start this text? One match instead of ten per
# segment. Built from the patterns themselves, so a new prefix can never be missed by it.
_ANY_PREFIX_RE = re.compile("|".join(
    "(?:" + re.sub(r"\(\?P<\w+>", "(?:", p.pattern.removeprefix("^")) + ")"
    for p in (_INDENT_RE, _QUOTE_RE, _MARKUP_RE, *_RANK_PREFIXES)))
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
    # the rank is a node's local rank: torchrun's ``[default3]:`` (``[${role_name}${local_rank}]:``,
    # torch 2.13.0 local_elastic_agent.py:154) with no ``[rankN]:`` inside it to give the global one
    local_rank: bool = False


def normalize(raw: bytes) -> Segment:
    """Decode and clean one segment: bad UTF-8, NUL, ANSI, quote markers, rank prefixes."""
    if len(raw) > MAX_SEGMENT_CHARS * 4:
        raw = raw[: MAX_SEGMENT_CHARS * 4]
    text = raw.decode("utf-8", errors="replace")
    text = text.rstrip("\r\n")
    if "\x1b" in text or "\x9b" in text or "\x9d" in text:
        text = ANSI_RE.sub("", text)
    if _CONTROL_RE.search(text):
        text = _CONTROL_RE.sub("", text)
    rank: int | None = None
    host: str | None = None
    local = False
    # Peel in a loop: "node-1: [rank3]: > text" carries several layers.
    for _ in range(4 if _ANY_PREFIX_RE.match(text) or text.endswith("```") else 0):
        before = text
        m = _INDENT_RE.match(text)
        if m:
            text = text[m.end():]
        m = _QUOTE_RE.match(text)
        if m and m.end():
            text = text[m.end():]
        if "`" in text or "*" in text:
            text = _peel_markup(text)
        for pat in _RANK_PREFIXES:
            m = pat.match(text)
            if m:
                gd = m.groupdict()
                if gd.get("rank") is not None:
                    rank = int(gd["rank"])
                    local = pat is _LOCAL_RANK_PREFIX
                if gd.get("host"):
                    host = gd["host"]
                text = text[m.end():]
                break
        if text == before:
            break
    if len(text) > MAX_SEGMENT_CHARS:
        text = text[:MAX_SEGMENT_CHARS]
    return Segment(text=text, rank=rank, host=host, local_rank=local)


def line_prefix(text: str) -> str:
    """The quote markers and launcher prefixes that begin ``text`` ("> ", "[rank3]: ", "3: "...),
    as normalize peels them; "" when none. paste.py drops them from the continuation lines of a
    hard-wrapped message (each physical line got its own prefix after the wrap)."""
    rest = text
    for _ in range(4):
        m = _INDENT_RE.match(rest) or _QUOTE_RE.match(rest)
        if m is None or not m.end():
            m = next((m for m in (p.match(rest) for p in _RANK_PREFIXES) if m), None)
        if m is None or not m.end():
            break
        rest = rest[m.end():]
    return text[:len(text) - len(rest)]


def _peel_markup(text: str) -> str:
    """The line without the markdown a paste put around it (bold, backticks, a glued fence)."""
    m = _MARKUP_RE.match(text)
    if m:
        pair = m.group("pair")
        if pair is None:
            text = text[m.end():]
        elif text.rstrip().endswith(pair) and len(text.rstrip()) > m.end() + len(pair):
            text = text[m.end():len(text.rstrip()) - len(pair)]
    if text.endswith("```") or text.rstrip().endswith("```"):
        text = _FENCE_END_RE.sub("", text)
    return text


def rank_from_filename(path: str) -> int | None:
    """One log per rank is common (``rank3.log``, ``train_rank_3.txt``)."""
    m = _RANK_IN_NAME_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


#: torchrun --log-dir: ``<log_dir>/<run_id>/attempt_<n>/<local_rank>/stdout.log`` (and stderr.log),
#: one folder per local rank of the node (torch 2.13.0
#: torch/distributed/elastic/multiprocessing/api.py:290-291,322-329).
_ELASTIC_LOG_DIR_RE = re.compile(r"(?:^|[/\\])attempt_\d+[/\\](\d+)[/\\]std(?:out|err)\.log$")


def local_rank_from_path(path: str) -> int | None:
    """The node's local rank of a torchrun --log-dir file (``attempt_0/3/stdout.log``: 3)."""
    m = _ELASTIC_LOG_DIR_RE.search(path)
    return int(m.group(1)) if m else None


@dataclass
class OpenedLog:
    """A forward-only binary stream of a log's text (decompressed, UTF-8) and what we know of it."""

    name: str
    stream: BinaryIO
    size: int | None  # bytes on disk (compressed size when compressed), None for pipes and stdin
    compressed: bool
    encoding: str | None = None  # "utf-16" etc. when transcoded to UTF-8
    notes: list[str] = field(default_factory=list)  # what the wrappers had to drop, for the report
    repairs: list[Repair] = field(default_factory=list)  # paste damage repaired (paste.py)
    _file: BinaryIO | None = None  # the file this opened (never standard input)
    rewritten: bool = False  # the text was repaired (paste.py): the stream is not the file's bytes

    @property
    def bytes_as_on_disk(self) -> bool:
        """True when the stream yields the file's own bytes (not decompressed, transcoded or
        repaired): the scanner may then read the file directly (preadv, parallel ranges)."""
        return (self._file is not None and self.size is not None and not self.compressed
                and not self.encoding and not self.rewritten)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


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
    sample = head[:65536]
    if not sample:
        return
    # Runs of NULs are a crashed writer's preallocated blocks: skipped, not counted as binary.
    text = sample.replace(b"\x00", b"")
    if not text:
        raise UsageError(f"{path}: only NUL bytes at its start, not a text log; pass the "
                         "training log")
    decoded = text.decode("utf-8", errors="replace")
    bad = len(_BINARY_CHAR_RE.findall(decoded))
    # Random or compressed bytes are mostly invalid UTF-8; a log with a few latin-1 bytes is not.
    if bad > 0.1 * len(decoded):
        raise UsageError(
            f"{path}: does not look like a text log ({100 * bad // len(decoded)}% "
            "binary bytes at its start); pass the training log (plain, .gz, .bz2, .xz or .zst)"
        )


def _open_file(path: str, wait_for_writer: bool = True) -> tuple[BinaryIO, int | None]:
    """Open a path without blocking: regular files (with size), pipes and ttys (size None)."""
    shown = one_line(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang (it reads as empty instead).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file; check the path") from None
    except PermissionError:
        raise UsageError(f"{shown}: permission denied; make it readable") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{shown}: cannot open ({getattr(exc, 'strerror', None) or exc})") from None
    st = os.fstat(fd)  # a folder opens too (read-only): told by this fstat, no stat before
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise UsageError(f"{shown}: is a directory; pass the log files in it (e.g. {shown}/*.log)")
    if stat.S_ISREG(st.st_mode):
        size: int | None = st.st_size
    elif stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or os.isatty(fd):
        size = None
    else:
        os.close(fd)
        raise UsageError(f"{shown}: is a device, not a log file; pass the training log")
    fifo = (st.st_dev, st.st_ino)
    if wait_for_writer and stat.S_ISFIFO(st.st_mode) and fifo not in _WRITERLESS_FIFOS \
            and not _wait_for_a_writer(fd, shown):
        _WRITERLESS_FIFOS.add(fifo)  # waited once per process
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)  # a pipe with a writer is read to its end, like cat does
    return os.fdopen(fd, "rb"), size


#: How long a FIFO is given to get its writer (``mkfifo p; dsdoctor analyze p & train > p``):
#: the writer's shell opens it at once, a slow writer then writes when it can. A FIFO nobody
#: opens for writing still reads as an empty log after this, instead of hanging.
FIFO_WRITER_WAIT_S = 10.0


_WRITERLESS_FIFOS: set[tuple[int, int]] = set()


def _wait_for_a_writer(fd: int, shown: str) -> bool:
    """Wait (at most FIFO_WRITER_WAIT_S) until the FIFO has data or its writer has gone: read
    at once, a FIFO whose writer opens it a moment later read as empty and its OOM was missed."""
    try:
        import select  # noqa: PLC0415 - only for FIFOs

        poller = select.poll()
    except (ImportError, AttributeError):  # no poll(): read as before
        return True
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if poller.poll(500):
        return True
    print(f"dsdoctor: {shown}: a FIFO with no writer yet; waiting up to "
          f"{FIFO_WRITER_WAIT_S:.0f} s for one", file=sys.stderr, flush=True)
    return bool(poller.poll(int(FIFO_WRITER_WAIT_S * 1000) - 500))


# How the notes name the legacy console encodings (each read as its superset).
_ENCODING_NAMES = {"gb18030": "GBK/GB18030", "cp932": "Shift-JIS (cp932)"}


def open_log(path: str, wait_for_writer: bool = True) -> OpenedLog:
    """Open a log: plain, gzip, bz2, xz or zstd; UTF-8, UTF-16 or UTF-32; a file, a pipe or ``-``.

    Nothing seeks (``<(...)``, FIFOs and /dev/stdin cannot). Raises UsageError on bad input.
    """
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None or getattr(sys.stdin, "closed", False):
            raise UsageError("standard input ('-') is closed; pipe the log in "
                             "('cat train.log | dsdoctor analyze -') or give its path")
        name, fh, size, owned = "<stdin>", stdin, None, None
    else:
        name = one_line(path)
        fh, size = _open_file(path, wait_for_writer)
        owned = fh
    log = OpenedLog(name, fh, size, False, None, [], _file=owned)
    try:
        magic = read_up_to(fh, 8)
        stream: BinaryIO = io.BufferedReader(Chained(magic, fh))
        kind = compression_of(magic)
        if kind:
            if kind == "zstd" and not zstd_available():
                raise UsageError(f"{name}: a zstd-compressed log, and no zstd module is installed; "
                                 "pip install zstandard, or decompress it with 'zstd -d'")
            stream = io.BufferedReader(Decompressed(kind, stream, name, log.notes), 1 << 20)
            log.compressed = True
        try:
            head = read_up_to(stream, 65536)
        except OSError as exc:
            raise UsageError(f"{name}: {exc}; re-copy the log") from None
        encoding = utf_encoding_of(head) or legacy_encoding_of(head)
        if encoding:
            stream = io.BufferedReader(Transcoded(encoding, Chained(head, stream)), 1 << 20)
            head = read_up_to(stream, 65536)
            log.encoding = encoding
            shown = _ENCODING_NAMES.get(encoding, encoding.upper())
            log.notes.append(f"{name}: {shown} text, read as such")
        _sniff(name, head)
        log.stream = io.BufferedReader(Chained(head, stream), 1 << 20)
        # Paste damage (newlines lost, ranks mixed in one line, hard wraps) repaired (paste.py).
        buffered = log.stream
        log.stream = repair_paste(name, head, buffered, log.notes, log.repairs)
        log.rewritten = log.stream is not buffered
    except BaseException:
        log.close()
        raise
    return log


def read_line_capped(stream: BinaryIO, cap: int) -> bytes:
    """The next physical line of at most ``cap`` bytes; the rest of a longer line is skipped
    without being held in memory. Empty bytes at the end of the stream."""
    line = stream.readline(cap)
    if not line or line.endswith(b"\n"):
        return line
    while True:  # skip to the end of an over-long line, one cap-sized piece at a time
        more = stream.readline(cap)
        if not more or more.endswith(b"\n"):
            return line + b"\n"


def skip_lines(stream: BinaryIO, count: int) -> BinaryIO:
    """The stream after its first ``count`` lines, skipped in 1 MiB pieces (C-speed counting,
    bounded memory whatever the lines' length)."""
    while count > 0:
        piece = stream.read(1 << 20)
        if not piece:
            return io.BytesIO(b"")
        found = piece.count(b"\n")
        if found < count:
            count -= found
            continue
        pos = -1
        for _ in range(count):
            pos = piece.index(b"\n", pos + 1)
        return io.BufferedReader(Chained(piece[pos + 1:], stream))
    return stream
