"""Find candidate lines in big byte chunks without running every pattern on every line.

Two engines give the same answer: for each pattern, the end offsets of its prefilter's matches
(at least one per ``\\n``/``\\r`` segment that contains a match). The scanner maps offsets to
segments and de-duplicates, so the *set* of (segment, pattern) candidates is identical.

* :class:`HyperscanEngine` compiles every prefilter into one Hyperscan database and scans each
  chunk once (as fast as grep).
* :class:`PythonEngine` needs no compiled extension (e.g. aarch64 nodes without a hyperscan wheel):
  it searches each prefilter's required literal with ``bytes.find`` (C speed), then confirms the
  prefilter regex on that line only.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from dsdoctor.logs.formats import Pattern, required_literals
from dsdoctor.model import ENGINES


class PythonEngine:
    """Literal search + per-line regex confirmation. Pure Python, identical results."""

    name = "python"

    def __init__(self, patterns: Sequence[Pattern]):
        self.patterns = list(patterns)
        self._regexes = [
            re.compile(p.prefilter.encode("utf-8"), re.IGNORECASE if p.caseless else 0)
            for p in self.patterns
        ]
        # literal -> pattern indices, split by case sensitivity
        self._exact: dict[bytes, list[int]] = {}
        self._folded: dict[bytes, list[int]] = {}
        self._no_literal: list[int] = []
        for i, p in enumerate(self.patterns):
            lits = required_literals(p.prefilter, p.caseless)
            if not lits:
                self._no_literal.append(i)
                continue
            table = self._folded if p.caseless else self._exact
            for lit in lits:
                table.setdefault(lit, []).append(i)

    def _confirm(self, data: bytes, line_start: int, line_end: int, idxs, out) -> None:
        for i in idxs:
            for m in self._regexes[i].finditer(data, line_start, line_end):
                out.append((m.end() - 1 if m.end() > m.start() else m.start(), i))

    def candidates(self, data, limit: int) -> list[tuple[int, int]]:
        """(offset inside a match, pattern index) pairs in ``data[:limit]``, sorted by offset."""
        out: list[tuple[int, int]] = []
        folded = bytes(memoryview(data)[:limit]).lower() if self._folded else b""
        for table, hay in ((self._exact, data), (self._folded, folded)):
            for lit, idxs in table.items():
                find = hay.find
                pos = find(lit, 0, limit)
                while pos != -1:
                    line_start = data.rfind(b"\n", 0, pos) + 1
                    line_end = data.find(b"\n", pos, limit)
                    if line_end == -1:
                        line_end = limit
                    self._confirm(data, line_start, line_end, idxs, out)
                    pos = find(lit, line_end, limit)
        for i in self._no_literal:
            for m in self._regexes[i].finditer(data, 0, limit):
                out.append((m.end() - 1 if m.end() > m.start() else m.start(), i))
        out.sort()
        return out


class HyperscanEngine:
    """All prefilters in one Hyperscan database; one pass per chunk."""

    name = "hyperscan"

    def __init__(self, patterns: Sequence[Pattern]):
        import hyperscan  # noqa: PLC0415 - optional compiled dependency

        self.patterns = list(patterns)
        self._hs = hyperscan
        self._db = None
        if not self.patterns:
            return
        exprs, flags = [], []
        for p in self.patterns:
            exprs.append(p.prefilter.encode("utf-8"))
            f = 0
            if p.caseless:
                f |= hyperscan.HS_FLAG_CASELESS
            flags.append(f)
        self._db = _cached_database(hyperscan, exprs, flags)

    def candidates(self, data, limit: int) -> list[tuple[int, int]]:
        """(offset inside a match, pattern index) pairs in ``data[:limit]``, sorted by offset."""
        if self._db is None or not limit:
            return []
        out: list[tuple[int, int]] = []
        append = out.append

        def on_match(idx, _frm, to, _flags, _ctx):
            append((to - 1 if to > 0 else 0, idx))

        self._db.scan(memoryview(data)[:limit], match_event_handler=on_match)
        out.sort()
        return out


def _cache_dir() -> Path:
    base = os.environ.get("DSDOCTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "dsdoctor")
    return Path(base)


def _cached_database(hyperscan, exprs: list[bytes], flags: list[int]):
    """Compile the database, or load it from the cache (compiling costs ~0.1 s per run).

    The cache key covers the hyperscan version and every expression and flag, so a changed
    format file or a new hyperscan never reuses a stale database. Any cache trouble (read-only
    home, a corrupt file) falls back to compiling.
    """
    key = hashlib.sha256(repr((getattr(hyperscan, "__version__", ""), exprs, flags)).encode())
    path = _cache_dir() / f"hs-{key.hexdigest()[:32]}.db"
    try:
        db = hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)
        return db
    except Exception:  # noqa: BLE001 - no cache yet, or unusable: compile
        pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(hyperscan.dumpb(db))
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a read-only cache is fine
        pass
    return db


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001 - a broken wheel is "not available"
        return False
    return True


def available_engines() -> list[str]:
    """The engines that can run here (the pure-Python one always can)."""
    return ["python"] + (["hyperscan"] if hyperscan_available() else [])


def make_engine(patterns: Sequence[Pattern], engine: str = "auto"):
    """The fastest available engine (``auto``), or the one asked for."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    if engine in ("auto", "hyperscan") and hyperscan_available():
        return HyperscanEngine(patterns)
    if engine == "hyperscan":
        from dsdoctor.errors import UsageError  # noqa: PLC0415

        raise UsageError("--engine hyperscan: the 'hyperscan' package is not installed here; "
                         "use --engine python or pip install hyperscan")
    return PythonEngine(patterns)
