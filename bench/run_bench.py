#!/usr/bin/env python3
"""Benchmark ``dsdoctor analyze`` against GNU grep on the same file, in the same run.

    python bench/run_bench.py [--mib 512] [--log PATH] [--repeat 3]

Generates (once) a realistic multi-rank log with bench/gen_log.py, warms the page cache, then
times ``grep -c -E`` for the symptom words and ``dsdoctor analyze --format json`` with each
prefilter engine (hyperscan and pure Python), measures the peak RSS of each dsdoctor process,
and checks that both planted symptoms (the overflow burst and the watchdog timeout) were found.
Targets (issue #2): hyperscan engine at most 2x grep's time and at most 200 MB peak RSS.
Results go to bench/out/results.json and are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen_log import generate  # noqa: E402

# The symptom words a person would grep for: one alternation, as dsdoctor's prefilters do.
GREP_WORDS = [
    "OVERFLOW", "Gradient overflow", "cannot decrease scale", "out of memory", "OutOfMemoryError",
    "Watchdog caught", "timed out", "return code = -?[0-9]", "exitcode: -?[0-9]", "Killed",
    "Error building extension", "Address already in use", "'loss': nan", "loss=nan",
    "DefaultCPUAllocator", "oom-kill",
]



def run_with_rss(cmd: list[str]) -> tuple[float, int, str, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss * 1024, out.decode("utf-8", "replace"), proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--log", help="log to use (default: bench/out/bench-<mib>.log, generated)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default="hyperscan,python")
    a = ap.parse_args()
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    log = Path(a.log) if a.log else out_dir / f"bench-{a.mib}.log"
    if not log.exists():
        print(f"generating {log} ({a.mib} MiB) ...", file=sys.stderr)
        generate(str(log), a.mib)
    size = log.stat().st_size
    grep = shutil.which("grep")
    if not grep:
        print("GNU grep not found", file=sys.stderr)
        return 2
    with open(log, "rb") as fh:  # warm the page cache so both read from memory
        while fh.read(64 << 20):
            pass
    pattern = "|".join(GREP_WORDS)
    grep_times = []
    for _ in range(a.repeat):
        wall, _, out, _ = run_with_rss([grep, "-c", "-E", pattern, str(log)])
        grep_times.append(wall)
    grep_count = int(out.strip() or 0)
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "log": {"path": str(log), "bytes": size},
        "grep": {"median_s": statistics.median(grep_times), "runs": grep_times,
                 "matching_lines": grep_count,
                 "version": subprocess.run([grep, "--version"], capture_output=True,
                                           text=True).stdout.splitlines()[0]},
        "dsdoctor": {},
    }
    for engine in a.engines.split(","):
        times, rss, found = [], [], {}
        for _ in range(a.repeat if engine == "hyperscan" else 1):
            wall, peak, out, rc = run_with_rss([sys.executable, "-m", "dsdoctor", "analyze",
                                                str(log), "--format", "json", "--engine", engine])
            if rc not in (0, 1):
                print(f"dsdoctor --engine {engine} failed with exit code {rc}", file=sys.stderr)
                return 2
            times.append(wall)
            rss.append(peak)
            rep = json.loads(out)
            found = {s["kind"]: s["count"] for s in rep["symptoms"]}
        med = statistics.median(times)
        results["dsdoctor"][engine] = {
            "median_s": med, "runs": times, "peak_rss_bytes": max(rss),
            "ratio_to_grep": med / results["grep"]["median_s"],
            "symptoms": found,
            "planted_found": found.get("fp16-overflow") == 12 and found.get("hang", 0) >= 2,
        }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    g = results["grep"]["median_s"]
    print(f"log: {size / 2**20:.0f} MiB ({log}); {results['machine']}")
    print("| tool | median time | ratio to grep | peak RSS | planted symptoms found |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| grep -c -E ({len(GREP_WORDS)} words) | {g:.2f} s | 1.00x | - | "
          f"{grep_count} matching lines |")
    ok = True
    for engine, r in results["dsdoctor"].items():
        print(f"| dsdoctor analyze --engine {engine} | {r['median_s']:.2f} s | "
              f"{r['ratio_to_grep']:.2f}x | {r['peak_rss_bytes'] / 1e6:.0f} MB | "
              f"{'yes' if r['planted_found'] else 'NO'} ({r['symptoms']}) |")
        ok &= r["planted_found"]
    hs = results["dsdoctor"].get("hyperscan")
    if hs:
        print(f"\ntargets: time <= 2x grep: {'met' if hs['ratio_to_grep'] <= 2 else 'MISSED'}; "
              f"peak RSS <= 200 MB: {'met' if hs['peak_rss_bytes'] <= 200e6 else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
