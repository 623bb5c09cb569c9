"""docs/seed-checklist.md stays consistent: the rules it names exist, its counts are the table's.

The checklist is the repository's record of which piece of the guides' advice each rule covers
(issue 9); a renamed or dropped rule, or a status changed without its Summary, would make it lie.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "seed-checklist.md"
ROW = re.compile(r"^\| (S\d+) \|")
CODE = re.compile(r"\bDS\d{3}\b")


def _rows(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            # cells split on unescaped pipes: # | seed | section | says | source | rules | status | why
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            assert len(cells) == 8, f"{m.group(1)}: {len(cells)} cells, expected 8"
            assert m.group(1) not in rows, f"{m.group(1)} listed twice"
            rows[m.group(1)] = cells
    return rows


def _summary(text: str, label: str) -> int:
    m = re.search(rf"^- {re.escape(label)}[^*\n]*\*\*(\d+)\*\*", text, re.M)
    assert m, f"Summary line '{label}' not found"
    return int(m.group(1))


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    nxt = text.find("\n## ", start + 1)
    return text[start:nxt if nxt > 0 else len(text)]


def test_every_item_once_with_a_known_status() -> None:
    rows = _rows(DOC.read_text(encoding="utf-8"))
    assert list(rows) == [f"S{i}" for i in range(1, 143)]
    assert {c[6] for c in rows.values()} <= {"V", "P", "U", "A"}


def test_every_rule_code_named_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    known = {p.name[:5] for p in (ROOT / "rules").glob("DS*.yaml")}
    named = set(CODE.findall(text))
    assert named, "the checklist names no rule"
    assert named - known == set(), f"rules named in the checklist but missing from rules/: {sorted(named - known)}"


def test_covered_items_name_their_rule() -> None:
    for item, cells in _rows(DOC.read_text(encoding="utf-8")).items():
        if cells[6] in ("V", "P"):
            assert CODE.search(cells[5]) or "dsdoctor" in cells[5] or "no false positive" in cells[5], \
                f"{item} is {cells[6]} but names no rule"
            assert cells[7], f"{item} is {cells[6]} without what was seen"


def test_summary_counts_are_the_tables() -> None:
    text = DOC.read_text(encoding="utf-8")
    status = Counter(c[6] for c in _rows(text).values())
    assert _summary(text, "Items") == sum(status.values())
    assert _summary(text, "Checkable") == status["V"] + status["P"] + status["U"]
    assert re.search(rf"advisory only: {status['A']}\b", text)
    assert _summary(text, "Covered and verified") == status["V"]
    assert _summary(text, "Covered but not firing") == status["P"]
    assert _summary(text, "Checkable and uncovered") == status["U"]


def test_lists_match_the_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = _rows(text)
    uncovered = re.findall(r"^\d+\. (S\d+) ", _section(text, "Uncovered checkable items"), re.M)
    assert sorted(uncovered) == sorted(s for s, c in rows.items() if c[6] == "U")
    partial = re.findall(r"^- (S\d+) ", _section(text, "Covered but not firing as expected"), re.M)
    assert sorted(partial) == sorted(s for s, c in rows.items() if c[6] == "P")
