#!/usr/bin/env python3
"""Triage's throughput against one process per log (issue 22, item 4), in the same run.

    python bench/triage_throughput.py [--every K] [--engine auto|python] [--json]

The logs are the repository's real logs: tests/data/real_logs_wild, tests/data/real_logs_extra
and sample_logs/*/ (the held-out set is never read). The reference runs, for each log, the
command a scheduler hook would run today: ``python -m dsdoctor analyze LOG --format json``, one
child process per log, one after the other. The measured command is one child process:
``python -m dsdoctor triage LOG... --format jsonl`` (each log given alone is a job of its own).
Both run on this checkout (PYTHONPATH), bytecode written once beforehand. ``--every K`` runs the
reference on every K-th log only (throughput is per log; the verdicts are compared on those).

Prints wall seconds and logs/s of each, the ratio (the target is 20x), and every log whose verdict
(fate, retriable, the first problem's fingerprint) differs between the two; exits 1 if any
differs or the ratio is under the target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET = 20.0


def real_logs() -> list[Path]:
    logs = sorted((REPO / "tests" / "data" / "real_logs_wild").glob("*.log"))
    logs += sorted((REPO / "tests" / "data" / "real_logs_extra").glob("*.log"))
    logs += sorted((REPO / "sample_logs").glob("*/*.log"))
    return logs


def key(doc: dict) -> tuple:
    """What must agree: the fate, the retry answer, the deciding cause's id."""
    v = doc.get("verdict") or {}
    first = (doc.get("problems") or [{}])[0]
    return (v.get("fate"), v.get("retriable"), first.get("cause"), first.get("fingerprint"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=int, default=1, help="reference on every K-th log only")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    logs = real_logs()
    ref_logs = logs[::args.every]
    # bytecode and data caches written once, as after an install
    subprocess.run([py, "-m", "dsdoctor", "analyze", str(logs[0]), "--format", "json", "-q"],
                   env=env, cwd=REPO, capture_output=True, check=False)

    ref: dict[str, tuple] = {}
    t = time.perf_counter()
    for log in ref_logs:
        proc = subprocess.run([py, "-m", "dsdoctor", "analyze", str(log), "--format", "json", "-q",
                               "--engine", args.engine], env=env, cwd=REPO, capture_output=True,
                              text=True, check=False)
        ref[str(log)] = key(json.loads(proc.stdout)) if proc.stdout.strip() else ("error",)
    ref_s = time.perf_counter() - t

    t = time.perf_counter()
    proc = subprocess.run([py, "-m", "dsdoctor", "triage", *map(str, logs), "--format", "jsonl",
                           "-q", "--engine", args.engine], env=env, cwd=REPO, capture_output=True,
                          text=True, check=False)
    triage_s = time.perf_counter() - t
    got = {}
    for line in proc.stdout.splitlines():
        doc = json.loads(line)
        got[doc["input"]] = key(doc) if "error" not in doc else ("error",)

    differ = [(log, ref[log], got.get(log)) for log in ref if got.get(log) != ref[log]]
    figures = {"logs": len(logs), "reference_logs": len(ref_logs),
               "reference_s": round(ref_s, 2), "reference_logs_per_s": round(len(ref_logs) / ref_s, 2),
               "triage_s": round(triage_s, 2), "triage_logs_per_s": round(len(logs) / triage_s, 2),
               "ratio": round((len(logs) / triage_s) / (len(ref_logs) / ref_s), 1),
               "differ": len(differ), "target": TARGET}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"one process per log: {len(ref_logs)} logs in {ref_s:.1f} s "
              f"({figures['reference_logs_per_s']} logs/s)")
        print(f"triage, one process: {len(logs)} logs in {triage_s:.1f} s "
              f"({figures['triage_logs_per_s']} logs/s)")
        print(f"throughput ratio: {figures['ratio']}x (target {TARGET:g}x); verdicts that differ: "
              f"{len(differ)}")
    for log, a, b in differ:
        print(f"  {log}: analyze {a} / triage {b}", file=sys.stderr)
    return 0 if not differ and figures["ratio"] >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
