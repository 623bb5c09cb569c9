#!/usr/bin/env python3
"""Reproduce the cost cliffs of issue 14 item 10 and show whether cost grows linearly.

    python bench/cliffs.py [--only NAME[,NAME]] [--scale 1.0] [--formats text,json,markdown]

Writes each hostile input deterministically under bench/out/cliffs/ (a full-size one and a
half-size one), runs the dsdoctor command on it as a user would (a child process, stdout to a
pipe), and prints wall time and the child's peak RSS for both sizes; the ratio full/half shows
linear (~2x) against quadratic (~4x) growth. Results go to bench/out/cliffs.json.

Inputs (every log line copies a real format, see the comments at each template):
  overflow   1M DeepSpeed fp16 OVERFLOW lines (loss_scaler.py, as in sample_logs/)
  longline   one 200 MB physical line holding 1.4M OVERFLOW messages (a log whose newlines were
             lost, e.g. a tqdm-style writer or a paste)
  bigconfig  a 16.5 MB DeepSpeed JSON config: real top-level keys plus many unknown keys and big
             nested arrays (a config that carries data it should not)
  manykeys   a DeepSpeed JSON config with 10,000 keys (most of them unknown to DeepSpeed)
  script     a 7 MB Python training script (HF Trainer + DeepSpeed lines, repeated blocks)
  report10m  `dsdoctor report` on a 10M-line log (NCCL INFO noise, step lines, one OOM at the end)
  reportconfig  `dsdoctor report --config` on the 16.5 MB config of bigconfig (quoted in the body)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
CLIFF_DIR = OUT / "cliffs"

# deepspeed/runtime/fp16/loss_scaler.py update_scale, as printed in sample_logs/fp16_loss_scale_collapse
OVERFLOW = ("[2026-11-21 11:52:{s:02d},{ms:03d}] [INFO] [loss_scaler.py:266:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}")
# deepspeed/utils/logging.py log_dist step line (bench/gen_log.py, sample_logs/)
STEP = ("[2026-11-21 11:52:{s:02d},{ms:03d}] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, "
        "skipped=0, lr=[2.000000e-05], mom=[(0.9, 0.999)]\n")
# NCCL INFO with the torch rank prefix (bench/gen_log.py)
NCCL = "[rank{r}]:node-0:1200{r}:1240{r} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> {n}[{n}] via P2P/IPC/read\n"
# torch.OutOfMemoryError as printed by torch 2.x (sample_logs/gpu_cuda_oom)
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
       "capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
       "has 78.08 GiB memory in use.\n")

REAL_DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
    "gradient_clipping": 1.0,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
             "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000},
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8,
                                               "weight_decay": 0.0}},
    "steps_per_print": 10,
    "wall_clock_breakdown": False,
}


def scale_overflow_n(frac: float) -> int:
    return int(1_000_000 * frac)


def write_overflow(path: Path, frac: float) -> None:
    n = scale_overflow_n(frac)
    with open(path, "w", encoding="utf-8") as fh:
        buf = []
        a = 65536
        for i in range(n):
            b = max(a // 2, 1)
            buf.append(OVERFLOW.format(s=(i // 1000) % 60, ms=i % 1000, a=a, b=b) + "\n")
            a = b if b > 1 else 65536
            if len(buf) >= 10000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))


def write_longline(path: Path, frac: float) -> None:
    n = int(1_400_000 * frac)
    with open(path, "w", encoding="utf-8") as fh:
        buf = []
        for i in range(n):
            buf.append(OVERFLOW.format(s=(i // 1000) % 60, ms=i % 1000, a=65536, b=32768) + " ")
            if len(buf) >= 10000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf) + "\n")


def write_bigconfig(path: Path, frac: float) -> None:
    """~16.5 MB: the real keys, 2,000 unknown sections each with nested arrays of numbers."""
    cfg: dict = dict(REAL_DS_CONFIG)
    sections = int(2000 * frac)
    for i in range(sections):
        cfg[f"custom_section_{i}"] = {
            "table": [[j * 0.5 + i, j, f"v{j}"] for j in range(115)],
            "enabled": True,
            "nested": {"a": {"b": {"c": list(range(100))}}},
        }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2)


def write_manykeys(path: Path, frac: float) -> None:
    cfg: dict = dict(REAL_DS_CONFIG)
    n = int(10_000 * frac)
    zero = dict(cfg["zero_optimization"])
    for i in range(n // 2):
        cfg[f"unknown_key_{i}"] = i
        zero[f"stage3_unknown_{i}"] = i
    cfg["zero_optimization"] = zero
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2)


SCRIPT_HEAD = '''import os
import deepspeed
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=8,
                         bf16=True, deepspeed="ds_config.json", gradient_checkpointing=True)
'''
SCRIPT_BLOCK = '''

def preprocess_{i}(batch, tokenizer=None, max_length=2048):
    """Tokenize one shard ({i})."""
    texts = [t.strip() for t in batch["text"] if t]
    out = tokenizer(texts, truncation=True, max_length=max_length, padding="max_length")
    out["labels"] = [list(ids) for ids in out["input_ids"]]
    if os.environ.get("DEBUG_{i}"):
        print("shard", {i}, len(texts), torch.cuda.memory_allocated())
    return out
'''
SCRIPT_TAIL = '''
trainer = Trainer(model=model, args=args)
trainer.train()
'''


def write_script(path: Path, frac: float) -> None:
    target = int(7 * 1024 * 1024 * frac)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(SCRIPT_HEAD)
        written = len(SCRIPT_HEAD)
        i = 0
        while written < target:
            block = SCRIPT_BLOCK.format(i=i)
            fh.write(block)
            written += len(block)
            i += 1
        fh.write(SCRIPT_TAIL)


def write_report10m(path: Path, frac: float) -> None:
    n = int(10_000_000 * frac)
    with open(path, "w", encoding="utf-8") as fh:
        buf = []
        for i in range(n - 1):
            if i % 10 == 0:
                buf.append(STEP.format(s=(i // 1000) % 60, ms=i % 1000, step=i // 10))
            else:
                r = i % 8
                buf.append(NCCL.format(r=r, c=i % 32, n=(r + 1) % 8))
            if len(buf) >= 20000:
                fh.write("".join(buf))
                buf.clear()
        buf.append(OOM)
        fh.write("".join(buf))


# name -> (file suffix, writer, command builder(path, fmt))
Cmd = Callable[[Path, str], list[str]]


def _analyze_log(p: Path, fmt: str) -> list[str]:
    return ["analyze", str(p), "--format", fmt]


def _analyze_config(p: Path, fmt: str) -> list[str]:
    return ["analyze", "--config", str(p), "--format", fmt]


def _analyze_script(p: Path, fmt: str) -> list[str]:
    return ["analyze", "--script", str(p), "--format", fmt]


def _report(p: Path, fmt: str) -> list[str]:
    return ["report", str(p), "--force", "--quiet"]


def _report_config(p: Path, fmt: str) -> list[str]:
    return ["report", "--config", str(p), "--force", "--quiet"]


CLIFFS: dict[str, tuple[str, Callable[[Path, float], None], Cmd, bool]] = {
    "overflow": (".log", write_overflow, _analyze_log, True),
    "longline": (".log", write_longline, _analyze_log, True),
    "bigconfig": (".json", write_bigconfig, _analyze_config, True),
    "manykeys": (".json", write_manykeys, _analyze_config, True),
    "script": (".py", write_script, _analyze_script, True),
    "report10m": (".log", write_report10m, _report, False),
    "reportconfig": (".json", write_bigconfig, _report_config, False),
}


def _run_child(cmd: list[str], timeout: float, env: dict[str, str]
               ) -> tuple[float, float, int, int]:
    """Wall time, CPU time (user + system: steadier than wall time on a shared machine), peak
    RSS (bytes) and exit code of one dsdoctor child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _, status, usage = _wait4(proc, timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return (time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024,
            os.waitstatus_to_exitcode(status))


def _wait4(proc: subprocess.Popen, timeout: float):  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, usage
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return proc.pid, status, usage
        time.sleep(0.02)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CLIFFS), help="comma-separated cliff names")
    ap.add_argument("--scale", type=float, default=1.0, help="size factor (1.0 = the issue's sizes)")
    ap.add_argument("--formats", default="text,json,markdown")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--label", default="", help="stored with the results (e.g. before/after)")
    ap.add_argument("--code", help="run the dsdoctor package found in this directory (e.g. an "
                    "export of an older commit) instead of the installed one")
    ap.add_argument("--write", nargs=3, metavar=("NAME", "FRACTION", "PATH"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.write:
        name, frac, path = a.write
        CLIFFS[name][1](Path(path), float(frac))
        return 0
    CLIFF_DIR.mkdir(parents=True, exist_ok=True)
    exe = [sys.executable, "-m", "dsdoctor"]
    env = dict(os.environ)
    if a.code:
        env["PYTHONPATH"] = os.path.abspath(a.code)
        # -P: without it, ``-m`` puts the working directory first on sys.path, and run from a
        # checkout that directory's dsdoctor, not --code's, is the one measured
        exe = [sys.executable, "-P", "-m", "dsdoctor"]
    rows = []
    for name in a.only.split(","):
        suffix, _writer, build, per_format = CLIFFS[name]
        formats = a.formats.split(",") if per_format else ["markdown"]
        paths = {}
        for size, frac in (("full", a.scale), ("half", a.scale / 2)):
            p = CLIFF_DIR / f"{name}-{frac:g}{suffix}"
            if not p.exists():
                # in a child: a forked child inherits this process's peak RSS (Linux keeps
                # ru_maxrss across exec), so the parent must stay small for the RSS figures
                subprocess.run([sys.executable, __file__, "--write", name, str(frac), str(p)],
                               check=True)
            paths[size] = p
        for fmt in formats:
            res = {}
            for size in ("half", "full"):
                wall, cpu, rss, rc = _run_child(exe + build(paths[size], fmt), a.timeout, env)
                res[size] = {"seconds": round(wall, 2), "cpu": round(cpu, 2),
                             "rss_mb": round(rss / 1e6, 1), "exit": rc,
                             "bytes": paths[size].stat().st_size}
            ratio = res["full"]["cpu"] / max(res["half"]["cpu"], 1e-3)
            row = {"cliff": name, "format": fmt if per_format else "report", "label": a.label,
                   "scale": a.scale, **{f"{k}_{s}": v for s in res for k, v in res[s].items()},
                   "ratio": round(ratio, 2)}
            rows.append(row)
            print(f"{name:10s} {row['format']:8s} half {res['half']['seconds']:7.2f}s "
                  f"(cpu {res['half']['cpu']:6.2f}) full {res['full']['seconds']:7.2f}s "
                  f"(cpu {res['full']['cpu']:6.2f}) cpu ratio {ratio:5.2f} "
                  f"rss {res['full']['rss_mb']:7.1f} MB exit {res['full']['exit']}", flush=True)
    out = OUT / "cliffs.json"
    old = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(old + rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
