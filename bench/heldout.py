"""Recall and verdict agreement on labelled real logs, as a new user would run dsdoctor on them.

    python bench/heldout.py tests/data/real_logs_sealed            # the held-out fifth
    python bench/heldout.py tests/data/real_logs_wild --tree ../old  # another checkout's code

Each log is analyzed in a child process (``python -m dsdoctor analyze LOG --format json``, the
code of ``--tree``, default this checkout), exactly as a user runs it: no config, no hints. The
labels are the collectors' (``labels-*.tsv``: file, expected_classes, must_not_classes, fate,
source, notes), written from the threads before anyone ran dsdoctor on the logs.

Figures (printed as a table, and as JSON with ``--json``):
- symptoms: expected kinds found / expected kinds labelled; false positives: must-not kinds found;
- failed runs flagged: logs labelled failed, hung, killed, stopped or not-learning that exit 1;
- healthy logs quiet: logs with no expected kind labelled healthy, ended-mid-run or unknown that
  exit 0;
- verdict agreement: the fate equals the label's (exact), and "same side" (an error fate for an
  error label, a non-error fate for a non-error label).
Sealed logs are for measuring only: read the table, never the logs (bench/seal.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from seal import canonical

ERROR_FATES = {"failed", "hung", "killed", "stopped", "not-learning"}
QUIET_FATES = {"healthy", "ended-mid-run", "unknown", "recovered"}
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Outcome:
    """What dsdoctor said of one labelled log."""

    file: str
    label_fate: str
    fate: str
    exit_code: int
    expected: frozenset[str]
    found: frozenset[str]
    false_positives: frozenset[str]


def labelled(folder: Path, labels_glob: str = "labels*.tsv") -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for labels in sorted(folder.glob(labels_glob)):
        with labels.open(encoding="utf-8", newline="") as fh:
            rows += [r for r in csv.DictReader(fh, delimiter="\t") if r.get("file")]
    return rows


def kinds(text: str | None) -> frozenset[str]:
    return frozenset(k.strip() for k in (text or "").split(",") if k.strip())


def analyze(log: Path, tree: Path, python: str) -> tuple[dict, int]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([python, "-m", "dsdoctor", "analyze", str(log), "--format", "json",
                           "--quiet"], capture_output=True, text=True, env=env, check=False,
                          cwd=tree)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{log}: dsdoctor exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout), proc.returncode


def measure(folder: Path, tree: Path, python: str,
            exclude: frozenset[str] | set[str] = frozenset(),
            labels_glob: str = "labels*.tsv") -> list[Outcome]:
    out = []
    for row in labelled(folder, labels_glob):
        if canonical(row["source"]) in exclude:
            continue
        doc, code = analyze((folder / row["file"]).resolve(), tree, python)
        found = {s["kind"] for s in doc.get("symptoms", [])}
        fate = (doc.get("verdict") or {}).get("fate", "?")
        expected, must_not = kinds(row["expected_classes"]), kinds(row["must_not_classes"])
        out.append(Outcome(row["file"], row["fate"].strip(), fate, code, expected,
                           expected & found, must_not & found))
    return out


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    expected = sum(len(o.expected) for o in outcomes)
    found = sum(len(o.found) for o in outcomes)
    failed = [o for o in outcomes if o.label_fate in ERROR_FATES]
    quiet = [o for o in outcomes if o.label_fate in QUIET_FATES and not o.expected]
    same_side = sum((o.fate in ERROR_FATES) == (o.label_fate in ERROR_FATES) for o in outcomes)
    return {
        "logs": len(outcomes),
        "symptoms_found": found, "symptoms_expected": expected,
        "false_positive_logs": sum(1 for o in outcomes if o.false_positives),
        "failed_flagged": sum(1 for o in failed if o.exit_code == 1), "failed_runs": len(failed),
        "healthy_quiet": sum(1 for o in quiet if o.exit_code == 0), "healthy_logs": len(quiet),
        "called_healthy_when_failed": sum(1 for o in failed if o.fate == "healthy"),
        "fate_exact": sum(1 for o in outcomes if o.fate == o.label_fate),
        "fate_same_side": same_side,
        "confusion": Counter(f"{o.label_fate} -> {o.fate}" for o in outcomes),
    }


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose dsdoctor to run")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--exclude-source", action="append", default=[], metavar="URL",
                    help="leave out the logs of this thread (one that shares its paste with an "
                         "open thread); only the source column is read")
    ap.add_argument("--labels", default="labels*.tsv", metavar="GLOB",
                    help="the label files to read (labels-[h-k].tsv: one collection's logs)")
    ap.add_argument("--misses", action="store_true",
                    help="list the logs missed (do not use on the sealed set while writing patterns)")
    args = ap.parse_args(argv)
    outcomes = measure(args.folder, args.tree.resolve(), args.python,
                       exclude={canonical(u) for u in args.exclude_source},
                       labels_glob=args.labels)
    s = summary(outcomes)
    if args.json:
        print(json.dumps(s, indent=2, default=dict))
        return 0
    print(f"logs: {s['logs']}  ({args.folder}, code of {args.tree})")
    print(f"symptom kinds found:      {_pct(s['symptoms_found'], s['symptoms_expected'])}")  # type: ignore[arg-type]
    print(f"logs with a false positive: {s['false_positive_logs']}")
    print(f"failed runs exit 1:       {_pct(s['failed_flagged'], s['failed_runs'])}")  # type: ignore[arg-type]
    print(f"failed runs called HEALTHY: {s['called_healthy_when_failed']}")
    print(f"healthy logs exit 0:      {_pct(s['healthy_quiet'], s['healthy_logs'])}")  # type: ignore[arg-type]
    print(f"fate, exact:              {_pct(s['fate_exact'], s['logs'])}")  # type: ignore[arg-type]
    print(f"fate, same side (error or not): {_pct(s['fate_same_side'], s['logs'])}")  # type: ignore[arg-type]
    print("label -> verdict:")
    for pair, n in sorted(s["confusion"].items(), key=lambda t: -t[1]):  # type: ignore[attr-defined]
        print(f"  {n:3d}  {pair}")
    if args.misses:
        for o in outcomes:
            if o.expected - o.found or o.false_positives or (
                    (o.fate in ERROR_FATES) != (o.label_fate in ERROR_FATES)):
                print(f"MISS {o.file}: label {o.label_fate} {sorted(o.expected)}; got {o.fate} "
                      f"found {sorted(o.found)} missing {sorted(o.expected - o.found)} "
                      f"fp {sorted(o.false_positives)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
