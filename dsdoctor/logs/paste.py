"""Repair paste damage "a whole log on one line": split a flattened log back into its lines.

Logs copied from a rendered GitHub comment, a Slack message or a web form often lose their
newlines: the whole log arrives as one line of thousands of characters where every original line
start (a ``[rank0]:`` prefix, a timestamp, ``Traceback (most recent call last):``, a ``File "..."``
frame, an exception name) follows a space or nothing at all. The precise formats expect those
starts at the beginning of a line, so such a paste would hide its failure.

A line is repaired when it is long and holds many line-start markers (never for a merely long
line: a config dump or a tqdm bar has one start, not dozens). Lines with ``\\r`` are progress
bars, not flattened logs, and are left alone. Only the first 64 KiB decide (pastes are small), and
only logs up to MAX_REPAIR_BYTES are rewritten; line numbers then refer to the repaired text, which
the note added to the report says.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import BinaryIO

from dsdoctor.logs.streams import Chained

#: A line at least this long may be a flattened log (real log lines rarely are, pastes always).
MIN_FLATTENED_CHARS = 400
#: ...when it holds at least this many line starts, one per this many characters at most.
MIN_STARTS = 3
MAX_CHARS_PER_START = 400
#: Larger logs are not pastes: left as they are (and never held in memory whole).
MAX_REPAIR_BYTES = 8 << 20

# Line starts that can follow any character: nothing else looks like them mid-line.
_STRONG = (
    r"\[rank\d+\]:"  # torch >= 2.2 rank prefix
    r"|\[default\d+\]:"  # torchrun --tee
    r"|Traceback \(most recent call last\):"
    r"|During handling of the above exception"
    r"|The above exception was the direct cause"
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"  # [2024-05-01 10:00:00,123] (DeepSpeed, loguru)
    r"|\[(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\|"  # [INFO|trainer.py:2048] (Transformers)
    r"|\[[EWI] [\w.]+\.(?:cpp|cc|h):\d+\]"  # [E ProcessGroupNCCL.cpp:737] (c10, torch 1.x)
    r"|\[[EWI]\d{3,4} \d\d:\d\d:\d\d"  # [E321 10:12:13.1 (c10 glog style, torch 2.x)
    r"|terminate called after throwing"
    r"|Exception raised from "
    r"|frame #\d+: "
)
# Line starts that must follow whitespace (they could be inside a message otherwise).
_AFTER_SPACE = (
    r"File \"[^\"\n]{1,400}\", line \d+"  # a traceback frame
    r"|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt):\s"  # the exception that ended it
    # a logger's timestamp (with milliseconds: not a date inside a message), not after "[INFO|..] "
    r"|(?<![\]|] )\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]\d"
    r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d - "  # 05/01/2024 10:00:00 - INFO - (HF examples)
    r"|[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)"  # host:pid:tid [dev] NCCL INFO
    r"|(?:ERROR|WARNING|INFO):[\w.]+:"  # Python logging's default format
    r"|\{'(?:loss|eval_loss|train_runtime)':"  # Transformers Trainer dicts
    r"|(?:srun|slurmstepd|pdsh@[\w.-]+): "
    r"|iteration\s+\d+/\s*\d+ \|"  # Megatron
)
# After a space, or right after a code line's ")" or "]" when the newlines vanished without one.
_START_RE = re.compile(rf"(?:{_STRONG})|(?<=[\s)\]])(?:{_AFTER_SPACE})")


@dataclass(frozen=True)
class Repair:
    """One physical line split back into ``pieces`` lines; ``first`` is its repaired number."""

    physical: int
    first: int
    pieces: int


def _starts(line: str) -> list[int]:
    return [m.start() for m in _START_RE.finditer(line)]


def is_flattened(line: str) -> bool:
    """Whether one physical line looks like a whole log whose newlines were lost."""
    if len(line) < MIN_FLATTENED_CHARS or "\r" in line:
        return False
    for count, _ in enumerate(_START_RE.finditer(line), 1):
        if count >= MIN_STARTS and count * MAX_CHARS_PER_START >= len(line):
            return True
    return False


def split_line(line: str) -> list[str]:
    """The pieces of a flattened line, cut before every line start (the joining space dropped)."""
    cuts = [c for c in _starts(line) if c > 0]
    pieces = []
    prev = 0
    for c in [*cuts, len(line)]:
        piece = line[prev:c].rstrip(" \t")
        if piece.strip():
            pieces.append(piece)
        prev = c
    return pieces or [line]


def repair_text(text: str) -> tuple[str, list[Repair]]:
    """The text with every flattened line split back into lines, and where that was done."""
    out: list[str] = []
    repairs: list[Repair] = []
    for number, line in enumerate(text.split("\n"), 1):
        if is_flattened(line):
            pieces = split_line(line)
            if len(pieces) > 1:
                repairs.append(Repair(number, len(out) + 1, len(pieces)))
                out.extend(pieces)
                continue
        out.append(line)
    return "\n".join(out), repairs


def _head_has_flattened(head: bytes) -> bool:
    for raw in head.split(b"\n"):
        if len(raw) >= MIN_FLATTENED_CHARS and is_flattened(raw.decode("utf-8", "replace")):
            return True
    return False


def repair_note(name: str, repairs: list[Repair]) -> str:
    """The note that says which physical lines were split and what line numbers mean now."""
    shown = "; ".join(
        f"physical line {r.physical} = lines {r.first}-{r.first + r.pieces - 1}"
        for r in repairs[:3]
    ) + ("; ..." if len(repairs) > 3 else "")
    total = sum(r.pieces for r in repairs)
    return (f"{name}: a whole log pasted on one line (newlines lost): split back into {total} "
            f"lines before scanning; its line numbers refer to the repaired text ({shown})")


def repair_flattened(name: str, head: bytes, stream: BinaryIO, notes: list[str]) -> BinaryIO:
    """``stream`` (whose first bytes are ``head``) with flattened lines split back into lines.

    Unchanged (and not read) unless the head shows a flattened line; a log over
    MAX_REPAIR_BYTES is passed on as it is. Adds a note when it repairs.
    """
    if not _head_has_flattened(head):
        return stream
    data = stream.read(MAX_REPAIR_BYTES + 1)
    if len(data) > MAX_REPAIR_BYTES:
        return io.BufferedReader(Chained(data, stream), 1 << 20)
    text, repairs = repair_text(data.decode("utf-8", errors="surrogateescape"))
    if not repairs:
        return io.BytesIO(data)
    notes.append(repair_note(name, repairs))
    return io.BytesIO(text.encode("utf-8", errors="surrogateescape"))
