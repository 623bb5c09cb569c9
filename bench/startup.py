"""Start-up cost: the README sample's JSON analysis against a bare ``python -c pass``.

Runs them interleaved (so that the shared machine's load hits all alike), optionally with an
older copy of the package (``--code DIR``, e.g. ``git archive`` of a commit) in the same run,
and prints median wall and CPU (user + system, from wait4) of each and their ratios to the bare
interpreter's. The data cache and bytecode are written once before timing, as after an install:
PYTHONDONTWRITEBYTECODE is removed from the children's environment (set, as on this project's
machine, every run compiles about 90 modules from source: about 0.09 s of CPU that no
installed copy spends).

    python bench/startup.py --repeat 15 [--code /tmp/before]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "sample_logs" / "fp16_loss_scale_collapse"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``cmd``."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--code", help="also time the dsdoctor package found in this directory")
    a = ap.parse_args()
    analyze = [sys.executable, "-m", "dsdoctor", "analyze", str(SAMPLE / "train.log"),
               "--config", str(SAMPLE / "ds_config.json"), "--format", "json"]
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], base),
        "analyze (this tree)": (analyze, base),
    }
    if a.code:
        # -P: otherwise ``-m`` finds the working directory's dsdoctor first
        runs["analyze (--code)"] = ([analyze[0], "-P", *analyze[1:]],
                                    dict(base, PYTHONPATH=os.path.abspath(a.code)))
    for cmd, env in runs.values():
        timed(cmd, env)  # bytecode and the data cache written once
    walls: dict[str, list[float]] = {k: [] for k in runs}
    cpus: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.repeat):
        for name, (cmd, env) in runs.items():
            w, c = timed(cmd, env)
            walls[name].append(w)
            cpus[name].append(c)
    bw, bc = statistics.median(walls["python -c pass"]), statistics.median(cpus["python -c pass"])
    for name in runs:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"{name:22s} wall {w:6.3f} s ({w / bw:5.1f}x)   cpu {c:6.3f} s ({c / bc:5.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
