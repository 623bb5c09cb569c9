"""Bounded reads of the user's input files, guarded writes of reports, terminal-safe text.

Why one module: every input file (--config, --env, --script, --model) and every report output
goes through the same three checks, so a FIFO, an endless device, a planted control sequence or
an ``-o`` pointed at the log itself is handled once, the same way, everywhere.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from typing import IO

from dsdoctor.errors import UsageError

# C0 controls except tab and newline, DEL, and the C1 block (\x80-\x9f is CSI, OSC... on
# terminals that honour 8-bit controls). ESC is C0, so full resets and charset switches go too.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def terminal_safe(text: str) -> str:
    """Text with control characters shown as ``\\xNN`` (newlines and tabs kept)."""
    return _CONTROL_RE.sub(_escape, text)


def one_line(text: str) -> str:
    """Text for a one-line message: every control character, newline included, shown as ``\\xNN``."""
    return _CONTROL_OR_NEWLINE_RE.sub(_escape, text)


def json_safe(text: str) -> str:
    """JSON text with raw C1/DEL characters written as ``\\uNNNN`` escapes (same value)."""
    return re.sub(r"[\x7f-\x9f]", lambda m: f"\\u{ord(m.group()):04x}", text)


def read_bounded(path: str, limit: int, what: str, hint: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or UsageError with one line.

    FIFOs, sockets and devices are refused before any read (a FIFO with no writer would block,
    /dev/zero would never end); the open is non-blocking for the same reason, and the read stops
    at ``limit + 1`` bytes whatever fstat said (a file may grow while read).
    """
    shown = one_line(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file; check the {what} path") from None
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


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_report(path: str, text: str, inputs: list[str], force: bool) -> None:
    """Write a report to ``-o FILE``: never over an input, over another file only with --force."""
    shown = one_line(path)
    for inp in inputs:
        if inp and inp not in ("-", "local") and _same_file(path, inp):
            raise UsageError(f"{shown}: is one of the input files; choose another --output path")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{shown}: already exists; pass --force to overwrite it or choose "
                         "another --output path")
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"{shown}: cannot write ({exc.strerror or exc})") from None


def write_stdout(text: str, stream: IO[str] | None = None) -> None:
    """Write to stdout whatever its encoding; a full or closed stdout is one line, exit 2."""
    out = stream or sys.stdout
    try:
        if out is None:
            raise OSError("standard output is closed")
        try:
            out.write(text)
        except UnicodeEncodeError:
            enc = getattr(out, "encoding", None) or "ascii"
            out.write(text.encode(enc, errors="backslashreplace").decode(enc, errors="replace"))
        out.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        msg = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"cannot write the report to standard output ({msg}); use --output "
                         "FILE") from None


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
