"""``dsdoctor schema``: the JSON Schema of ``analyze --format json`` (shipped in the package)."""

from __future__ import annotations

import argparse
import sys
from importlib import resources

SCHEMA_FILE = "analysis.schema.json"


def schema_text() -> str:
    """The schema as shipped (dsdoctor/data/analysis.schema.json)."""
    return resources.files("dsdoctor.data").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "schema", help="print the JSON Schema of analyze --format json / jsonl",
        description="Print the JSON Schema (draft 2020-12) that every analysis of "
        "'dsdoctor analyze --format json' (and each line of --format jsonl, each record of "
        "'triage --format jsonl') validates against. See docs/machine-output.md.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return 0
