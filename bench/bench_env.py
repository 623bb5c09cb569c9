#!/usr/bin/env python3
"""Benchmark ``dsdoctor env`` against a bare interpreter start, in the same run.

    python bench/bench_env.py [--repeat 5]

Issue #5's target: well under 2 s on a machine without torch. The reference is the same
interpreter doing nothing (``python -c pass``) and importing only psutil, so a loaded machine
shows up in both columns. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    py = sys.executable
    rows = [
        ("python -c pass", timed([py, "-c", "pass"], a.repeat)),
        ("python -c 'import psutil'", timed([py, "-c", "import psutil"], a.repeat)),
        ("dsdoctor env --format json --no-ops", timed([py, "-m", "dsdoctor", "env", "--format",
                                                       "json", "--no-ops"], a.repeat)),
        ("dsdoctor env --format json", timed([py, "-m", "dsdoctor", "env", "--format", "json"],
                                             a.repeat)),
    ]
    base = rows[0][1]
    torch = importlib.util.find_spec("torch") is not None
    print(f"torch installed: {torch}; deepspeed installed: "
          f"{importlib.util.find_spec('deepspeed') is not None}")
    print("| command | median | vs bare interpreter |")
    print("| --- | ---: | ---: |")
    for name, t in rows:
        print(f"| {name} | {t:.2f} s | {t / base:.1f}x |")
    env_t = rows[-1][1]
    if not torch:
        print(f"\ntarget (no torch): under 2 s: {'met' if env_t < 2 else 'MISSED'} ({env_t:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
