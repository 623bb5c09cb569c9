"""The first error of a failed run, cut from its log with its context (for ``dsdoctor report``).

The error is located by the analysis (the strongest evidence of an error finding, or the first
symptom the scan found); the fallback regex below is used only when the analysis failed or, with
one log per rank, to name each other file's first error. The excerpt keeps a traceback from its
``Traceback`` line to its exception line, keeps identical lines printed by several ranks once, and
says when a traceback is cut (the maintainer then needs all of that rank's log).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dsdoctor.logs.paste import Repair, excerpt_note
from dsdoctor.logs.reader import ANSI_RE, normalize, open_log, skip_lines
from dsdoctor.redact import redact_secrets
from dsdoctor.redact.redactor import drop_cut_tail

# A line that starts or is the first error of a failed run (checked on the rank-peeled text).
_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::|$)"
    r"|CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate"
    r"|\bexits with return code = -?[1-9]"
    r"|\bChildFailedError\b|\bfailed \(exitcode: -?[1-9]"
    r"|Watchdog caught collective operation timeout|\bNCCL error\b"
    r"|^Killed\s*$|\bSignal 9 \(SIGKILL\)|\boom-kill"
    r"|\[ERROR\]|^ERROR:"
)
# Bytes every line matched by _ERROR_RE contains: lines without them are never decoded (speed).
_RAW_HINT = re.compile(rb"Traceback|Error|Exception|out of memory|DefaultCPUAllocator|exits with|exitcode"
                       rb"|Watchdog|NCCL error|Killed|Signal 9|oom-kill|ERROR")

_TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)|^\s*│?\s*Traceback|Traceback \(most recent")
# The line that ends a traceback: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXC_LINE_RE = re.compile(r"^(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|Failure)\b")
_FRAME_RE = re.compile(r"""File "(?P<path>[^"]+)", line \d+"""
                       # rich tracebacks: "│ /opt/conda/.../deepspeed/runtime/config.py:891 in f │"
                       r"""|^[│|]\s+(?P<rpath>[^\s│|]*[/\\][^\s│|]*\.py)\b""")
_DS_MODULE = re.compile(r"deepspeed[/\\](?:runtime|ops|launcher|utils|comm|module_inject|inference)"
                        r"[/\\][\w/\\]*\.py")
_PKG_IN_PATH = re.compile(r"[/\\](?P<pkg>deepspeed|transformers|accelerate|torch|peft|trl)[/\\]")

MAX_EXCERPT_LINES = 120
CONTEXT_BEFORE = 3
CONTEXT_AFTER = 6
_LOOKBACK = 300  # lines kept before the error: a deep traceback starts this far up
#: The one-line error of the description: long enough for an exception's message, and cut in the
#: middle (never at the end, where a launcher's line says how the rank died).
MAX_ERROR_CHARS = 400


@dataclass(frozen=True)
class ExcerptLine:
    """One physical log line of the excerpt, with the ranks that printed the same text."""

    line: int
    text: str
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class LogExcerpt:
    """The first error of the run with its context."""

    file: str
    lines: tuple[ExcerptLine, ...]
    error: str  # the line that states the error (exception line when a traceback ends)
    error_line: int
    has_traceback: bool
    frame_packages: tuple[str, ...]  # packages seen in traceback frames, in order
    duplicates_dropped: int = 0
    traceback_complete: bool = False  # a traceback was read from its start to its exception line
    # First errors of the other log files (one per rank/node is common): (file, line, error).
    others: tuple[tuple[str, int, str], ...] = ()
    # DeepSpeed modules the traceback runs through ("deepspeed/runtime/zero/stage3.py"): they say
    # which code the failing run used, whatever the config given to dsdoctor says.
    deepspeed_frames: tuple[str, ...] = ()
    error_ranks: tuple[int, ...] = ()  # the ranks that printed the error line
    # Paste damage repaired in the excerpt's lines (physical lines of the file as given).
    paste_note: str = ""

    @property
    def deepspeed_in_traceback(self) -> bool:
        return "deepspeed" in self.frame_packages



