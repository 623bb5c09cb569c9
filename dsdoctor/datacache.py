"""A private on-disk cache for what dsdoctor derives from its own data files on every run.

Parsing and validating the rules and format YAML costs more than analyzing a small log (about
0.1 s of a 0.25 s run). :func:`cached_files` keeps the validated result as a ``marshal`` file
keyed by a digest of dsdoctor's version and each source file's name, size and modification time
(as Python's bytecode cache is), so any edit to a rule or format file (or a new release) rebuilds
it, and a run that finds its result reads none of the files.

Another user who can write to a shared cache directory could plant a file that switches detection
off, so nothing there is trusted (the same rules as the Hyperscan database cache, docs/security.md):
the directory and the file must be ours and writable by us only, the file carries the key it was
built for and a digest of its body, and it is written to an O_EXCL|O_NOFOLLOW temp file, then
renamed, never through a link. Any trouble (a read-only home, a foreign or corrupt file) means the
data is built from the sources, as if there were no cache.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# CPython's built-in SHA-256 gives hashlib's digests without hashlib's import of OpenSSL's
# libcrypto (about 5 ms of a 0.1 s start-up); elsewhere hashlib's
try:
    from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # CPython 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # 3.11
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment,no-redef,unused-ignore]


def digest(data: bytes) -> bytes:
    """The SHA-256 of ``data`` in hex (ASCII bytes), as cache keys and body digests are kept."""
    return sha256(data).hexdigest().encode()

MAX_BYTES = 64 << 20
KEEP = 4  # newest files kept per kind; older ones (previous versions of the sources) are pruned
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DATA_MAGIC = b"dsdoctor-data-cache 1\n"


def cache_dir() -> Path:
    base = os.environ.get("DSDOCTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "dsdoctor")
    return Path(base)


def owned_private(st: os.stat_result) -> bool:
    """Ours and not writable by group or others (always true where there are no uids)."""
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def safe_cache_dir(create: bool) -> Path | None:
    """The cache directory when it is a real directory of ours, private; else None."""
    path = cache_dir()
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not owned_private(st):
        return None
    return path


def load_file(path: Path, key: bytes, magic: bytes) -> bytes | None:
    """The body stored at ``path`` for ``key`` (64 hex digits), or None when anything is off."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not owned_private(st) or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    header_len = len(magic) + 2 * 65
    if len(raw) <= header_len or not raw.startswith(magic):
        return None
    stored_key = raw[len(magic):len(magic) + 64]
    body_digest = raw[len(magic) + 65:header_len - 1]
    body = raw[header_len:]
    if stored_key != key or digest(body) != body_digest:
        return None
    return body


def store_file(directory: Path, path: Path, key: bytes, body: bytes, magic: bytes) -> None:
    """Write atomically: an exclusive, no-follow temp file in the same directory, then rename."""
    tmp = directory / f".{path.name.split('-')[0]}-{os.getpid()}-{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(magic + key + b"\n" + digest(body) + b"\n" + body)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def prune(directory: Path, keep: Path, prefix: str, suffix: str) -> None:
    """Drop all but the newest ``prefix*suffix`` files, and temp files a crashed run left."""
    now = time.time()
    entries = []
    for entry in directory.iterdir():
        with contextlib.suppress(OSError):
            st = os.lstat(entry)
            if entry.name.startswith(f".{prefix}") and entry.name.endswith(".tmp"):
                if now - st.st_mtime > 3600:
                    os.unlink(entry)
            elif entry.name.startswith(prefix) and entry.name.endswith(suffix) and entry != keep:
                entries.append((st.st_mtime, entry))
    for _, entry in sorted(entries, reverse=True)[KEEP - 1:]:
        with contextlib.suppress(OSError):
            os.unlink(entry)


def package_dir(package: str) -> str:
    """The directory of one of dsdoctor's data packages. dsdoctor is installed as files (a
    wheel is unpacked), and importlib.resources alone costs ~5 ms of a start-up."""
    import importlib  # noqa: PLC0415

    return str(importlib.import_module(package).__path__[0])


def package_files(package: str, wanted: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(name, path) of the files of a data package whose names ``wanted`` keeps, by name."""
    directory = package_dir(package)
    return sorted((n, os.path.join(directory, n)) for n in os.listdir(directory) if wanted(n))


def files_key(kind: str, files: Sequence[tuple[str, str]], schema: str = "") -> bytes:
    """The digest of dsdoctor's version, the cache's kind and schema, and every file's name,
    size and modification time in ns (what Python's own bytecode cache checks): an edit or a
    reinstall changes it without the files being read."""
    from dsdoctor import __version__  # noqa: PLC0415

    h = sha256(f"{kind}\0{schema}\0{__version__}\0{len(files)}\0".encode())
    for name, path in files:
        st = os.stat(path)
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest().encode()


def read_files(files: Sequence[tuple[str, str]]) -> list[tuple[str, bytes]]:
    """(name, bytes) of each file."""
    out = []
    for name, path in files:
        with open(path, "rb") as fh:
            out.append((name, fh.read()))
    return out


def cached_files(kind: str, files: Sequence[tuple[str, str]],
                 build: Callable[[list[tuple[str, bytes]]], T], schema: str = "") -> T:
    """``build(read_files(files))`` from the cache when it holds the result for these files
    as they are now (files_key), else built and stored. A run that finds its result reads
    none of the files: this is how dsdoctor keeps its own rules, formats and secret formats."""
    return _cached(kind, files_key(kind, files, schema), lambda: build(read_files(files)))


def _cached(kind: str, key: bytes, build: Callable[[], T]) -> T:
    name = f"{kind}-{key[:32].decode()}.marshal"
    directory = safe_cache_dir(create=False)
    if directory is not None:
        body = load_file(directory / name, key, _DATA_MAGIC)
        if body is not None:
            try:
                return marshal.loads(body)  # type: ignore[no-any-return]
            except (ValueError, EOFError, TypeError):
                pass  # unreadable after all: build
    data = build()
    directory = safe_cache_dir(create=True)
    if directory is not None:
        try:
            store_file(directory, directory / name, key, marshal.dumps(data),  # type: ignore[arg-type]
                       _DATA_MAGIC)
            prune(directory, directory / name, f"{kind}-", ".marshal")
        except (OSError, ValueError):  # a read-only cache, or data marshal cannot hold
            pass
    return data
