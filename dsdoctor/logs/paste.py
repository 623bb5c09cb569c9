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

Two more kinds of damage are repaired the same way (same limits, same note):
- several ranks writing into one line (unbuffered stderr, or a paste that lost some newlines):
  ``[rank0]: RuntimeError: ...[rank1]: Traceback (most recent call last):`` is cut before every
  rank prefix that does not begin the line, so each rank's lines keep their rank;
- a hard wrap at a fixed width (a terminal or a web form that wraps at 80 or 120 columns): when
  many lines of the head are exactly as long as the longest one, each such line is joined to the
  next one, unless that one starts a line of its own (a traceback frame, a timestamp, a rank).
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
    """Physical lines ``physical``..+``joined``-1 became repaired lines ``first``..+``pieces``-1.

    A split ("flattened", "interleaved") turns one physical line into several (joined == 1); a
    rejoined hard wrap ("wrapped") turns several physical lines into one (pieces == 1).
    """

    physical: int
    first: int
    pieces: int
    joined: int = 1
    kind: str = "flattened"

    @property
    def physical_last(self) -> int:
        return self.physical + self.joined - 1

    @property
    def last(self) -> int:
        return self.first + self.pieces - 1


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
    return _cut(line, [c for c in _starts(line) if c > 0])


# A rank prefix (torch's, torchrun's, mpirun's --tag-output incl. SageMaker's): in the middle of a
# line it is another rank's line written into this one.
_RANK_MARK = r"\[(?:rank|default)\d+\]:|\[\d+,(?:mpirank:)?\d+(?:,[\w.-]+)?\]<std(?:out|err)>:"
_RANK_MARK_RE = re.compile(_RANK_MARK)
# What may precede a rank prefix on its own line: other prefixes ("[default0]:[rank0]:",
# "i.pretrain/0 [default2]:", "node-1: [rank3]:", "> [rank0]:", a viewer's "[80746] [rank0]:",
# Ray's "(WorkerDict pid=1) [rank7]:").
_PREFIX_CHAIN_RE = re.compile(
    rf"[ \t]*(?:(?:{_RANK_MARK}|[\w.-]+/\d+|[a-z][a-z0-9-]*[0-9][a-z0-9.-]*:|>|\[\d+\]"
    r"|\((?:raylet|[A-Za-z_][\w.]*(?: pid=\d+)(?:, ip=[\w.-]+)?)\))[ \t]*)*")
# A line that begins a log line of its own (never the continuation of a hard-wrapped one).
_LINE_START_RE = re.compile(rf"[ \t]*(?:{_STRONG}|{_AFTER_SPACE})")
#: A hard wrap: at least this many lines exactly as long as the longest one (at least this wide).
MIN_WRAP_WIDTH = 60
MIN_WRAPPED_LINES = 2


def interleaved_cuts(line: str) -> list[int]:
    """Where another rank's line begins inside ``line`` (a rank prefix after other text)."""
    if "]:" not in line and "]<std" not in line:
        return []
    cuts: list[int] = []
    piece_start = 0
    for m in _RANK_MARK_RE.finditer(line):
        if m.start() == 0 or _PREFIX_CHAIN_RE.fullmatch(line, piece_start, m.start()):
            continue  # the prefix chain that begins the line (or the piece)
        cuts.append(m.start())
        piece_start = m.start()
    return cuts


def _cut(line: str, cuts: list[int]) -> list[str]:
    pieces = []
    prev = 0
    for c in [*cuts, len(line)]:
        piece = line[prev:c].rstrip(" \t")
        if piece.strip():
            pieces.append(piece)
        prev = c
    return pieces or [line]


