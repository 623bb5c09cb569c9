#!/usr/bin/env python3
"""Can ``dsdoctor watch`` keep up with a run that prints 10,000 lines per second?

A writer thread appends the lines of ``bench/gen_log.py``'s realistic multi-rank log (DeepSpeed step
and timer lines, Trainer dicts, tqdm bars, NCCL INFO noise, an OVERFLOW burst) to a file at a fixed
rate, in batches every 10 ms, while the follower (dsdoctor/watch/follow.py) does what the TUI's
worker does: poll, and every 0.5 s re-evaluate the rules on a snapshot. Reported: lines written and
read, the worst backlog (lines written but not yet scanned) sampled every 0.1 s, the time to drain
after the writer stops, and the CPU the follower used per second of wall time.

    python bench/watch_follow.py --rate 10000 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen_log  # noqa: E402

from dsdoctor.watch.follow import Follower  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="lines per second written")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--engine", default="auto")
    opts = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="dsdoctor-bench-watch-")
    source = os.path.join(tmp, "source.log")
    gen_log.generate(source, max(8, int(opts.rate * opts.seconds * 200 / 2**20) + 1))
    with open(source, "rb") as fh:
        # physical lines (b"\n"): a tqdm bar's \r redraws stay inside their line, as in a real log
        lines = [line + b"\n" for line in fh.read().split(b"\n")[:-1]]
    need = int(opts.rate * opts.seconds)
    lines = (lines * (need // len(lines) + 1))[:need]
    live = os.path.join(tmp, "live.log")
    open(live, "wb").close()

    args = argparse.Namespace(config=[], model=None, env=None, script=[], ds_version=None,
                              engine=opts.engine, logs=[])
    follower = Follower([live], args)
    written = 0
    done = threading.Event()

    def writer() -> None:
        nonlocal written
        batch = max(1, opts.rate // 100)
        start = time.monotonic()
        with open(live, "ab") as fh:
            for i in range(0, len(lines), batch):
                fh.write(b"".join(lines[i:i + batch]))
                fh.flush()
                written = min(len(lines), i + batch)
                delay = start + written / opts.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        done.set()

    cpu0 = time.process_time()
    t0 = time.monotonic()
    threading.Thread(target=writer, daemon=True).start()
    worst = 0
    last_eval = last_sample = 0.0
    while True:
        read = follower.poll()
        now = time.monotonic()
        if now - last_eval >= 0.5:
            follower.snapshot()
            follower.take_events()
            last_eval = now
        if now - last_sample >= 0.1:
            worst = max(worst, written - follower.tailers[0].tail.lines_read)
            last_sample = now
        if done.is_set() and not read and follower.tailers[0].tail.lines_read >= len(lines):
            break
        if done.is_set() and now - t0 > opts.seconds * 10:
            print("gave up: the follower did not catch up", file=sys.stderr)
            break
        if not read:
            time.sleep(0.05)
    follower.flush(final=True)
    state = follower.snapshot()
    wall = time.monotonic() - t0
    result = {
        "rate_lines_per_s": opts.rate, "lines": len(lines), "read": follower.tailers[0].tail.lines_read,
        "worst_backlog_lines": worst, "worst_backlog_seconds": round(worst / opts.rate, 2),
        "wall_s": round(wall, 2), "drain_s": round(wall - len(lines) / opts.rate, 2),
        "follower_cpu_per_wall_s": round((time.process_time() - cpu0) / wall, 2),
        "symptoms": {s.kind: s.count for s in state.symptoms},
        "progress_events": follower.stall.status().progress_events,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
