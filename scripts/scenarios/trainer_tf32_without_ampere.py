"""Scenario: the Trainer's --tf32 on a machine without an Ampere GPU; TrainingArguments refuses it.

The healthy scenario's Trainer job (2 CPU ranks under the ``deepspeed`` launcher, ZeRO-2, bf16) with
``tf32=True`` added to its TrainingArguments, as a user copies ``--tf32 True`` from a recipe made
for A100s. ``TrainingArguments.__post_init__`` raises ``ValueError: --tf32 requires Ampere or a
newer GPU arch, cuda>=11 and torch>=1.7`` on every rank before the model is built (here: no CUDA at
all; a V100 or T4 gives the same error).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import healthy_zero2_trainer as healthy  # noqa: E402

NAME = "trainer_tf32_without_ampere"
SCRIPT = Path(__file__).resolve()


def worker() -> None:
    """One rank: TrainingArguments(tf32=True, ...) on a machine without TF32."""
    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    trainer = healthy.build_trainer({"tf32": True}, args.deepspeed_config)
    trainer.train()


def generate(out: Path) -> c.Outcome:
    """Run the 2-rank Trainer job that TrainingArguments rejects, write the scenario folder."""
    c.write_json(out / "ds_config.json", healthy.CONFIG)
    c.write_json(out / "model_config.json", healthy.MODEL_CONFIG)
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=600)
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "--tf32 requires Ampere" in log,
              "TrainingArguments did not refuse tf32=True")
    c.write_expected(out, symptoms=["python-exception"], rules=["DS223"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "fp16-overflow", "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS109", "DS204", "DS113"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "--tf32 without an Ampere GPU: TrainingArguments refuses it", """
The healthy scenario's `transformers.Trainer` job (tiny GPT-2, ZeRO-2, bf16, 2 ranks on the CPU
accelerator under the `deepspeed` launcher) with `tf32=True` added to `TrainingArguments`, as
`--tf32 True` is copied from recipes written for A100s. TF32 needs an Ampere or newer GPU with
CUDA; this machine has no CUDA GPU, so `TrainingArguments.__post_init__` raises on both ranks

    ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7

and the launcher reports the failed ranks. A correct analysis says the run failed and gives DS223
(drop --tf32 on GPUs without TF32); no memory, hang or bf16-hardware finding.

## Inputs
- `ds_config.json`, `model_config.json`: the healthy scenario's.
- Real Trainer and DeepSpeed, 2 ranks, CPU accelerator, gloo. Nothing was patched. The worker is
  `scripts/scenarios/trainer_tf32_without_ampere.py` (model and data from `healthy_zero2_trainer.py`).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
