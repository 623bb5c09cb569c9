#!/usr/bin/env python3
"""Benchmark ``dsdoctor analyze`` against GNU grep on the same file, in the same run.

    python bench/run_bench.py [--mib 512] [--log PATH] [--repeat 3] [--jobs 1,2]

Generates (once) a realistic multi-rank log with bench/gen_log.py, warms the page cache, then
times ``grep -c -E`` for the symptom words and ``dsdoctor analyze --format json`` with each
prefilter engine (hyperscan and pure Python) and each ``--jobs``, measures the peak RSS of the
dsdoctor process tree (its scan workers included: the sum of their RSS, sampled every 10 ms), checks
that both planted symptoms (the overflow burst and the watchdog timeout) were found and that every
run gives the same JSON. Then the start-up: the README sample's ``analyze --format json`` against
a bare ``python -c pass`` of the same interpreter.
Targets (issue 13): at most 1.2x grep with Hyperscan, 10x with the portable engine, at most
100 MB peak RSS, the README sample at most 5x ``python -c pass``.
Results go to bench/out/results.json and are printed as Markdown tables.

The dsdoctor children run without PYTHONDONTWRITEBYTECODE (set on this project's machine): with it,
every run compiles about 90 modules from source (about 0.09 s of CPU) that an installed copy
never compiles again. ``--no-bytecode`` keeps it, as the runs before 2026-11-24 22:00 had it.
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



def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of ``pid`` and its descendants (Linux /proc; zeros elsewhere). RSS
    counts the pages a forked worker shares with its parent twice; PSS splits them."""
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return rss, pss


# the children's environment (see the module's docstring); main() may put the variable back
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_with_rss(cmd: list[str]) -> tuple[float, int, str, int, int, float]:
    """(wall seconds, peak RSS of the process tree, stdout, exit code, peak PSS of the tree,
    CPU seconds of the process and the workers it waited for)."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=CHILD_ENV)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, pss = _tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (wall, max(peak[0], usage.ru_maxrss * 1024), out.decode("utf-8", "replace"),
            proc.returncode, peak[1], usage.ru_utime + usage.ru_stime)


def startup(repeat: int) -> dict:
    """The README sample against ``python -c pass`` (bench/startup.py), in this interpreter's
    venv and in a venv where dsdoctor is installed as README command 1 installs it."""
    sys.path.insert(0, str(HERE))
    import startup as startup_bench  # noqa: PLC0415 - bench/startup.py, beside this script

    return {"this checkout": startup_bench.measure(sys.executable, repeat),
            "installed": startup_bench.measure(startup_bench.installed_python(), repeat)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--log", help="log to use (default: bench/out/bench-<mib>.log, generated)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default="hyperscan,python")
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE from the environment for the children")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up comparison")
    a = ap.parse_args()
    if a.no_bytecode:
        CHILD_ENV.update(os.environ)
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
    grep_times, grep_cpu = [], []
    for _ in range(a.repeat):
        wall, _, out, _, _, used = run_with_rss([grep, "-c", "-E", pattern, str(log)])
        grep_times.append(wall)
        grep_cpu.append(used)
    grep_count = int(out.strip() or 0)
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "log": {"path": str(log), "bytes": size},
        "grep": {"median_s": statistics.median(grep_times), "runs": grep_times,
                 "cpu_s": statistics.median(grep_cpu),
                 "matching_lines": grep_count,
                 "version": subprocess.run([grep, "--version"], capture_output=True,
                                           text=True).stdout.splitlines()[0]},
        "dsdoctor": {},
    }
    reference = None
    for engine in a.engines.split(","):
        for jobs in a.jobs.split(","):
            times, rss, pss, cpu, found = [], [], [], [], {}
            for _ in range(a.repeat):
                wall, peak, out, rc, peak_pss, used = run_with_rss([
                    sys.executable, "-m", "dsdoctor", "analyze", str(log), "--format", "json",
                    "--engine", engine, "--jobs", jobs, "--quiet"])
                if rc not in (0, 1):
                    print(f"dsdoctor --engine {engine} --jobs {jobs} failed with exit code {rc}",
                          file=sys.stderr)
                    return 2
                times.append(wall)
                rss.append(peak)
                pss.append(peak_pss)
                cpu.append(used)
                rep = json.loads(out)
                found = {s["kind"]: s["count"] for s in rep["symptoms"]}
                rep.get("inputs", {}).pop("engine", None)  # the one field that names it
                same = json.dumps(rep, sort_keys=True)
                reference = reference or same
            med = statistics.median(times)
            results["dsdoctor"][f"{engine} --jobs {jobs}"] = {
                "median_s": med, "runs": times, "peak_rss_bytes": max(rss),
                "peak_pss_bytes": max(pss), "cpu_s": statistics.median(cpu),
                "ratio_to_grep": med / results["grep"]["median_s"],
                "cpu_ratio_to_grep": statistics.median(cpu) / max(results["grep"]["cpu_s"], 1e-3),
                "symptoms": found,
                "planted_found": found.get("fp16-overflow") == 12 and found.get("hang", 0) >= 2,
                "same_json_as_first": same == reference,
            }
    if not a.no_startup:
        results["startup"] = startup(max(5, a.repeat))
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    g = results["grep"]["median_s"]
    print(f"log: {size / 2**20:.0f} MiB ({log}); {results['machine']}")
    print("| tool | median time | ratio to grep | CPU (ratio) | peak RSS / PSS (all processes) | "
          "planted symptoms found | same JSON |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    print(f"| grep -c -E ({len(GREP_WORDS)} words) | {g:.2f} s | 1.00x | "
          f"{results['grep']['cpu_s']:.2f} s (1.00x) | - | {grep_count} matching lines | - |")
    ok = True
    for name, r in results["dsdoctor"].items():
        print(f"| dsdoctor analyze --engine {name} | {r['median_s']:.2f} s | "
              f"{r['ratio_to_grep']:.2f}x | {r['cpu_s']:.2f} s ({r['cpu_ratio_to_grep']:.1f}x) | "
              f"{r['peak_rss_bytes'] / 1e6:.0f} / "
              f"{r['peak_pss_bytes'] / 1e6:.0f} MB | "
              f"{'yes' if r['planted_found'] else 'NO'} ({r['symptoms']}) | "
              f"{'yes' if r['same_json_as_first'] else 'NO'} |")
        ok &= r["planted_found"] and r["same_json_as_first"]
    for where, st in (results.get("startup") or {}).items():
        print(f"\nstart-up ({where}): " + "; ".join(
            f"{name} {r['cpu_s']:.3f} s CPU ({r['cpu_ratio']:.1f}x)" for name, r in st.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
