"""Scenario: fp16 without ZeRO (stage 0) with a brief burst of overflows at the start; recovers.

The same tiny GPT-2 as ``fp16_overflow_warmup``, but at ZeRO stage 0 with DeepSpeed's own Adam
(``FusedAdam``, built by the CPU accelerator's op builder), so the engine wraps it in the fused
``FP16_Optimizer`` (deepspeed/runtime/fp16/fused_optimizer.py) instead of ZeRO's optimizer. From
DeepSpeed 0.19.8 on, that optimizer no longer prints "Overflow detected. Skipping step. Attempted
loss scale: X, reducing to Y" (0.19.7 fused_optimizer.py:269); an overflow shows only as
"Grad overflow on iteration N" and "Reducing dynamic loss scale from X to Y", on every rank
(0.19.8 fused_optimizer.py:413-414). At 0.19.8 stage 0 ``engine.backward`` does not multiply the
loss by the dynamic scale (engine.py:3416-3420 scale only for a ZeROOptimizer or torch autocast's
GradScaler), so a high initial scale cannot make the gradients overflow here: the overflows come
from the user's loss-weight warm-up, which starts at 2^23 and halves each step. The first steps
overflow and are skipped, the scale halves each time, then training proceeds and exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "fp16_overflow_zero0"
SCRIPT = Path(__file__).resolve()
STEPS = 120

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 20,
    "gradient_clipping": 1.0,
    # "Adam" without torch_adam: DeepSpeed's FusedAdam, which selects the fused FP16_Optimizer
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "fp16": {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 50,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "zero_optimization": {"stage": 0},
}

MODEL_CONFIG = _lm.model_config()


def worker() -> None:
    """One rank: fp16 training of a tiny GPT-2 from scratch, no ZeRO."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args()
    c.patch_cpu_fp16()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = GPT2LMHeadModel(GPT2Config(**_lm.TINY_GPT2))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.deepspeed_config)
    rank = torch.distributed.get_rank()
    if rank == 0:
        print(f"optimizer: {type(engine.optimizer).__name__} over "
              f"{type(engine.optimizer.optimizer).__name__}", flush=True)
    batches = _lm.lm_batches(rank)
    for step in range(1, STEPS + 1):
        ids = next(batches)
        loss = engine(input_ids=ids, labels=ids).loss
        # the user's loss-weight warm-up, written to start far too high: 2^23 at step 1, halving
        # each step down to 1 (the fp16 gradients overflow for the first few steps)
        weight = float(2 ** max(0, 24 - step))
        engine.backward(loss * weight)
        engine.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}/{STEPS}: loss = {loss.item():.4f}", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run it and write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    port = c.free_port()
    try:
        run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"], port=port)), out,
            timeout=1200)
    finally:
        c.remove_shm_buffers(port)
    log = c.read_log(out, "train.log")
    n = log.count("Reducing dynamic loss scale from")
    c.require(run.returncode == 0, "the run failed")
    c.require("optimizer: FP16_Optimizer over FusedAdam" in log, "not the fused FP16_Optimizer")
    c.require("Overflow detected" not in log, "DeepSpeed < 0.19.8 prints 'Overflow detected'")
    c.require(4 <= n <= 40, f"expected a brief overflow burst, got {n} 'Reducing' lines")
    # DS332 (warning): this very setup, fp16 at stage 0 on 0.19.8, is the unscaled-backward defect
    c.write_expected(out, symptoms=["fp16-overflow"], rules=["DS101", "DS332"], max_severity="warning",
                     must_not=["loss-scale-collapse", "nan-loss", "gpu-oom", "cpu-oom", "hang",
                               "launcher-nonzero-exit", "python-exception"],
                     must_not_rules=["DS102", "DS103"],
                     fate="recovered")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "fp16 overflow burst without ZeRO (DeepSpeed 0.19.8 messages)", f"""
A tiny GPT-2 (2 layers, 64 wide, from `model_config.json`, random init) trained from scratch as a
causal LM in fp16 at ZeRO stage 0 on 2 ranks (CPU accelerator, gloo) by a hand-written
`deepspeed.initialize` loop, {STEPS} steps, whose loss is weighted by a warm-up that starts far
too high (2^23 at step 1, halving each step down to 1). The optimizer is DeepSpeed's `Adam` (FusedAdam, the CPU
op builder's build), so the engine wraps it in the fused `FP16_Optimizer`
(`deepspeed/runtime/fp16/fused_optimizer.py`), not a ZeRO optimizer. The first steps' fp16
gradients overflow (the weight, not the loss scale: at 0.19.8 stage 0 `engine.backward` does not
apply the dynamic scale, engine.py:3416-3420), each is skipped and halves the dynamic scale from
2^16, then the weight is small enough, training goes on and the run exits 0.

DeepSpeed 0.19.8 changed what this optimizer prints on an overflow: up to 0.19.7 rank 0 printed
`Overflow detected. Skipping step. Attempted loss scale: X, reducing to Y`; from 0.19.8 every rank
prints only `Grad overflow on iteration N` and `Reducing dynamic loss scale from X to Y`
({n} such lines here, one per rank and overflow). A correct analysis still sees the
`fp16-overflow` symptom and reports DS101 (fp16-overflow-warmup, info): no collapse, no NaN, no error.

## What was patched
Only the CPU accelerator's fp16 capability check (`patch_cpu_fp16` in `scripts/scenarios/_common.py`):
the fp16 optimizer, overflow check and loss scaler are DeepSpeed's own. DeepSpeed's logger is set to
INFO as users do (`deepspeed.utils.logging.set_log_level_from_string("info")`).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
