"""The compiled-pattern cache of the Hyperscan engine trusts nothing it finds on disk
(issue 14, item 5): foreign, shared, linked, planted or corrupt entries are ignored and rebuilt."""

from __future__ import annotations

import os
import stat

import pytest

from dsdoctor.logs import prefilter
from dsdoctor.logs.prefilter import hyperscan_available
from dsdoctor.logs.scan import scan_text

pytestmark = pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")

# torch's OOM message (ms-swift#5943 format, as in tests/test_reader.py)
LOG = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _kinds() -> set[str]:
    prefilter._LOADED.clear()  # as a new process: the database comes from the disk cache
    return set(scan_text(LOG, engine="hyperscan").symptoms)


def _never_matching_db() -> bytes:
    import hyperscan

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=[b"zz-never-in-a-log-zz"], ids=[0], elements=1, flags=[0])
    return hyperscan.dumpb(db)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("DSDOCTOR_CACHE_DIR", str(d))
    assert "gpu-oom" in _kinds()  # compiles and stores
    return d


def _entries(d):
    return sorted(d.glob("hs-*.db"))


def test_written_private_with_a_digest(cache):
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    for f in _entries(cache):
        assert stat.S_IMODE(os.lstat(f).st_mode) == 0o600
        assert f.read_bytes().startswith(b"dsdoctor-hs-cache 1\n")


def test_planted_database_is_not_trusted(cache):
    for f in _entries(cache):
        f.write_bytes(_never_matching_db())  # a valid database of other patterns
    assert "gpu-oom" in _kinds()


def test_planted_database_with_forged_header_in_a_shared_file_is_not_trusted(cache):
    import hashlib

    body = _never_matching_db()
    for f in _entries(cache):
        key = f.read_bytes()[len(b"dsdoctor-hs-cache 1\n"):][:64]
        f.write_bytes(b"dsdoctor-hs-cache 1\n" + key + b"\n"
                      + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        f.chmod(0o666)  # writable by anyone: not ours alone
    assert "gpu-oom" in _kinds()


def test_wrong_key_or_corrupt_body_is_rebuilt(cache):
    for f in _entries(cache):
        raw = bytearray(f.read_bytes())
        raw[-10] ^= 0xFF
        f.write_bytes(bytes(raw))
    assert "gpu-oom" in _kinds()
    assert _load_ok(cache)  # rebuilt: the entry verifies again


def test_a_process_loads_each_database_once(cache):
    """triage analyzes thousands of logs in one process: the disk cache is read once."""
    _kinds()
    for f in _entries(cache):
        f.write_bytes(b"damaged")  # a process that had to read it again would rebuild it
    assert "gpu-oom" in set(scan_text(LOG, engine="hyperscan").symptoms)
    assert all(f.read_bytes() == b"damaged" for f in _entries(cache))


def _load_ok(d) -> bool:
    return any(prefilter._load_cached(f, f.read_bytes()[20:84]) is not None for f in _entries(d))


def test_symlinked_entry_is_neither_read_nor_written_through(cache, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    for f in _entries(cache):
        f.unlink()
        f.symlink_to(victim)
        # the temp name of the previous writer was predictable: plant a link there too
        f.with_suffix(f".{os.getpid()}.tmp").symlink_to(victim)
    assert "gpu-oom" in _kinds()
    assert victim.read_bytes() == b"precious"


def test_shared_cache_directory_is_not_used(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("DSDOCTOR_CACHE_DIR", str(d))
    assert "gpu-oom" in _kinds()
    assert not list(d.iterdir())


def test_old_entries_are_pruned(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    for i in range(10):
        old = d / f"hs-{i:032x}.db"
        old.write_bytes(b"old")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    stale_tmp = d / ".hs-1-abc.tmp"
    stale_tmp.write_bytes(b"")
    os.utime(stale_tmp, (1_000_000, 1_000_000))
    monkeypatch.setenv("DSDOCTOR_CACHE_DIR", str(d))
    assert "gpu-oom" in _kinds()
    assert len(_entries(d)) <= prefilter._CACHE_KEEP
    assert not stale_tmp.exists()
