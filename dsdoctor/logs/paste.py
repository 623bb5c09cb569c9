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
from collections import Counter
from dataclasses import dataclass
from typing import BinaryIO

from dsdoctor.logs.streams import Chained

#: A line at least this long may be a flattened log (real log lines rarely are, pastes always).
MIN_FLATTENED_CHARS = 400
#: ...when it holds at least this many line starts, one per this many characters at most.
MIN_STARTS = 3
MAX_CHARS_PER_START = 400
#: A start this close after another one is the same line's prefix chain, not a new line:
#: "[default0]: [2025-05-27 15:23:07] iteration 1/ 24000 | ..." is one Megatron line.
MIN_GAP = 24
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
    r"|\((?:raylet|[A-Za-z_][\w.]*(?: pid=\d+)(?:, ip=[\w.-]+)?)\) "  # Ray's per-worker prefix
)
# Line starts that must follow whitespace (they could be inside a message otherwise).
_AFTER_SPACE = (
    r"File \"[^\"\n]{1,400}\", line \d+"  # a traceback frame
    r"|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)(?:\(\w+\))?:\s"  # the exception
    # a logger's timestamp (with milliseconds: not a date inside a message), not after "[INFO|..] "
    r"|(?<![\]|] )\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]\d"
    r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d - "  # 05/01/2024 10:00:00 - INFO - (HF examples)
    r"|[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)"  # host:pid:tid [dev] NCCL INFO
    r"|(?:ERROR|WARNING|INFO):[\w.]+:"  # Python logging's default format
    r"|(?:ERROR|WARNING|INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d "  # vLLM's logger
    r"|\{'(?:loss|eval_loss|train_runtime)':"  # Transformers Trainer dicts
    r"|(?:srun|slurmstepd|pdsh@[\w.-]+): "
    r"|[a-z][a-z0-9-]*[0-9][a-z0-9.-]*: +(?=\S)"  # pdsh / deepspeed multi-node host prefix
    r"|iteration\s+\d+/\s*\d+ \|"  # Megatron
)
# After a space, or right after a code line's ")" or "]" when the newlines vanished without one.
_DIGITS_RE = re.compile(r"\d")
# Starts that are a line's prefix (what the launcher or logger put before the message).
_PREFIX_RE = re.compile(r"\[(?:rank|default)\d+\]:|\(|\[?\d{4}-\d\d-\d\d|\d\d/\d\d/\d{4}|"
                        r"[a-z][a-z0-9-]*[0-9][a-z0-9.-]*: ")
_START_RE = re.compile(rf"(?:{_STRONG})|(?<=[\s)\]])(?:{_AFTER_SPACE})")


@dataclass(frozen=True)
class Repair:
    """One physical line split back into ``pieces`` lines; ``first`` is its repaired number."""

    physical: int
    first: int
    pieces: int


def _starts_and_kinds(line: str) -> tuple[list[int], Counter[str]]:
    """Where the original lines began (each start that does not just continue a prefix chain),
    and how often each kind of start (digits ignored) occurs."""
    out: list[int] = []
    kinds: Counter[str] = Counter()
    prev, prev_end, prev_is_prefix = -MIN_GAP, 0, False
    for m in _START_RE.finditer(line):
        # a start right after a line prefix ("node-1:   File ...") continues the same line
        chained = m.start() - prev < MIN_GAP or (
            prev_is_prefix and not line[prev_end:m.start()].strip())
        if not chained:
            out.append(m.start())
            kinds[_DIGITS_RE.sub("#", m.group(0))[:8]] += 1
        prev, prev_end = m.start(), m.end()
        prev_is_prefix = bool(_PREFIX_RE.match(m.group(0)))
    return out, kinds


def _starts(line: str) -> list[int]:
    return _starts_and_kinds(line)[0]


def is_flattened(line: str) -> bool:
    """Whether one physical line looks like a whole log whose newlines were lost.

    Many line starts, and one kind of start more than once (or a traceback header mid-line): a
    flattened log repeats its line prefix (every frame is a ``File "..."``, every record a
    timestamp); one real line that merely carries a rank prefix, a timestamp and a logger name
    has each of them once.
    """
    if len(line) < MIN_FLATTENED_CHARS or "\r" in line:
        return False
    starts, kinds = _starts_and_kinds(line)
    count = len(starts)
    # A traceback header in the middle of a line is a lost newline by itself.
    mid_traceback = line.find("Traceback (most recent call last):") > 0
    return (count >= MIN_STARTS and count * MAX_CHARS_PER_START >= len(line)
            and (max(kinds.values()) >= 2 or mid_traceback))


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
