#!/usr/bin/env python3
"""Can ``dsdoctor watch`` keep up with a run that prints 10,000 lines per second?

A writer thread appends the lines of ``bench/gen_log.py``'s realistic multi-rank log (DeepSpeed step
and timer lines, Trainer dicts, tqdm bars, NCCL INFO noise, an OVERFLOW burst) to a file at a fixed
rate, in batches every 10 ms, while the follower (dsdoctor/watch/follow.py) does what the TUI's
worker does: poll, and every 0.5 s re-evaluate the rules on a snapshot. Reported: lines written and
read, the worst backlog (lines written but not yet scanned) sampled every 0.1 s, the time to drain
after the writer stops, and the CPU the follower used per second of wall time.

``--plain-lag`` measures what a user sees instead: ``dsdoctor watch LOG --plain`` runs as its own
process while the writer appends the same lines at the same rate and, every half second, one real
DeepSpeed ``OVERFLOW!`` line (loss_scaler.py's format, as in gen_log.py); the lag is the time from
writing that line to ``watch`` printing its event (matched by line number).

    python bench/watch_follow.py --rate 10000 --seconds 20
    python bench/watch_follow.py --rate 10000 --seconds 20 --plain-lag
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
    ap.add_argument("--plain-lag", action="store_true",
                    help="time from a line written to its event printed by 'watch --plain'")
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
    if opts.plain_lag:
        plain_lag(live, lines, opts)
        return

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


MARKER = (b"[2024-05-02 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
          b"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n")


def plain_lag(live: str, lines: list[bytes], opts: argparse.Namespace) -> None:
    """Run ``dsdoctor watch LIVE --plain``; write lines at opts.rate with a marker every 0.5 s;
    report the delay from each marker's write to its event on watch's stdout."""
    import statistics
    import subprocess

    lines = [ln for ln in lines if b"OVERFLOW" not in ln]  # only the markers are overflows
    proc = subprocess.Popen([sys.executable, "-m", "dsdoctor", "watch", live, "--plain",
                             "--engine", opts.engine], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    written_at: dict[int, float] = {}
    seen_at: dict[int, float] = {}

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace")
            if ": fp16-overflow:" in text:
                where = text.split(": fp16-overflow:")[0]
                try:
                    seen_at[int(where.rsplit(":", 1)[1])] = time.monotonic()
                except ValueError:
                    pass

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(1.0)  # watch is up and following the (empty) file
    batch = max(1, opts.rate // 100)
    every = max(1, opts.rate // 2)  # a marker per half second
    line_no = 0
    start = time.monotonic()
    with open(live, "ab") as fh:
        for i in range(0, len(lines), batch):
            chunk = lines[i:i + batch]
            out = []
            for ln in chunk:
                line_no += 1
                out.append(ln)
                if line_no % every == 0:
                    line_no += 1
                    out.append(MARKER)
                    written_at[line_no] = -1.0
            fh.write(b"".join(out))
            fh.flush()
            now = time.monotonic()
            for k, v in written_at.items():
                if v < 0:
                    written_at[k] = now
            delay = start + (i + batch) / opts.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    deadline = time.monotonic() + 30
    while len(seen_at) < len(written_at) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.terminate()
    proc.wait(10)
    lags = sorted(seen_at[k] - written_at[k] for k in written_at if k in seen_at)
    result = {
        "rate_lines_per_s": opts.rate, "lines": line_no, "markers": len(written_at),
        "events_seen": len(lags),
        "lag_median_s": round(statistics.median(lags), 3) if lags else None,
        "lag_p90_s": round(lags[int(len(lags) * 0.9)], 3) if lags else None,
        "lag_max_s": round(lags[-1], 3) if lags else None,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
