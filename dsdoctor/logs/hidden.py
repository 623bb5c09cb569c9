"""Candidates the raw bytes hide: an ANSI escape or a NUL inside a pattern's literal.

The prefilter runs on the raw bytes (docs/design.md), and ``normalize()`` removes escapes and
NULs only from the segments it is given. A line coloured character by character or word by word
(``\\x1b[31mCUDA\\x1b[0m \\x1b[31mout\\x1b[0m ...``), or with a NUL inside a word, held no literal
of its pattern and was never a candidate (issue 24). The lines that hold ESC or NUL are
cleaned and given to the engine once more; each hit is mapped back into its original line, whose
segment ``normalize()`` then cleans as always. A chunk without ESC or NUL costs two memchr.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from dsdoctor.logs.reader import ANSI_RE

_ANSI_BYTES_RE = re.compile(ANSI_RE.pattern.encode("latin-1"))
_MARKS = (b"\x1b", b"\x00")


def hidden_candidates(engine: Any, buf: bytes | bytearray, cut: int,
                      hits: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``hits`` with the candidates of the cleaned ESC/NUL lines of ``buf[:cut]`` merged in
    (sorted by offset; a hit already found is dropped later by the scanner's seen-set)."""
    if all(buf.find(m, 0, cut) < 0 for m in _MARKS):
        return hits
    starts: list[int] = []  # offset of each cleaned line in ``joined``
    origins: list[tuple[int, int]] = []  # (start, end) of that line in buf
    pieces: list[bytes] = []
    joined_len = 0
    pos = 0
    # the next offset of each mark, searched again only once passed: a mark that is absent
    # is searched once per chunk, not once per line (a search to the end each time was
    # quadratic on a log coloured on every line)
    nxt = [buf.find(m, 0, cut) for m in _MARKS]
    while pos < cut:
        for i, m in enumerate(_MARKS):
            if 0 <= nxt[i] < pos:
                nxt[i] = buf.find(m, pos, cut)
        at = min((i for i in nxt if i >= 0), default=-1)
        if at < 0:
            break
        start = buf.rfind(b"\n", 0, at) + 1
        end = buf.find(b"\n", at, cut)
        end = cut if end < 0 else end
        clean = _ANSI_BYTES_RE.sub(b"", bytes(buf[start:end])).replace(b"\x00", b"")
        starts.append(joined_len)
        origins.append((start, end))
        pieces.append(clean)
        joined_len += len(clean) + 1
        pos = end + 1
    if not pieces:
        return hits
    joined = b"\n".join(pieces) + b"\n"
    extra = []
    for off, idx in engine.candidates(joined, len(joined)):
        k = bisect.bisect_right(starts, off) - 1
        start, end = origins[k]
        # the same character sits at or after this offset in the original line: inside it
        extra.append((min(start + off - starts[k], max(end - 1, start)), idx))
    return sorted(hits + extra) if extra else hits