def _body(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


# A panel's right edge (rich tracebacks, tables): such lines are as wide as the panel by design.
_BOX_EDGES = ("│", "┃", "║", "|", "╮", "╯", "┐", "┘", "+")
_TOKEN_WITH_DIGIT_RE = re.compile(r"\w*\d\w*")


def _shape(text: str) -> str:
    """The text with every token that holds a digit (numbers, hex ids, pids) made one '#'."""
    return _TOKEN_WITH_DIGIT_RE.sub("#", text)


def _continues(line: str, nxt: str, width: int) -> bool:
    """Whether ``nxt`` is the rest of ``line`` cut at ``width`` columns.

    Not when ``line`` is shorter, a progress bar, a separator ("-----", "*****") or a panel's
    line (rich tracebacks, tables), nor when
    ``nxt`` starts a log line of its own or begins the way ``line`` begins (the next record of
    the same logger: dmesg, a launcher's prefix).
    """
    if (len(line) != width or "\r" in line or not nxt.strip() or len(set(line.strip())) <= 2
            or line.endswith(_BOX_EDGES)):
        return False
    # Both lines carry the same quote marker or launcher prefix ("> ", "3: ", "[rank0]: "): the
    # message was wrapped before every physical line got it; what follows the prefix decides.
    prefix = _shared_prefix(line, nxt)
    line, nxt = line[len(prefix):], nxt[len(prefix):]
    return (bool(nxt.strip()) and not _LINE_START_RE.match(nxt)
            and _shape(nxt[:10])[:6] != _shape(line[:10])[:6])


def _shared_prefix(line: str, nxt: str) -> str:
    """The quote marker or launcher prefix that begins both lines ("" when they differ)."""
    from dsdoctor.logs.reader import line_prefix  # noqa: PLC0415 - reader imports this module

    prefix = line_prefix(line)
    return prefix if prefix and nxt.startswith(prefix) else ""


def wrap_width(lines: list[str]) -> int | None:
    """The column at which a paste was hard-wrapped, or None.

    Evidence: at least MIN_WRAPPED_LINES different lines (a message repeated with other numbers
    counts once) exactly as long as the longest line (progress bars aside: tqdm pads its bar to
    the terminal's width), each followed by a line that continues it.
    """
    bodies = [_body(ln) for ln in lines]
    width = max((len(b) for b in bodies if "\r" not in b), default=0)
    if width < MIN_WRAP_WIDTH:
        return None
    if any(len(b) == width and b.endswith(_BOX_EDGES) for b in bodies):
        return None  # a rich panel as wide as the terminal: rich wraps words, not columns
    wrapped = {_shape(b) for b, nxt in zip(bodies, bodies[1:]) if _continues(b, nxt, width)}
    return width if len(wrapped) >= MIN_WRAPPED_LINES else None


def _joined(bodies: list[str], i: int, width: int | None) -> int:
    """The index of the last physical line that continues line ``i`` (hard wrap)."""
    j = i
    while width is not None and j + 1 < len(bodies) and _continues(bodies[j], bodies[j + 1], width):
        j += 1
    return j


def repair_text(text: str, width: int | None = None) -> tuple[str, list[Repair]]:
    """The text with hard wraps at ``width`` joined back, flattened lines split back into lines
    and lines of several ranks cut apart, and where that was done."""
    out: list[str] = []
    repairs: list[Repair] = []
    physical = text.split("\n")
    bodies = [_body(ln) for ln in physical] if width else physical
    i = 0
    while i < len(physical):
        j = _joined(bodies, i, width)
        # a continuation's own copy of the first line's prefix is dropped ("> ", "[rank0]: ")
        line = (bodies[i] + "".join(b[len(_shared_prefix(bodies[i], b)):]
                                    for b in bodies[i + 1:j + 1]) if j > i else physical[i])
        kind = "wrapped" if j > i else ""
        pieces = [line]
        if is_flattened(line):
            pieces, kind = split_line(line), "flattened"
        elif "]:" in line or "]<std" in line:
            cuts = interleaved_cuts(line)
            if cuts:
                pieces, kind = _cut(line, cuts), "interleaved"
        if kind and (len(pieces) > 1 or j > i):
            repairs.append(Repair(i + 1, len(out) + 1, len(pieces), j - i + 1, kind))
        out.extend(pieces)
        i = j + 1
    return "\n".join(out), repairs


def _head_damage(head: bytes) -> tuple[bool, int | None]:
    """(whether a line of the head needs a split, the hard-wrap width of the head or None)."""
    lines = head.decode("utf-8", "replace").split("\n")
    if len(head) >= 65536 and len(lines) > 1:
        lines = lines[:-1]  # the head's last line is cut by the head's end
    split = any(
        (len(raw) >= MIN_FLATTENED_CHARS and is_flattened(raw)) or interleaved_cuts(raw)
        for raw in lines if "]:" in raw or "]<std" in raw or len(raw) >= MIN_FLATTENED_CHARS)
    return split, wrap_width(lines)


def _shown(repairs: list[Repair]) -> str:
    def one(r: Repair) -> str:
        phys = (f"physical line {r.physical}" if r.joined == 1
                else f"physical lines {r.physical}-{r.physical_last}")
        return phys + (f" = lines {r.first}-{r.last}" if r.pieces > 1 else f" = line {r.first}")
    return "; ".join(one(r) for r in repairs[:3]) + ("; ..." if len(repairs) > 3 else "")


def repair_note(name: str, repairs: list[Repair], width: int | None = None) -> str:
    """The note that says which physical lines were split or joined and what line numbers mean
    now (one sentence per kind of damage)."""
    parts = []
    flat = [r for r in repairs if r.kind == "flattened"]
    if flat:
        total = sum(r.pieces for r in flat)
        parts.append(f"a whole log pasted on one line (newlines lost): split back into {total} "
                     f"lines before scanning ({_shown(flat)})")
    mixed = [r for r in repairs if r.kind == "interleaved"]
    if mixed:
        parts.append(f"lines of several ranks written into one line: cut before each rank prefix "
                     f"({_shown(mixed)})")
    wrapped = [r for r in repairs if r.joined > 1]
    if wrapped:
        parts.append(f"hard-wrapped at {width} columns: {len(wrapped)} wrapped lines joined back "
                     f"({_shown(wrapped)})")
    return f"{name}: " + "; ".join(parts) + "; its line numbers refer to the repaired text"


def repair_paste(name: str, head: bytes, stream: BinaryIO, notes: list[str],
                 repairs: list[Repair] | None = None) -> BinaryIO:
    """``stream`` (whose first bytes are ``head``) with its paste damage repaired.

    Unchanged (and not read) unless the head shows damage; a log over MAX_REPAIR_BYTES is passed
    on as it is. Adds a note when it repairs, and the repairs to ``repairs`` when given.
    """
    split, width = _head_damage(head)
    if not split and width is None:
        return stream
    data = stream.read(MAX_REPAIR_BYTES + 1)
    if len(data) > MAX_REPAIR_BYTES:
        return io.BufferedReader(Chained(data, stream), 1 << 20)
    text, done = repair_text(data.decode("utf-8", errors="surrogateescape"), width)
    if not done:
        return io.BytesIO(data)
    notes.append(repair_note(name, done, width))
    if repairs is not None:
        repairs.extend(done)
    return io.BytesIO(text.encode("utf-8", errors="surrogateescape"))


_SPLIT_WHAT = {"flattened": "a whole log pasted on one line",
               "interleaved": "several ranks' lines written into one line"}


def excerpt_note(repairs: list[Repair], first: int, last: int) -> str:
    """What the repairs did to repaired lines ``first``..``last`` (an excerpt of the log), in
    physical lines of the file as given; "" when the excerpt holds no repaired line."""
    hits = [r for r in repairs if r.first <= last and r.last >= first]
    if not hits:
        return ""
    parts = []
    for r in hits[:3]:
        if r.joined > 1:
            parts.append(f"line {r.first} joins physical lines {r.physical}-{r.physical_last} "
                         "(hard-wrapped)")
        else:
            parts.append(f"lines {r.first}-{r.last} are physical line {r.physical} "
                         f"({_SPLIT_WHAT.get(r.kind, r.kind)})")
    more = f"; {len(hits) - 3} more" if len(hits) > 3 else ""
    return ("dsdoctor repaired paste damage before reading this log: " + "; ".join(parts) + more
            + ". Line numbers are those of the repaired text.")
