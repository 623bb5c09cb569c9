"""Scenario: a healthy run. The real Hugging Face Trainer + DeepSpeed ZeRO-2, a few hundred steps.

A tiny GPT-2 (built from a config, nothing downloaded) is trained as a causal LM on a synthetic
token stream with ``transformers.Trainer`` and its DeepSpeed integration (``--deepspeed
ds_config.json`` with the usual ``"auto"`` values), bf16, 2 CPU ranks under the ``deepspeed``
launcher. The Trainer prints its ``{'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch':
...}`` dicts every 10 steps and the progress bar; DeepSpeed prints its engine config and step lines.
Nothing goes wrong: a correct analysis reports no error finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "healthy_zero2_trainer"
SCRIPT = Path(__file__).resolve()
STEPS = 300

CONFIG = {
    "bf16": {"enabled": "auto"},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto",
                   "torch_adam": True},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                   "total_num_steps": "auto"},
    },
    "zero_optimization": {
        "stage": 2,
        "allgather_partitions": True,
        "allgather_bucket_size": 2e8,
        "overlap_comm": False,
        "reduce_scatter": True,
        "reduce_bucket_size": 2e8,
        "contiguous_gradients": True,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 50,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}

MODEL_CONFIG = _lm.model_config()


def make_dataset(n: int, seq: int = 32):
    """A learnable synthetic LM dataset: noisy arithmetic sequences of token ids."""
    import torch

    g = torch.Generator().manual_seed(0)
    start = torch.randint(1, 128, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    ids = (start + step * torch.arange(seq)) % 127 + 1

    class DS(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": ids[i], "labels": ids[i]}

    return DS()


def build_trainer(args_overrides: dict, ds_config: str):
    """The model, TrainingArguments and Trainer, as a typical fine-tuning script builds them."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    targs = dict(output_dir="out", per_device_train_batch_size=8, max_steps=STEPS,
                 learning_rate=1e-3, warmup_steps=30, weight_decay=0.0, logging_steps=10,
                 save_strategy="no", report_to=[], bf16=True, deepspeed=ds_config, seed=0,
                 dataloader_num_workers=0, disable_tqdm=False, max_grad_norm=1.0,
                 use_cpu=True, log_level="info")
    targs.update(args_overrides)
    training_args = TrainingArguments(**targs)
    model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in MODEL_CONFIG.items() if k != "architectures"}))
    return Trainer(model=model, args=training_args, train_dataset=make_dataset(4096))


def worker() -> None:
    """One rank: Trainer.train() with the DeepSpeed integration."""
    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    trainer = build_trainer({}, args.deepspeed_config)
    trainer.train()


def generate(out: Path) -> c.Outcome:
    """Run the 2-rank Trainer job and write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=1800)
    log = c.read_log(out, "train.log")
    c.require(run.returncode == 0, "the healthy run failed")
    c.require("'loss'" in log and "train_runtime" in log, "no Trainer logging dicts in the log")
    c.write_expected(out, symptoms=[], rules=[], max_severity="warning",
                     must_not=["fp16-overflow", "loss-scale-collapse", "nan-loss", "loss-zero",
                               "gpu-oom", "cpu-oom", "hang", "launcher-nonzero-exit",
                               "python-exception", "config-mismatch"],
                     fate="healthy")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "healthy ZeRO-2 run with the HF Trainer", f"""
A healthy run: `transformers.Trainer` with its DeepSpeed integration (`TrainingArguments(deepspeed=
"ds_config.json", bf16=True, max_steps={STEPS}, logging_steps=10, ...)`) trains a tiny GPT-2 (2 layers,
64 wide, built from `model_config.json`, random init, nothing downloaded) as a causal LM on a
synthetic token stream, ZeRO stage 2, on 2 ranks (CPU accelerator, gloo) under the `deepspeed`
launcher. The log holds the Trainer's logging dicts (Transformers 5 prints the values as quoted
strings: `{{'loss': '1.189', 'grad_norm': '0.6703', 'learning_rate': '0.0001889', 'epoch': '0.9766'}}`),
its tqdm progress bar (with `\\r`) and DeepSpeed's engine config dump (words like `loss_scale`,
`overflow`, `fp16`); Accelerate sets `steps_per_print` to infinity, so DeepSpeed prints no step
lines. The loss goes down and the run exits 0.

A correct analysis reports no symptom of failure and no error finding (`max_severity: warning` in
expected.json: config lints may still warn).

## Inputs
- `ds_config.json`: the Trainer-style config with `"auto"` values (filled in by Transformers).
- `model_config.json`: the model's config.
- Nothing was patched (bf16 is supported by the CPU accelerator). `TrainingArguments(log_level="info",
  use_cpu=True)`: the Trainer sets DeepSpeed's logger to its own process log level, so INFO is how
  users see DeepSpeed's step lines and engine config.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