def _iter_raw(path: str, start: int = 1, repairs: list[Repair] | None = None
              ) -> Generator[tuple[int, bytes], None, None]:
    """(line number, raw bytes) for each physical line from line ``start``, streamed, nothing
    decoded.

    A tqdm line holds many ``\\r`` redraws; only its last piece is what a reader sees. Line
    numbers are those of the repaired text when paste damage was repaired (``repairs`` gets
    what was done).
    """
    log = open_log(path)
    if repairs is not None:
        repairs.extend(log.repairs)
    try:
        # skipped by counting newlines in 1 MiB pieces: the error on line 10,000,000 is reached
        # at C speed, not through the line reader
        reader = skip_lines(log.stream, start - 1)
        n = start - 1
        partial = False  # inside an overlong line: its remainder is not a new line
        while True:
            raw = reader.readline(1 << 20)  # bounded: a line of many MB is not read whole
            if not raw:
                break
            if partial:
                partial = not raw.endswith(b"\n")
                continue
            n += 1
            partial = not raw.endswith(b"\n")
            piece = raw.rstrip(b"\r\n")
            if b"\r" in piece:
                piece = piece.rsplit(b"\r", 1)[-1] or piece.replace(b"\r", b" ")
            yield n, piece
    finally:
        log.close()


def _norm(item: tuple[int, bytes]) -> tuple[int, str, Any]:
    """Matching uses the rank-peeled text; display keeps the rank prefix for maintainers."""
    n, piece = item
    return n, normalize_display(piece), normalize(piece)


def normalize_display(raw: bytes) -> str:
    """Decode a raw line for display: replacement for bad UTF-8, no ANSI, no NUL, capped.

    Secrets are removed before the line is cut, so a token across the cut is never half shown;
    a line longer than the read cap loses its last, possibly cut, word."""
    text = raw[:8192].decode("utf-8", errors="replace").replace("\x00", "")
    if len(raw) > 8192:
        text = drop_cut_tail(text)
    text = ANSI_RE.sub("", text).rstrip()
    return text if len(text) <= 2000 else redact_secrets(text)[:2000]


def first_error_excerpt(paths: Sequence[str], anchor: tuple[str, int] | None = None,
                        fallback: tuple[str, int] | None = None,
                        others_at: dict[str, int] | None = None) -> LogExcerpt | None:
    """Cut the context of the run's first error.

    ``anchor`` = (file, line) names the error (found by the analysis); ``fallback`` (e.g. the
    first symptom: a loss-scale collapse prints no traceback) is used when the anchor is not an
    error line the excerpt can cut. ``others_at`` = {file: line} names the first error of each
    other log file (one per rank/node). Without an anchor (the analysis failed) the first
    error-looking line of the logs is searched with the fallback expression instead. A traceback
    is shown from its ``Traceback`` line to its exception line; identical lines printed by
    several ranks are kept once (with the ranks noted).
    """
    found: LogExcerpt | None = None
    no_error: set[str] = set()  # files already read through without an error line
    if anchor is None and others_at is None:
        for path in paths:
            found = _excerpt_in_file(path, None)
            if found is not None:
                break
            no_error.add(path)
    if found is None:
        for spot in (anchor, fallback):
            if spot is not None and spot[0] in paths:
                found = _excerpt_in_file(spot[0], spot[1])
                if found is not None:
                    break
    if found is None:
        # The paste may stop inside a traceback's first line ("Traceback (most r"): no pattern
        # names it, but it is a cut traceback, not a log without an error.
        for path in paths:
            at = cut_header_at_end(path)
            if at is not None:
                found = _excerpt_in_file(path, at)
                if found is not None:
                    break
    if found is None or len(paths) < 2:
        return found
    others = []
    for path in paths:
        if path == found.file or path in no_error:
            continue
        if others_at is not None:
            ex = _excerpt_in_file(path, others_at[path]) if path in others_at else None
        else:
            ex = _excerpt_in_file(path, None)
        if ex is not None:
            others.append((path, ex.error_line, ex.error))
    return replace(found, others=tuple(others))


