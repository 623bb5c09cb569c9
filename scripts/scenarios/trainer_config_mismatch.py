"""Scenario: the HF Trainer's arguments contradict the DeepSpeed config; Transformers refuses to start.

The real ``transformers.Trainer`` with its DeepSpeed integration, 2 CPU ranks under the ``deepspeed``
launcher, the healthy scenario's model and data, but a DeepSpeed config with hard-coded values instead
of ``"auto"``: ``train_micro_batch_size_per_gpu: 4`` while the command line says
``--per_device_train_batch_size 8``, and ``gradient_accumulation_steps: 4`` while the Trainer has 2.
When training starts, Transformers' ``HfTrainerDeepSpeedConfig.trainer_config_finalize`` compares them
and raises ``ValueError: Please correct the following DeepSpeed config values that mismatch
TrainingArguments values`` on every rank.

(A *string* ``"2"`` for gradient_accumulation_steps does not get that far with Accelerate 1.15: its
``_prepare_deepspeed`` crashes first with ``TypeError: unsupported operand type(s) for //: 'str' and
'int'``.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import healthy_zero2_trainer as healthy  # noqa: E402

NAME = "trainer_config_mismatch"
SCRIPT = Path(__file__).resolve()

CONFIG = {
    **healthy.CONFIG,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 4,
}
CONFIG.pop("train_batch_size")


def worker() -> None:
    """One rank: Trainer.train() with per_device_train_batch_size=8, gradient_accumulation_steps=2."""
    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    trainer = healthy.build_trainer({"per_device_train_batch_size": 8,
                                     "gradient_accumulation_steps": 2}, args.deepspeed_config)
    trainer.train()


def generate(out: Path) -> c.Outcome:
    """Run the 2-rank Trainer job that Transformers rejects, write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", healthy.MODEL_CONFIG)
    run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
        SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=900)
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "mismatch TrainingArguments" in log,
              "Transformers did not reject the mismatching config")
    c.write_expected(out, symptoms=["config-mismatch"], rules=["DS109"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "fp16-overflow", "batch-size-mismatch",
                               "op-build-failure"],
                     must_not_rules=["DS110", "DS105", "DS106"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "Trainer arguments vs DeepSpeed config: Transformers rejects them", """
`transformers.Trainer` (its DeepSpeed integration) with `per_device_train_batch_size=8,
gradient_accumulation_steps=2`, and a DeepSpeed config (`ds_config.json`) that hard-codes
`"train_micro_batch_size_per_gpu": 4` and `"gradient_accumulation_steps": 4` instead of `"auto"`.
When `trainer.train()` starts, Transformers raises `ValueError: Please correct the following
DeepSpeed config values that mismatch TrainingArguments values:` followed by one `- ds ... vs hf ...`
line per mismatch, on both ranks, and the `deepspeed` launcher reports the failed rank.

(Measured on the way: with the string `"2"` for `gradient_accumulation_steps`, Accelerate 1.15's
`_prepare_deepspeed` crashes first with `TypeError: unsupported operand type(s) for //: 'str' and
'int'`, before Transformers' comparison.)

A correct analysis reports the `config-mismatch` symptom and the DS109 finding (with the fix: use
`"auto"` or make the values agree); no batch-size assertion (DeepSpeed
never got to check the batch arithmetic), no memory or hang symptom.

## Inputs
- `ds_config.json`: as above. `model_config.json`: the tiny GPT-2's config (2 layers, 64 wide).
- Real Trainer + real DeepSpeed integration, 2 ranks, CPU accelerator, gloo. Nothing was patched.
  The worker is `scripts/scenarios/trainer_config_mismatch.py` (model and data from
  `healthy_zero2_trainer.py`).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
