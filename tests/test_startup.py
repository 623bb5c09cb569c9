"""Start-up (issue 13): the data cache (datacache.py) is rebuilt when a source changes and trusts
nothing it did not write; a JSON analysis imports nothing its output does not need."""

from __future__ import annotations

import hashlib
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor import datacache
from dsdoctor.diagnose import engine
from dsdoctor.logs import formats
from dsdoctor.redact import formats as secret

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "fp16_loss_scale_collapse"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("DSDOCTOR_CACHE_DIR", str(d))
    return d


class Builder:
    """A build function for cached_files that counts its calls."""

    def __init__(self, value):
        self.value = value
        self.calls = 0

    def __call__(self, sources):
        self.calls += 1
        return self.value


def _files(directory: Path, **contents: bytes) -> list[tuple[str, str]]:
    directory.mkdir(exist_ok=True)
    for name, data in contents.items():
        (directory / f"{name}.yaml").write_bytes(data)
    return [(p.name, str(p)) for p in sorted(directory.glob("*.yaml"))]


def _touch_later(path: Path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_built_once_then_loaded(cache: Path, tmp_path: Path) -> None:
    build = Builder({"a": [1, 2.5, None], "b": ("x", True)})
    src = _files(tmp_path / "src", one=b"a: 1\n")
    assert datacache.cached_files("t", src, build) == build.value
    assert datacache.cached_files("t", src, build) == build.value
    assert build.calls == 1
    (entry,) = cache.glob("t-*.marshal")
    assert stat.S_IMODE(os.lstat(entry).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700


def test_rebuilt_when_a_rule_file_changes(cache: Path, tmp_path: Path) -> None:
    rules = {p.stem.replace("-", "_"): p.read_bytes() for p in (ROOT / "rules").glob("*.yaml")}
    sources = _files(tmp_path / "rules", **rules)
    first = Builder("built from the shipped rules")
    datacache.cached_files("rules", sources, first)
    edited = Path(sources[0][1])
    shipped = edited.read_bytes()
    edited.write_bytes(shipped + b"\n# an edit\n")
    second = Builder("built from the edited rules")
    assert datacache.cached_files("rules", sources, second) == "built from the edited rules"
    assert second.calls == 1
    # and the same bytes again, written later, are built again (the key is what the file is
    # now: its size and modification time)
    edited.write_bytes(shipped)
    _touch_later(edited)
    third = Builder("built again")
    assert datacache.cached_files("rules", sources, third) == "built again"
    assert third.calls == 1


def test_package_files_are_keyed_by_stat_and_read_only_to_build(cache: Path, tmp_path: Path,
                                                                 monkeypatch) -> None:
    files = _files(tmp_path / "rules", a=b"x: 1\n", b=b"x: 1\n")
    reads: list[int] = []
    real_read = datacache.read_files
    monkeypatch.setattr(datacache, "read_files", lambda fs: reads.append(1) or real_read(fs))

    def build(sources):
        return [n + "=" + b.decode() for n, b in sources]

    assert datacache.cached_files("t", files, build) == ["a.yaml=x: 1\n", "b.yaml=x: 1\n"]
    assert datacache.cached_files("t", files, build) == ["a.yaml=x: 1\n", "b.yaml=x: 1\n"]
    assert len(reads) == 1  # the second run read no source file
    # an edit (same size, a later modification time) is seen without reading the files
    Path(files[1][1]).write_bytes(b"x: 2\n")
    _touch_later(Path(files[1][1]))
    assert datacache.cached_files("t", files, build) == ["a.yaml=x: 1\n", "b.yaml=x: 2\n"]
    assert len(reads) == 2


def test_package_files_lists_a_data_package_by_name() -> None:
    files = datacache.package_files("dsdoctor.rules", lambda n: n.endswith(".yaml"))
    assert [n for n, _ in files] == sorted(p.name for p in (ROOT / "rules").glob("*.yaml"))
    assert all(os.path.samefile(path, ROOT / "rules" / n) for n, path in files)


def test_shipped_rules_and_formats_from_the_cache_equal_a_fresh_build(cache: Path) -> None:
    engine._load_rules_cached.cache_clear()
    built = engine._shipped_rules()  # builds and stores
    assert list(cache.glob("rules-*.marshal"))
    loaded = engine._shipped_rules()  # loads
    texts = sorted((p.name, p.read_text()) for p in (ROOT / "rules").glob("*.yaml"))
    assert built == loaded == engine._rules_from_texts(texts)
    formats.load_patterns.cache_clear()
    try:
        sources = sorted((p.name, p.read_bytes())
                         for p in (ROOT / "dsdoctor/logs/formats").glob("*.yaml"))
        fresh = tuple(formats.Pattern(**d) for d in formats._validated_fields(sources))
        # repr: sample values hold NaN, and nan != nan
        assert repr(formats.load_patterns()) == repr(fresh)  # built and stored
        formats.load_patterns.cache_clear()
        assert list(cache.glob("formats-*.marshal"))
        assert repr(formats.load_patterns()) == repr(fresh)  # loaded
    finally:
        formats.load_patterns.cache_clear()


def _planted_body(value) -> bytes:
    return marshal.dumps(value)


def _write_entry(path: Path, key: bytes, body: bytes, mode: int = 0o600) -> None:
    path.write_bytes(b"dsdoctor-data-cache 1\n" + key + b"\n"
                     + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    os.chmod(path, mode)


@pytest.mark.parametrize("damage", ["garbage", "forged-digest", "group-writable", "symlink",
                                    "truncated"])
def test_corrupt_or_planted_entries_are_refused(cache: Path, tmp_path: Path, damage: str) -> None:
    src = _files(tmp_path / "src", x=b"detect: everything\n")
    good = Builder(["the real result"])
    datacache.cached_files("t", src, good)
    (entry,) = cache.glob("t-*.marshal")
    key = datacache.files_key("t", src)
    planted = _planted_body(["detection switched off"])
    if damage == "garbage":
        entry.write_bytes(os.urandom(300))
    elif damage == "forged-digest":
        raw = entry.read_bytes()
        entry.write_bytes(raw[:-len(planted)] + planted if len(raw) > len(planted) else planted)
    elif damage == "group-writable":
        _write_entry(entry, key, planted, 0o664)  # another user of the group could have put it
    elif damage == "symlink":
        target = tmp_path / "elsewhere.marshal"
        _write_entry(target, key, planted)
        entry.unlink()
        entry.symlink_to(target)
    else:
        entry.write_bytes(entry.read_bytes()[:40])
    again = Builder(["the real result"])
    assert datacache.cached_files("t", src, again) == ["the real result"]
    assert again.calls == 1


def test_a_shared_cache_directory_is_not_used(cache: Path, tmp_path: Path) -> None:
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    build = Builder([1])
    src = _files(tmp_path / "src", a=b"")
    datacache.cached_files("t", src, build)
    datacache.cached_files("t", src, build)
    assert build.calls == 2 and not list(cache.glob("t-*"))


def test_keyword_selection_matches_each_formats_own_prefilter() -> None:
    """redact_formats picks formats by one membership test per distinct keyword: the same set
    SecretFormat.applies gives, on every sample and negative."""
    texts = [s.text for f in secret.secret_formats() for s in f.samples]
    texts += [n for f in secret.secret_formats() for n in f.negatives]
    assert texts
    for text in texts:
        lowered = text.lower()
        present = {k for k in secret._keywords() if k in lowered}
        chosen = [f.id for f in secret.secret_formats()
                  if not f.keywords or not present.isdisjoint(f.keywords)]
        assert chosen == [f.id for f in secret.secret_formats() if f.applies(lowered)]


PROBE = """
import io, sys, contextlib
from dsdoctor.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["analyze", sys.argv[1], "--config", sys.argv[2], "--format", "json"])
heavy = [m for m in ("rich", "textual", "psutil", "multiprocessing", "yaml",
                    "dsdoctor.redact.identity", "dsdoctor.cli.watch", "dsdoctor.render.env",
                    "regex", "hashlib", "importlib.resources", "dsdoctor.logs.parallel",
                    "dsdoctor.facts.scriptcheck")
         if m in sys.modules]
print(code, " ".join(heavy))
"""


def test_json_analysis_imports_no_ui_or_unused_library(tmp_path: Path) -> None:
    env = dict(os.environ, DSDOCTOR_CACHE_DIR=str(tmp_path / "cache"))
    args = [sys.executable, "-c", PROBE, str(SAMPLE / "train.log"), str(SAMPLE / "ds_config.json")]
    first = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    code, *heavy = first.stdout.split()
    assert code == "1"  # the sample's run failed: exit code 1
    # nothing to mask but secrets; no other command's module
    assert not set(heavy) & {"rich", "textual", "psutil", "multiprocessing",
                             "dsdoctor.redact.identity", "dsdoctor.cli.watch",
                             "dsdoctor.render.env"}, heavy
    # nor what only another input needs: the regex module (the formats are re's), OpenSSL's
    # hashlib (the caches use the built-in SHA-256), the parallel scan (a small file), the
    # script parser (no --script)
    assert not set(heavy) & {"regex", "hashlib", "importlib.resources", "dsdoctor.logs.parallel",
                             "dsdoctor.facts.scriptcheck"}, heavy
    # with the data cache written, not even the YAML parser is needed
    second = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert second.stdout.split()[1:] == [], second.stdout
