"""Bounded reads of the user's input files, guarded writes of reports, terminal-safe text.

Why one module: every input file (--config, --env, --script, --model) and every report output
goes through the same three checks, so a FIFO, an endless device, a planted control sequence or
an ``-o`` pointed at the log itself is handled once, the same way, everywhere.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from typing import IO

from dsdoctor.errors import UsageError

# C0 controls except tab and newline, DEL, and the C1 block (\x80-\x9f is CSI, OSC... on
# terminals that honour 8-bit controls). ESC is C0, so full resets and charset switches go too.
# The most of a training script read (--script, or one a launch line names): scriptcheck parses
# it, launch.py reads a shell script's commands; both read it through read_bounded.
MAX_SCRIPT_BYTES = 8 * 2**20

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Our own colours (SGR: ESC [ digits m) are the only sequence a colour report keeps.
_SGR_OR_CONTROL_RE = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    # \u00NN reads as what it is on a terminal and is the same character inside a JSON string
    return f"\\u{ord(m.group()):04x}"


def _escape_unless_sgr(m: re.Match[str]) -> str:
    return m.group() if len(m.group()) > 1 else _escape(m)


def terminal_safe(text: str, keep_colors: bool = False) -> str:
    """Text with control characters shown as ``\\u00NN`` (newlines and tabs kept; with
    ``keep_colors``, SGR colour sequences too)."""
    if keep_colors:
        return _SGR_OR_CONTROL_RE.sub(_escape_unless_sgr, text)
    return _CONTROL_RE.sub(_escape, text)


def one_line(text: str) -> str:
    """Text for a one-line message: every control character, newline included, escaped."""
    return _CONTROL_OR_NEWLINE_RE.sub(_escape, str(text))


def read_bounded(path: str, limit: int, what: str, hint: str, noun: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or UsageError with one line.

    FIFOs, sockets and devices are refused before any read (a FIFO with no writer would block,
    /dev/zero would never end); the open is non-blocking for the same reason, and the read stops
    at ``limit + 1`` bytes whatever fstat said (a file may grow while read).
    """
    shown = one_line(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UsageError(f"{shown}: cannot read (no such {noun}); check the {what} path") from None
    except IsADirectoryError:
        raise UsageError(f"{shown}: is a directory; {hint}") from None
    except PermissionError:
        raise UsageError(f"{shown}: permission denied; make it readable") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{shown}: cannot open ({getattr(exc, 'strerror', None) or exc}); "
                         f"check the {what} path") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{shown}: is a directory; {hint}")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{shown}: not a regular file (a pipe or device); {hint}")
        if st.st_size > limit:
            raise UsageError(f"{shown}: {st.st_size} bytes is larger than {limit} bytes for a "
                             f"{what} file; {hint}")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise UsageError(f"{shown}: cannot read ({exc.strerror or exc}); check the {what} "
                         "path") from None
    finally:
        os.close(fd)
    if got > limit:
        raise UsageError(f"{shown}: larger than {limit} bytes for a {what} file; {hint}")
    return b"".join(chunks)


def same_file(a: str, b: str) -> bool:
    """The same file on disk; when one does not exist (yet), the same absolute path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)
    except ValueError:  # a NUL in a path
        return False


def _same_as(ident: tuple[int, int] | None, path: str, other: str) -> bool:
    """:func:`same_file` of ``path`` (whose (device, inode) is ``ident``, None when it does not
    exist) and ``other``."""
    if ident is None:
        return same_file(path, other)
    try:
        st = os.stat(other)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == ident


def refuse_inputs(path: str, inputs: Sequence[str], option: str) -> None:
    """UsageError when ``path`` is one of the inputs, whatever the spelling or link."""
    try:  # the path's own identity once, not once per input (100,000 logs: 100,000 stats)
        st = os.stat(path)
        ident: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except (OSError, ValueError):
        ident = None
    for inp in inputs:
        if inp and inp not in ("-", "local") and _same_as(ident, path, inp):
            raise UsageError(f"{one_line(path)}: is one of the input files; choose another "
                             f"{option} path")


def write_report(path: str, text: str, inputs: list[str], force: bool) -> None:
    """Write a report to ``-o FILE``: never over an input, over another file only with --force;
    atomically, never through a link, never into a directory or device (see _write_file)."""
    _write_file(path, terminal_safe(text).encode("utf-8", errors="backslashreplace"), inputs,
                force, 0o666, "--output")


def write_new_file(path: str, data: bytes, inputs: Sequence[str], force: bool, mode: int,
                   option: str) -> None:
    """Write a file the user asked for (``--fix-out``): as :func:`write_report`, with ``mode``'s
    permission bits (a copy of a private config stays private) under the same limits."""
    _write_file(path, data, inputs, force, mode, option)


def _umask() -> int:
    """The process umask, read without changing it (os.umask sets it: a race with threads)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def file_mode(base: int) -> int:
    """Permission bits for a file dsdoctor writes: ``base`` less the umask, never group- or
    other-writable, never executable (a report or a config is not a program)."""
    return stat.S_IMODE(base) & ~_umask() & 0o644


def _write_file(path: str, data: bytes, inputs: Sequence[str], force: bool, mode: int,
                option: str) -> None:
    """The one way dsdoctor writes a user's file: never over an input or a link to one (whatever
    ``force`` says), never into a directory, device, FIFO or socket, over an existing file only
    with ``force``; written to a temporary file in the same directory and renamed over the
    target, so a link at ``path`` is replaced, never written through, and a failed write (a full
    disk) leaves the old file whole. Every failure is a UsageError (one line, exit 2)."""
    shown = one_line(path)
    refuse_inputs(path, inputs, option)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{option} {shown}: cannot check it "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    if st is not None:
        target = st
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.stat(path)
            except OSError:
                target = st  # a dangling link: replaced by the file
        if stat.S_ISDIR(target.st_mode):
            raise UsageError(f"{option} {shown}: is a directory; give a file name")
        if not (stat.S_ISREG(target.st_mode) or stat.S_ISLNK(target.st_mode)):
            raise UsageError(f"{option} {shown}: not a regular file (a pipe or device); give a "
                             "file name, or leave the option out to write to standard output")
        if not force:
            raise UsageError(f"{option} {shown}: already exists; pass --force to overwrite it or "
                             "choose another path")
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dsdoctor-", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), file_mode(mode))
        os.replace(tmp, path)  # a link at ``path`` is replaced, never written through
        tmp = None
    except OSError as exc:
        raise UsageError(f"{option} {shown}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


class SafeStdout:
    """sys.stdout for the commands: control characters from logs, configs and file names never
    reach the terminal (our SGR colours excepted), any encoding and lone surrogates are written
    (backslash escapes), and a closed stdout is an OSError the entry point reports in one line."""

    def __init__(self, stream: IO[str] | None):
        self._stream = stream
        if stream is not None and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass

    def _target(self) -> IO[str]:
        if self._stream is None or getattr(self._stream, "closed", False):
            raise OSError(errno.EBADF, "standard output is closed")
        return self._stream

    def write(self, text: str) -> int:
        self._target().write(terminal_safe(text, keep_colors=True))
        return len(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._stream is not None and not getattr(self._stream, "closed", False) and \
            self._stream.isatty()

    def __getattr__(self, name: str):
        return getattr(self._target(), name)


def input_paths(args: object) -> list[str]:
    """Every file an invocation reads, for the -o overwrite check."""
    out: list[str] = list(getattr(args, "logs", None) or [])
    for name in ("log", "config", "env", "script", "model"):
        v = getattr(args, name, None)
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if isinstance(x, str))
    return out
