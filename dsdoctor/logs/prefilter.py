"""Find candidate lines in big byte chunks without running every pattern on every line.

Two engines give the same answer: for each pattern, the end offsets of its prefilter's matches
(at least one per ``\\n``/``\\r`` segment that contains a match). The scanner maps offsets to
segments and de-duplicates, so the *set* of (segment, pattern) candidates is identical.

* :class:`HyperscanEngine` compiles every prefilter into one Hyperscan database and scans each
  chunk once (as fast as grep).
* :class:`PythonEngine` (literal_engine.py) needs no compiled extension (platforms without a
  hyperscan wheel): a regex pass per rare anchor byte of the literals (memchr for the rarest),
  then the prefilter regex confirms each candidate line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsdoctor import datacache
from dsdoctor.logs.formats import Pattern
from dsdoctor.model import ENGINES


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
        # the database is shared by the engines of this process; a scratch is not (watch scans
        # in one thread while the report of key r is analyzed in another)
        self._scratch = hyperscan.Scratch(self._db)

    def candidates(self, data, limit: int) -> list[tuple[int, int]]:
        """(offset inside a match, pattern index) pairs in ``data[:limit]``, sorted by offset."""
        if self._db is None or not limit:
            return []
        out: list[tuple[int, int]] = []
        append = out.append

        def on_match(idx, _frm, to, _flags, _ctx):
            append((to - 1 if to > 0 else 0, idx))

        self._db.scan(memoryview(data)[:limit], match_event_handler=on_match,
                     scratch=self._scratch)
        out.sort()
        return out


# The compiled-pattern cache (issue 14, item 5): kept under the same rules as every dsdoctor cache
# (datacache.py): nothing in the directory is trusted unless it is ours and private, each file
# carries a digest of the expressions and flags it was compiled from plus a digest of its body,
# and it is written to an O_EXCL|O_NOFOLLOW temp file then renamed, never through a link.
_CACHE_MAGIC = b"dsdoctor-hs-cache 1\n"
_CACHE_KEEP = datacache.KEEP
_safe_cache_dir = datacache.safe_cache_dir


def _cache_key(hyperscan, exprs: list[bytes], flags: list[int]) -> bytes:
    return datacache.digest(repr((getattr(hyperscan, "__version__", ""), exprs, flags)).encode())


def _load_cached(path: Path, key: bytes) -> bytes | None:
    """The database bytes stored at ``path`` for ``key``, or None when anything is off."""
    return datacache.load_file(path, key, _CACHE_MAGIC)


def _store(directory: Path, path: Path, key: bytes, body: bytes) -> None:
    datacache.store_file(directory, path, key, body, _CACHE_MAGIC)


def _prune(directory: Path, keep: Path) -> None:
    datacache.prune(directory, keep, "hs-", ".db")


#: Databases this process already loaded, by their expressions and flags: a process that analyzes
#: many jobs (``triage``, ``watch``'s refreshes, the tests) loads each one once. Loading from the
#: disk cache re-reads and re-hashes the database (~4 ms), a third of a small log's analysis.
_LOADED: dict[tuple[tuple[bytes, ...], tuple[int, ...]], Any] = {}


def _cached_database(hyperscan, exprs: list[bytes], flags: list[int]):
    """The database of these expressions, loaded once per process (see :data:`_LOADED`)."""
    memo = (tuple(exprs), tuple(flags))
    db = _LOADED.get(memo)
    if db is None:
        db = _LOADED[memo] = _database(hyperscan, exprs, flags)
    return db


def _database(hyperscan, exprs: list[bytes], flags: list[int]):
    """Compile the database, or load it from the cache (compiling costs ~0.1 s per run).

    The cache key covers the hyperscan version and every expression and flag, so a changed
    format file or a new hyperscan never reuses a stale database. Any cache trouble (read-only
    home, a shared or planted directory, a corrupt or foreign file) falls back to compiling.
    """
    key = _cache_key(hyperscan, exprs, flags)
    directory = _safe_cache_dir(create=False)
    name = f"hs-{key[:32].decode()}.db"
    if directory is not None:
        body = _load_cached(directory / name, key)
        if body is not None:
            try:
                db = hyperscan.loadb(body, hyperscan.HS_MODE_BLOCK)
                db.scratch = hyperscan.Scratch(db)
                return db
            except Exception:  # noqa: BLE001 - unusable after all: compile
                pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
    directory = _safe_cache_dir(create=True)
    if directory is not None:
        try:
            _store(directory, directory / name, key, hyperscan.dumpb(db))
            _prune(directory, directory / name)
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
    from dsdoctor.logs.literal_engine import PythonEngine  # noqa: PLC0415 - only when chosen

    return PythonEngine(patterns)
