"""Scenario: a bf16-pretrained model fine-tuned in fp16: activations overflow fp16, loss NaN, collapse.

A small "pretrained" GPT-2 checkpoint is saved in bfloat16 (its config.json says so). Like real
bf16-pretrained LLMs (T5, Gemma, Llama-family "massive activations"), its first block writes values
of about 1.5e5 into two residual channels: fine in bf16 and fp32 (fp32's range), past fp16's maximum
of 65504. The user fine-tunes it with DeepSpeed ``fp16.enabled``: DeepSpeed casts the model to fp16,
the residual stream becomes inf, the loss NaN at every step, every step overflows, and the dynamic
loss scaler runs down to its minimum and stops the run. The fix is bf16 (or fp32), not loss scaling.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "bf16_model_in_fp16"
SCRIPT = Path(__file__).resolve()
STEPS = 60
CKPT = "tiny-gpt2-bf16"  # checkpoint folder made by --make-checkpoint, next to the config

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 10,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 5e-5, "weight_decay": 0.0, "torch_adam": True}},
    "fp16": {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "zero_optimization": {"stage": 2, "overlap_comm": False},
}


def make_checkpoint(path: Path) -> None:
    """Save the bf16 'pretrained' checkpoint (random init plus two massive-activation channels)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**_lm.TINY_GPT2))
    with torch.no_grad():
        # Block 0's MLP writes ~1.5e5 into residual channels 0 and 1 (weights stay < 1e4, so they
        # are representable in fp16; the activations are not).
        model.transformer.h[0].mlp.c_fc.weight.mul_(30)
        model.transformer.h[0].mlp.c_proj.weight[:, :2] *= 100000
    model.to(torch.bfloat16).save_pretrained(path)


def worker() -> None:
    """One rank: from_pretrained(bf16 checkpoint), then DeepSpeed fp16 fine-tuning."""
    import torch
    from transformers import AutoModelForCausalLM

    import deepspeed

    if "--make-checkpoint" in sys.argv:
        make_checkpoint(Path(sys.argv[sys.argv.index("--make-checkpoint") + 1]))
        return
    args = c.worker_args()
    c.patch_cpu_fp16()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = AutoModelForCausalLM.from_pretrained(CKPT)
    if torch.distributed.get_rank() == 0:
        print(f"loaded {CKPT}: dtype {model.dtype}, {sum(p.numel() for p in model.parameters())} "
              f"parameters", flush=True)
    _lm.train_loop(model, args.deepspeed_config, STEPS, print_every=1)


def generate(out: Path) -> c.Outcome:
    """Make the checkpoint, fine-tune it in fp16 on 2 ranks, write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    ckpt = out / CKPT
    subprocess.run([sys.executable, str(SCRIPT), "--worker", "--make-checkpoint", str(ckpt)],
                   check=True, env=c.launcher_env())
    # The checkpoint's own config.json, as transformers wrote it, is the model config to analyze.
    shutil.copy(ckpt / "config.json", out / "model_config.json")
    saved = json.loads((out / "model_config.json").read_text())
    dtype = saved.get("dtype") or saved.get("torch_dtype")
    try:
        run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=900)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)  # weights are not part of the sample
    log = c.read_log(out, "train.log")
    c.require(dtype == "bfloat16", f"checkpoint config says {dtype}, not bfloat16")
    c.require("OVERFLOW!" in log and run.returncode != 0, "no fp16 overflow / the run did not fail")
    c.write_expected(out, symptoms=["fp16-overflow", "loss-scale-collapse", "nan-loss"],
                     rules=["DS201", "DS102"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "op-build-failure"],
                     must_not_rules=["DS101", "DS105", "DS106"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "bf16-pretrained model fine-tuned in fp16", f"""
A tiny GPT-2 checkpoint is saved in bfloat16 (`model_config.json` is its `config.json` exactly as
Transformers {c.package_versions()['transformers']} wrote it: `"dtype": "bfloat16"`). Like real
bf16-pretrained models with "massive activations" (T5, Gemma, many Llama-family models), its first
block writes values of about 1.5e5 into two residual channels: fine in bf16/fp32, beyond fp16's
maximum 65504 (the weights themselves stay below 1e4, so the fp16 cast of the weights succeeds).

The user's script loads it with `AutoModelForCausalLM.from_pretrained` and fine-tunes it with
DeepSpeed, `fp16.enabled: true`, ZeRO stage 2, 2 ranks (CPU accelerator, gloo). DeepSpeed casts the
model to fp16; the residual stream overflows to inf, the loss is NaN at every step (`loss = nan`),
every step overflows, the dynamic loss scaler halves the scale from 2^16 to `min_loss_scale` 1 and
raises `Current loss scale already at minimum - cannot decrease scale anymore`; the launcher
reports the failed ranks.

A correct analysis reports `fp16-overflow`, `loss-scale-collapse` and `nan-loss` and, given `--model
model_config.json`, DS201 (bf16-pretrained model trained in fp16; fix: `bf16.enabled: true` on
hardware with bf16, else fp32) besides DS102. The weights are not kept (only the config matters).

## What was patched
Only the CPU accelerator's fp16 capability check (`patch_cpu_fp16` in `scripts/scenarios/_common.py`);
DeepSpeed's fp16 optimizer and loss scaler are its own. DeepSpeed's logger is at INFO. The massive
activations are planted in the checkpoint's weights, deterministically (see `make_checkpoint`).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
