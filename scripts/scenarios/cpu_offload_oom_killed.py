"""Scenario: ZeRO-3 with CPU offload needs more RAM than the node has; a worker is SIGKILLed.

GPT-2 small's architecture (124M parameters, built from its config with random weights, nothing
downloaded) is trained with ZeRO stage 3, parameters and optimizer states offloaded to CPU, bf16, on
2 CPU ranks under the ``deepspeed`` launcher. The env snapshot (``env.json``) describes the node the
run is meant for: 2 GiB of RAM, less than what the offloaded model states need (about 18 bytes per
parameter, 2.2 GB, before the per-rank model copies and activations).

This machine has more RAM than that, so the kernel's OOM killer would not step in here; a watchdog
thread in the driver plays its part, honestly and visibly: when the workers' summed resident memory
passes the snapshot's RAM it sends SIGKILL to the largest worker, the way the OOM killer picks its
victim. Like the kernel, it prints nothing into the log; the launcher reports ``exits with return
code = -9``, the rest is what DeepSpeed printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "cpu_offload_oom_killed"
SCRIPT = Path(__file__).resolve()
NODE_RAM = 2 * 1024**3  # the env snapshot's RAM: what the watchdog enforces

CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": False},
        "offload_param": {"device": "cpu", "pin_memory": False},
        "overlap_comm": False,
        "contiguous_gradients": True,
        "stage3_max_live_parameters": 1e8,
        "stage3_prefetch_bucket_size": 1e7,
        "stage3_param_persistence_threshold": 1e4,
    },
}

# GPT-2 small ("openai-community/gpt2") architecture.
MODEL_CONFIG = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "torch_dtype": "float32",
}


def worker() -> None:
    """One rank: ZeRO-3 + CPU offload training of GPT-2 small."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    # Built partitioned from the start (zero.Init), as ZeRO-3 users do for models that do not fit
    # one rank: each rank only ever holds its shard, the offloaded states are what fill the RAM.
    with deepspeed.zero.Init(config_dict_or_path=args.deepspeed_config):
        model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in MODEL_CONFIG.items()
                                              if k != "architectures"}))
    _lm.train_loop(model, args.deepspeed_config, 20, print_every=1)


def generate(out: Path) -> c.Outcome:
    """Run under the RSS watchdog and write the scenario folder (with the env snapshot)."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    c.write_json(out / "env.json", c.env_snapshot(
        ram_total_bytes=NODE_RAM, cpu_count=8,
        gpus=[{"name": "NVIDIA GeForce RTX 3060", "memory_total_bytes": 12 * 1024**3,
               "compute_capability": "8.6"}] * 2))
    watchdog = c.RssWatchdog(NODE_RAM)
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=900,
        watch=watchdog)
    log = c.read_log(out, "train.log")
    c.require(watchdog.killed is not None, f"the watchdog never fired (peak {watchdog.peak_bytes})")
    c.require("return code = -9" in log, "the launcher did not report -9")
    c.write_expected(out, symptoms=["cpu-oom"], rules=["DS106", "DS203"],
                     must_not=["gpu-oom", "hang", "fp16-overflow", "nan-loss", "op-build-failure"],
                     must_not_rules=["DS105", "DS107", "DS113"],
                     fate="failed")
    outcome = c.Outcome([run])
    k = watchdog.killed
    c.write_readme(out, NAME, "CPU RAM exhausted under ZeRO-3 CPU offload: worker SIGKILLed", f"""
GPT-2 small's architecture (124M parameters; `model_config.json`; random weights, nothing
downloaded) trained with ZeRO stage 3 with parameters and optimizer states offloaded to CPU
(`ds_config.json`), bf16, DeepSpeed's CPU Adam, 2 ranks (CPU accelerator, gloo), `deepspeed` launcher.
`env.json` is the snapshot of the node the run is sized for: **2 GiB of RAM** (and 2 x 12 GiB GPUs).
ZeRO-3 offload keeps fp32 master weights, gradients and Adam moments in CPU RAM (about 18 bytes per
parameter: 2.2 GB for 124M), more than that node has. The model is built under `deepspeed.zero.Init`,
so each rank only ever holds its shard: the offloaded optimizer states are what fill the RAM.

## The kill (a stand-in for the kernel OOM killer)
This machine has more RAM than 2 GiB, so the kernel's OOM killer would not step in here. A watchdog
in the driver (`RssWatchdog` in `scripts/scenarios/_common.py`) plays its part: when the workers'
summed RSS passed 2 GiB it sent SIGKILL to the largest worker (pid {k['pid'] if k else '?'}, RSS
{(k['rss_bytes'] / 2**20 if k else 0):.0f} MiB; all workers {(k['total_rss_bytes'] / 2**20 if k else 0):.0f} MiB),
as the OOM killer picks its victim by memory use. Like the kernel, it wrote nothing into the log: what
the log shows (the launcher's `exits with return code = -9` after DeepSpeed's offload set-up lines) is
what users see when the OOM killer strikes. `dmesg` would hold the kernel's own `Out of memory:
Killed process ...` line, which is not in a training log.

Depending on where the survivor is when its peer dies, the other rank may also print a gloo error
such as `RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer ... This is
typically caused by a remote worker crashing`: a consequence of the kill, not a hang or a timeout.

A correct analysis reports the `cpu-oom` symptom (return code -9 = SIGKILL), no `hang`, the DS106
cpu-oom-killed finding and, given `--config ds_config.json --model model_config.json --env env.json`,
DS203 (offload needs more CPU RAM than the node has), with the fix (more RAM, offload less, or a
smaller model per node). Nothing in DeepSpeed was patched; its logger is at INFO.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
