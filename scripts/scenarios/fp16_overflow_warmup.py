"""Scenario: fp16 with a brief burst of overflows at the start while the loss scale settles; recovers.

A tiny GPT-2 causal LM trained in fp16 with ZeRO-2 on 2 CPU ranks, with a high initial loss scale
(2^24). The first steps overflow while DeepSpeed's dynamic loss scaler halves the scale down to a
value the gradients fit in; then training proceeds normally for a few hundred steps and exits 0.
That is normal behaviour (at most an info finding), not a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "fp16_overflow_warmup"
SCRIPT = Path(__file__).resolve()
STEPS = 300

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 25,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0, "torch_adam": True}},
    "fp16": {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": 24,
        "loss_scale_window": 100,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "zero_optimization": {"stage": 2, "overlap_comm": False},
}

MODEL_CONFIG = _lm.model_config()


def worker() -> None:
    """One rank: fp16 training of a tiny GPT-2 from scratch."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args()
    c.patch_cpu_fp16()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = GPT2LMHeadModel(GPT2Config(**_lm.TINY_GPT2))
    _lm.train_loop(model, args.deepspeed_config, STEPS, print_every=5)


def generate(out: Path) -> c.Outcome:
    """Run it and write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=1200)
    log = c.read_log(out, "train.log")
    n = log.count("OVERFLOW!")
    c.require(run.returncode == 0, "the run failed")
    c.require(3 <= n <= 20, f"expected a brief overflow burst, got {n} OVERFLOW lines")
    c.write_expected(out, symptoms=["fp16-overflow"], rules=[], max_severity="info",
                     must_not=["loss-scale-collapse", "nan-loss", "gpu-oom", "cpu-oom", "hang",
                               "launcher-nonzero-exit", "python-exception"],
                     must_not_rules=["DS102", "DS103"],
                     fate="recovered")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "fp16 overflow burst at the start that recovers", f"""
A tiny GPT-2 (2 layers, 64 wide, from `model_config.json`, random init) trained from scratch as a
causal LM in fp16 with ZeRO stage 2 on 2 ranks (CPU accelerator, gloo) by a hand-written
`deepspeed.initialize` loop, {STEPS} steps. The config starts the dynamic loss scale at 2^24
(`initial_scale_power: 24`), so the first {n} steps overflow (`[deepspeed] OVERFLOW! Rank 0 Skipping
step. Attempted loss scale: ...`) while the scaler halves the scale to one the gradients fit in; the
loss then goes down normally, the scale grows again every `loss_scale_window` steps, and the run
exits 0.

This is normal fp16 behaviour: a correct analysis reports the `fp16-overflow` symptom but at most an
info finding (DS101 fp16-overflow-warmup would be that info), no collapse, no NaN, no error.

## What was patched
Only the CPU accelerator's fp16 capability check (`patch_cpu_fp16` in `scripts/scenarios/_common.py`):
the fp16 optimizer, overflow check and loss scaler are DeepSpeed's own. DeepSpeed's logger is set to
INFO as users do (`deepspeed.utils.logging.set_log_level_from_string("info")`) so that rank 0 prints
the OVERFLOW lines.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
