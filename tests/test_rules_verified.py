"""Every rule's claims are traced (issue 20): each rule carries a ``verified`` list of
{claim, source, holds, quote}, and each source can be checked.

- a code source (``owner/repo@TAG:path:LINE[-LINE]``) names a release tag; for DeepSpeed the
  tag's release line has a key table (dsdoctor/data/ds_keys_*.json); when a snapshot of the
  repository is on this machine (``DSDOCTOR_UPSTREAM_MIRRORS``, default /work/.mirror, as the
  ``fetch`` tool leaves it, or a release unpacked there by scripts/upstream_sources.py), the
  quote must be in the cited lines at that tag;
- a test source names a test of this repository that exists;
- ``holds`` names a package and version bounds that parse.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from dsdoctor.diagnose.engine import _CODE_SOURCE, _HOLDS, _TEST_SOURCE, load_rules

ROOT = Path(__file__).resolve().parents[1]
RULES = load_rules(str(ROOT / "rules"))
ENTRIES = [(r.code, i, v) for r in RULES for i, v in enumerate(r.verified)]
MIRRORS = Path(os.environ.get("DSDOCTOR_UPSTREAM_MIRRORS", "/work/.mirror"))
KEY_TABLE_LINES = {".".join(p.stem.split("_")[-1].split(".")[:2])
                   for p in (ROOT / "dsdoctor" / "data").glob("ds_keys_*.json")}

def test_every_rule_traces_its_claims():
    untraced = sorted(r.code for r in RULES if not r.verified)
    assert not untraced, f"rules without a verified list: {', '.join(untraced)}"


@pytest.mark.parametrize(("code", "i", "v"), ENTRIES, ids=[f"{c}-{i}" for c, i, _ in ENTRIES])
def test_holds_parses(code, i, v):
    m = _HOLDS.match(v.holds)
    assert m, v.holds
    if m["spec"]:
        SpecifierSet(m["spec"])  # raises on a bound pip would not read


#: Repositories whose released files are installed here under the repository's own paths.
_PACKAGES = {"pytorch/pytorch": ("torch", ""), "huggingface/transformers": ("transformers", "src/"),
             "huggingface/accelerate": ("accelerate", "src/"), "huggingface/peft": ("peft", "src/")}


def _installed_file(repo: str, tag: str, path: str) -> str | None:
    """The file from the installed release when it is the cited one (read, never imported)."""
    package, prefix = _PACKAGES.get(repo, ("", ""))
    if not package or not path.startswith(prefix):
        return None
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    if dist.version.split("+")[0] != tag.lstrip("v"):
        return None
    target = Path(str(dist.locate_file(path[len(prefix):])))
    return target.read_text(encoding="utf-8") if target.is_file() else ""


def _cited_file(repo: str, tag: str, path: str) -> str | None:
    """The file at the tag: from a release unpacked by scripts/upstream_sources.py, else from a
    git snapshot holding the tag (the ``fetch`` tool's), else None (nothing to check against)."""
    base = MIRRORS / repo.replace("/", "+")
    unpacked = base / "tags" / tag
    if unpacked.is_dir():
        return (unpacked / path).read_text(encoding="utf-8") if (unpacked / path).is_file() else ""
    installed = _installed_file(repo, tag, path)
    if installed is not None:
        return installed
    git_dir = base / "repo"
    if not git_dir.is_dir():
        return None
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"],
                           capture_output=True, text=True, check=False)
    if shown.returncode == 0:
        return shown.stdout
    has_tag = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "-q", "--verify",
                              f"refs/tags/{tag}"], capture_output=True, check=False)
    return "" if has_tag.returncode == 0 else None


@pytest.mark.parametrize(("code", "i", "v"), [e for e in ENTRIES if e[2].kind == "code"],
                         ids=[f"{c}-{i}" for c, i, v in ENTRIES if v.kind == "code"])
def test_code_source_names_a_release_and_quotes_its_lines(code, i, v):
    m = _CODE_SOURCE.match(v.source)
    # NCCL tags its releases with a package revision: v2.21.5-1
    assert re.fullmatch(r"v?\d+\.\d+\.\d+(?:\.post\d+|-\d+)?", m["tag"]), (
        f"{v.source}: not a release tag")
    first, last = int(m["first"]), int(m["last"] or m["first"])
    assert 0 < first <= last <= first + 80, f"{v.source}: cite the lines, not a whole file"
    if m["repo"].lower() == "deepspeedai/deepspeed":
        line = ".".join(m["tag"].lstrip("v").split(".")[:2])
        assert line in KEY_TABLE_LINES, f"{v.source}: DeepSpeed {line} has no key table"
    text = _cited_file(m["repo"], m["tag"], m["path"])
    if text is None:
        pytest.skip(f"{m['repo']}@{m['tag']} is not on this machine (scripts/upstream_sources.py)")
    assert text, f"{v.source}: no such file at {m['tag']}"
    cited = "\n".join(text.splitlines()[first - 1:last])
    assert " ".join(v.quote.split()) in " ".join(cited.split()), (
        f"{code}: {v.quote!r} is not in {v.source}:\n{cited}")


@pytest.mark.parametrize(("code", "i", "v"), [e for e in ENTRIES if e[2].kind == "test"],
                         ids=[f"{c}-{i}" for c, i, v in ENTRIES if v.kind == "test"])
def test_test_source_exists(code, i, v):
    m = _TEST_SOURCE.match(v.source)
    path = ROOT / m["path"]
    assert path.is_file(), v.source
    names = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(n, ast.FunctionDef)}
    assert m["name"] in names, f"{v.source}: no such test"
