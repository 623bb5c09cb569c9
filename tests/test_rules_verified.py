"""Every rule's claims are traced (issue 20): each rule carries a ``verified`` list of
{claim, source, holds, quote}, and each source can be checked.

- a code source (``owner/repo@TAG:path:LINE[-LINE]``) names a release tag; for DeepSpeed the
  tag's release line has a key table (dsdoctor/data/ds_keys_*.json); when a snapshot of the
  repository is on this machine (``DSDOCTOR_UPSTREAM_MIRRORS``, default /work/.mirror, as the
  ``fetch`` tool leaves it), the quote must be in the cited lines at that tag;
- a test source names a test of this repository that exists;
- ``holds`` names a package and version bounds that parse.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
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

#: Rules whose claims are not traced yet. It may only shrink: a rule that gains a ``verified``
#: list must leave it (the test below fails otherwise), and no new rule may join it.
NOT_YET_TRACED = {r.code for r in RULES if not r.verified}
_NOT_YET_TRACED_AT_MOST = 82


def test_untraced_rules_only_shrink():
    assert len(NOT_YET_TRACED) <= _NOT_YET_TRACED_AT_MOST, (
        f"{len(NOT_YET_TRACED)} rules without a verified list (at most {_NOT_YET_TRACED_AT_MOST}): "
        "a new rule must trace its claims")


@pytest.mark.parametrize(("code", "i", "v"), ENTRIES, ids=[f"{c}-{i}" for c, i, _ in ENTRIES])
def test_holds_parses(code, i, v):
    m = _HOLDS.match(v.holds)
    assert m, v.holds
    if m["spec"]:
        SpecifierSet(m["spec"])  # raises on a bound pip would not read


def _snapshot(repo: str) -> Path | None:
    owner, name = repo.split("/")
    git_dir = MIRRORS / f"{owner}+{name}" / "repo"
    return git_dir if git_dir.is_dir() else None


@pytest.mark.parametrize(("code", "i", "v"), [e for e in ENTRIES if e[2].kind == "code"],
                         ids=[f"{c}-{i}" for c, i, v in ENTRIES if v.kind == "code"])
def test_code_source_names_a_release_and_quotes_its_lines(code, i, v):
    m = _CODE_SOURCE.match(v.source)
    assert re.fullmatch(r"v?\d+\.\d+\.\d+(?:\.post\d+)?", m["tag"]), f"{v.source}: not a release tag"
    first, last = int(m["first"]), int(m["last"] or m["first"])
    assert 0 < first <= last <= first + 80, f"{v.source}: cite the lines, not a whole file"
    if m["repo"].lower() == "deepspeedai/deepspeed":
        line = ".".join(m["tag"].lstrip("v").split(".")[:2])
        assert line in KEY_TABLE_LINES, f"{v.source}: DeepSpeed {line} has no key table"
    git_dir = _snapshot(m["repo"])
    if git_dir is None:
        pytest.skip(f"no snapshot of {m['repo']} on this machine")
    text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{m['tag']}:{m['path']}"],
                          capture_output=True, text=True, check=False)
    if text.returncode != 0 and "unknown revision" in text.stderr + text.stdout:
        pytest.skip(f"the snapshot of {m['repo']} lacks tag {m['tag']}")
    assert text.returncode == 0, f"{v.source}: {text.stderr.strip()}"
    cited = "\n".join(text.stdout.splitlines()[first - 1:last])
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
