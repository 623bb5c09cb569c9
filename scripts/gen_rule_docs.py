#!/usr/bin/env python3
"""Generate docs/rules/<CODE>.md and docs/rules/README.md from rules/*.yaml.

    python scripts/gen_rule_docs.py          # (re)write the docs
    python scripts/gen_rule_docs.py --check  # exit 1 if docs/rules is out of date

The text is the same as ``dsdoctor rules CODE --format markdown`` (dsdoctor/cli/rules.py).
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from dsdoctor.cli.rules import rule_markdown, rules_index_markdown  # noqa: E402
from dsdoctor.diagnose.engine import load_rules  # noqa: E402

DOCS = os.path.join(ROOT, "docs", "rules")


def expected_files() -> dict[str, str]:
    """File name -> content of every generated doc."""
    rules = load_rules(os.path.join(ROOT, "rules"))
    files = {f"{r.code}.md": rule_markdown(r) for r in rules}
    files["README.md"] = rules_index_markdown(rules)
    return files


def stale_files() -> list[str]:
    """Docs that are missing, different, or left over from a removed rule."""
    want = expected_files()
    stale = []
    for name, text in want.items():
        path = os.path.join(DOCS, name)
        try:
            with open(path, encoding="utf-8") as fh:
                if fh.read() != text:
                    stale.append(name)
        except FileNotFoundError:
            stale.append(name)
    if os.path.isdir(DOCS):
        stale += sorted(n for n in os.listdir(DOCS) if n.endswith(".md") and n not in want)
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when out of date")
    args = ap.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print(f"docs/rules is out of date ({', '.join(stale)}): run scripts/gen_rule_docs.py",
                  file=sys.stderr)
            return 1
        return 0
    os.makedirs(DOCS, exist_ok=True)
    want = expected_files()
    for name in os.listdir(DOCS):
        if name.endswith(".md") and name not in want:
            os.remove(os.path.join(DOCS, name))
    for name, text in want.items():
        with open(os.path.join(DOCS, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    print(f"wrote {len(want)} files to docs/rules", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
