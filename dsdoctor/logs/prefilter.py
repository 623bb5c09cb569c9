"""Find candidate lines in big byte chunks without running every pattern on every line.

Two engines give the same answer: for each pattern, the end offsets of its prefilter's matches
(at least one per ``\\n``/``\\r`` segment that contains a match). The scanner maps offsets to
segments and de-duplicates, so the *set* of (segment, pattern) candidates is identical.

* :class:`HyperscanEngine` compiles every prefilter into one Hyperscan database and scans each
  chunk once (as fast as grep).
* :class:`PythonEngine` (literal_engine.py) needs no compiled extension (platforms without a
  hyperscan wheel): one regex pass for the literals' rare-byte anchors, then the prefilter regex
  confirms each candidate line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from dsdoctor.logs.formats import Pattern
from dsdoctor.logs.literal_engine import PythonEngine
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


# The compiled-pattern cache (issue 14, item 5). Another user who can write to a shared cache
# directory could plant a database that switches detection off, so nothing there is trusted:
# the directory and the file must be ours and writable by us only, the file carries a digest of
# the expressions and flags it was compiled from plus a digest of its body, and it is written to
# an O_EXCL|O_NOFOLLOW temp file then renamed, never through a link.
_CACHE_MAGIC = b"dsdoctor-hs-cache 1\n"
_CACHE_MAX_BYTES = 64 << 20
_CACHE_KEEP = 4  # newest databases kept; older ones (previous format files) are pruned
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _owned_private(st: os.stat_result) -> bool:
    """Ours and not writable by group or others (always true where there are no uids)."""
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _safe_cache_dir(create: bool) -> Path | None:
    """The cache directory when it is a real directory of ours, private; else None."""
    path = _cache_dir()
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not _owned_private(st):
        return None
    return path


def _cache_key(hyperscan, exprs: list[bytes], flags: list[int]) -> bytes:
    return hashlib.sha256(repr((getattr(hyperscan, "__version__", ""), exprs, flags)).encode()
                          ).hexdigest().encode()


def _load_cached(path: Path, key: bytes) -> bytes | None:
    """The database bytes stored at ``path`` for ``key``, or None when anything is off."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _owned_private(st) or \
                st.st_size > _CACHE_MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(_CACHE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    header_len = len(_CACHE_MAGIC) + 2 * 65
    if len(raw) <= header_len or not raw.startswith(_CACHE_MAGIC):
        return None
    stored_key = raw[len(_CACHE_MAGIC):len(_CACHE_MAGIC) + 64]
    body_digest = raw[len(_CACHE_MAGIC) + 65:header_len - 1]
    body = raw[header_len:]
    if stored_key != key or hashlib.sha256(body).hexdigest().encode() != body_digest:
        return None
    return body


def _store(directory: Path, path: Path, key: bytes, body: bytes) -> None:
    """Write atomically: an exclusive, no-follow temp file in the same directory, then rename."""
    tmp = directory / f".hs-{os.getpid()}-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_CACHE_MAGIC + key + b"\n" + hashlib.sha256(body).hexdigest().encode()
                     + b"\n" + body)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _prune(directory: Path, keep: Path) -> None:
    """Drop all but the newest databases, and temp files a crashed run left behind."""
    now = time.time()
    entries = []
    for entry in directory.iterdir():
        with contextlib.suppress(OSError):
            st = os.lstat(entry)
            if entry.name.startswith(".hs-") and entry.name.endswith(".tmp"):
                if now - st.st_mtime > 3600:
                    os.unlink(entry)
            elif entry.name.startswith("hs-") and entry.name.endswith(".db") and entry != keep:
                entries.append((st.st_mtime, entry))
    for _, entry in sorted(entries, reverse=True)[_CACHE_KEEP - 1:]:
        with contextlib.suppress(OSError):
            os.unlink(entry)


def _cached_database(hyperscan, exprs: list[bytes], flags: list[int]):
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
    return PythonEngine(patterns)