#: The header every Python traceback starts with; a paste can stop anywhere inside it.
_TB_HEADER = "Traceback (most recent call last):"
#: Lines looked at from the end of a log for a cut header (blank lines and shell prompts after it).
_TAIL_LINES = 3


def is_cut_header(text: str) -> bool:
    """Whether a (rank-peeled) line is a traceback header, whole or cut (``Traceback (most r``)."""
    t = text.strip()
    return t.startswith("Traceback") and _TB_HEADER.startswith(t)


def cut_header_at_end(path: str) -> int | None:
    """The line number of a traceback header among the last non-empty lines of the log (the
    paste stopped there), else None. The log is streamed once; only the last lines are kept."""
    tail: deque[tuple[int, bytes]] = deque(maxlen=_TAIL_LINES)
    for n, piece in _iter_raw(path):
        if piece.strip():
            tail.append((n, piece))
    for n, piece in reversed(tail):
        if is_cut_header(normalize(piece).text):
            return n
    return None


def lines_after(path: str, line: int, count: int) -> list[str]:
    """Up to ``count`` lines of the log after line ``line``, rank-peeled (a pasted command's
    continuation lines); an unreadable log gives none."""
    out: list[str] = []
    try:
        for _, piece in _iter_raw(path, line + 1):
            if len(out) >= count:
                break
            out.append(normalize(piece).text)
    except (OSError, ValueError):
        return []
    return out


def _excerpt_in_file(path: str, want_line: int | None) -> LogExcerpt | None:
    window: deque[tuple[int, bytes]] = deque(maxlen=_LOOKBACK)
    repairs: list[Repair] = []
    # a known error line: only its look-back window is read line by line
    it = _iter_raw(path, max(1, want_line - _LOOKBACK) if want_line is not None else 1, repairs)
    collected: list[tuple[int, str, Any]] = []
    for item in it:
        n, piece = item
        if want_line is not None:
            hit = n == want_line
        else:
            hit = bool(_RAW_HINT.search(piece)) and bool(_ERROR_RE.search(normalize(piece).text))
        if not hit:
            window.append(item)
            continue
        first = _norm(item)
        seg = first[2]
        hit_line = n
        recent = [_norm(w) for w in window]
        # Start at the Traceback that this error ends, if one is in the recent window.
        start_idx = len(recent)
        if not _TRACEBACK_RE.search(seg.text):
            for i in range(len(recent) - 1, -1, -1):
                if _TRACEBACK_RE.search(recent[i][2].text):
                    start_idx = i
                    break
        start_idx = max(0, start_idx - CONTEXT_BEFORE)
        collected = recent[start_idx:] + [first]
        tb_open = False  # inside a traceback: keep reading until its exception line
        closed = False
        for c in collected:
            tb_open, closed = _tb_step(c[2].text, tb_open, closed)
        after = 0
        for raw_item in it:
            line = _norm(raw_item)
            collected.append(line)
            was_open = tb_open
            tb_open, closed = _tb_step(line[2].text, tb_open, closed)
            if tb_open or was_open:
                after = 0
            else:
                after += 1
                if after >= CONTEXT_AFTER:
                    break
            if len(collected) >= MAX_EXCERPT_LINES * 3:
                break
        break
    else:
        return None
    it.close()
    ex = _dedupe(path, collected, closed, hit_line)
    if repairs and ex.lines:
        ex = replace(ex, paste_note=excerpt_note(repairs, ex.lines[0].line, ex.lines[-1].line))
    return ex


def _tb_step(text: str, tb_open: bool, closed: bool) -> tuple[bool, bool]:
    """Advance the traceback state over one rank-peeled line: (open, seen-a-complete-one)."""
    if _TRACEBACK_RE.search(text):
        return True, closed
    if tb_open and _EXC_LINE_RE.match(text):
        return False, True
    return tb_open, closed


