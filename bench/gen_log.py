#!/usr/bin/env python3
"""Generate a large, realistic multi-rank DeepSpeed training log for benchmarks.

Every line copies a real format: DeepSpeed's step and timer lines (logging.py log_dist,
timer.py), HF Trainer metric dicts, tqdm bars redrawn with \\r, NCCL INFO noise with torch rank
prefixes, a burst of fp16 OVERFLOW lines (loss_scaler.py) a third of the way in, and an NCCL
watchdog timeout (ProcessGroupNCCL.cpp) at the end. Deterministic for a given size.

    python bench/gen_log.py OUT.log --mib 512
"""

from __future__ import annotations

import argparse
import random

STEP = ("[2024-05-02 10:{m:02d}:{s:02d},{ms:03d}] [INFO] [logging.py:96:log_dist] [Rank 0] "
        "step={step}, skipped={skipped}, lr=[{lr:.6e}], mom=[(0.9, 0.999)]\n")
TIMER = ("[2024-05-02 10:{m:02d}:{s:02d},{ms:03d}] [INFO] [timer.py:260:stop] epoch=0/micro_step="
         "{micro}/global_step={step}, RunningAvgSamplesPerSec={avg:.6f}, CurrSamplesPerSec={cur:.6f}, "
         "MemAllocated=12.43GB, MaxMemAllocated=31.87GB\n")
TRAINER = "{{'loss': {loss:.4f}, 'grad_norm': {gn:.6f}, 'learning_rate': {lr:.6e}, 'epoch': {ep:.2f}}}\n"
BAR = " {pct:3d}%|{bar}| {i}/{n} [{el}<{rem}, {rate:.2f}it/s]"
NCCL = ("[rank{r}]:node-{node}:{pid}:{tid} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> "
        "{nxt}[{nxt}] via P2P/IPC/read\n")
NCCL2 = ("[rank{r}]:node-{node}:{pid}:{tid} [{r}] NCCL INFO comm 0x{h:x} rank {r} nRanks 8 nNodes 1 "
         "localRanks 8 localRank {r} MNNVL 0\n")
OVERFLOW = ("[2024-05-02 10:{m:02d}:{s:02d},{ms:03d}] [INFO] [loss_scaler.py:183:update_scale] "
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}\n")
WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=775693, OpType=_ALLGATHER_BASE, NumelIn=262668288, "
            "NumelOut=1050673152, Timeout(ms)=1800000) ran for 1800042 milliseconds before timing out.\n")


def generate(path: str, mib: int, seed: int = 0) -> dict:
    rnd = random.Random(seed)
    target = mib << 20
    written = 0
    step = 0
    overflow_at = target // 3
    burst_done = False
    n_bars = 1000
    with open(path, "w", encoding="utf-8", newline="") as fh:
        buf: list[str] = []
        while written < target - 4096:
            step += 1
            m, s, ms = (step // 600) % 60, (step // 10) % 60, (step * 37) % 1000
            lr = 2e-5 * min(1.0, step / 2000)
            for r in rnd.sample(range(8), 3):
                buf.append(NCCL.format(r=r, node=r // 4, pid=12000 + r, tid=12400 + r,
                                       c=rnd.randrange(32), nxt=(r + 1) % 8))
            if step % 7 == 0:
                r = rnd.randrange(8)
                buf.append(NCCL2.format(r=r, node=r // 4, pid=12000 + r, tid=12400 + r,
                                        h=rnd.getrandbits(48)))
            buf.append(STEP.format(m=m, s=s, ms=ms, step=step, skipped=20 if burst_done else 0,
                                   lr=lr))
            buf.append(TIMER.format(m=m, s=s, ms=ms, micro=step * 4, step=step,
                                    avg=31.2 + rnd.random(), cur=30 + 3 * rnd.random()))
            buf.append(TRAINER.format(loss=1.2 + 1.3 * 0.9995 ** step + 0.1 * rnd.random(),
                                      gn=0.5 + rnd.random(), lr=lr, ep=step / 5000))
            # a tqdm bar redrawn several times on one physical line (\r), as in a captured log
            i = step % n_bars
            bars = [BAR.format(pct=(i + k) * 100 // n_bars, bar="█" * ((i + k) * 10 // n_bars)
                               + " " * (10 - (i + k) * 10 // n_bars), i=i + k, n=n_bars,
                               el="01:23", rem="01:42", rate=5.38) for k in range(3)]
            buf.append("\r".join(bars) + "\n")
            if not burst_done and written >= overflow_at:
                scale = 65536
                for _ in range(12):
                    buf.append(OVERFLOW.format(m=m, s=s, ms=ms, a=scale, b=scale // 2))
                    scale //= 2
                burst_done = True
            if len(buf) >= 2000:
                chunk = "".join(buf)
                fh.write(chunk)
                written += len(chunk.encode())
                buf.clear()
        for r in (3, 5):
            buf.append(WATCHDOG.format(r=r))
        fh.write("".join(buf))
    return {"path": path, "mib": mib, "steps": step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(generate(a.out, a.mib, a.seed))


if __name__ == "__main__":
    main()