def _dedupe(path: str, collected: list[tuple[int, str, Any]], complete: bool, hit_line: int
            ) -> LogExcerpt:
    seen: dict[str, int] = {}
    lines: list[ExcerptLine] = []
    ranks: list[list[int]] = []
    dropped = 0
    for n, shown, seg in collected:
        key = seg.text.strip()
        if key and key in seen:
            first_at = seen[key]
            if seg.rank is not None and seg.rank not in ranks[first_at]:
                ranks[first_at].append(seg.rank)
            dropped += 1
            continue
        if key:
            seen[key] = len(lines)
        lines.append(ExcerptLine(n, shown))
        ranks.append([seg.rank] if seg.rank is not None else [])
    # Packages the traceback frames run through (all of them, also past the display cap).
    pkgs: list[str] = []
    ds_frames: list[str] = []
    for _, _, seg in collected:
        m = _FRAME_RE.search(seg.text.strip() if seg.text.lstrip().startswith(("│", "|")) else seg.text)
        if m:
            # the innermost package directory of the path is the frame's package
            pm = None
            for pm in _PKG_IN_PATH.finditer(m.group("path") or m.group("rpath")):  # noqa: B007
                pass
            if pm and pm.group("pkg") not in pkgs:
                pkgs.append(pm.group("pkg"))
            dm = _DS_MODULE.search(m.group("path") or m.group("rpath"))
            if dm and dm.group(0).replace("\\", "/") not in ds_frames:
                ds_frames.append(dm.group(0).replace("\\", "/"))
    out = tuple(ExcerptLine(ln.line, ln.text, tuple(sorted(r))) for ln, r in zip(lines, ranks))
    out = out[:MAX_EXCERPT_LINES]
    texts = [normalize(ln.text.encode()).text for ln in out]
    has_tb = any(_TRACEBACK_RE.search(t) for t in texts)
    # The error is the exception line that closes the first traceback, else the first error line.
    idx = None
    tb_open = False
    for i, t in enumerate(texts):
        was_open = tb_open
        tb_open, _ = _tb_step(t, tb_open, False)
        if was_open and not tb_open and not _TRACEBACK_RE.search(t):
            idx = i
            break
    if idx is None:
        idx = next((i for i, t in enumerate(texts) if _ERROR_RE.search(t) and not _TRACEBACK_RE.search(t)),
                   None)
    if idx is None:
        idx = next((i for i, ln in enumerate(out) if ln.line == hit_line), 0)
    error = texts[idx].strip() if texts else ""
    if has_tb and not complete and _TRACEBACK_RE.search(error):
        # the excerpt's traceback has no exception line: say so, with where it stops, rather
        # than quote "Traceback (most recent call last):" as the error
        frames = [t.strip() for t in texts[idx:] if _FRAME_RE.search(t)]
        if not frames and idx == len(texts) - 1 and is_cut_header(error) and error != _TB_HEADER:
            error = f"a traceback cut in its first line (the log ends with `{error}`)"
        else:
            error = "a traceback cut before its exception line" + (
                f" (its last frame: {frames[-1]})" if frames else "")
    error_line = out[idx].line if out else 0
    ranks_at = out[idx].ranks if out else ()
    if not ranks_at and collected:
        ranks_at = tuple(seg.rank for n, _, seg in collected if n == error_line and seg.rank is not None)
    return LogExcerpt(path, out, shorten_middle(error, MAX_ERROR_CHARS), error_line, has_tb,
                      tuple(pkgs), dropped, complete, deepspeed_frames=tuple(ds_frames),
                      error_ranks=tuple(sorted(set(ranks_at))))


def shorten_middle(text: str, limit: int) -> str:
    """Cut a long line in its middle: the launcher's ``[...argv...] exits with return code = -9``
    states the failure at its end, an exception line at its start; both ends are kept."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep].rstrip()} [...] {text[-keep:].lstrip()}"

