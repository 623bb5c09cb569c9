"""Scenario: the PEFT DeepSpeed guide's shape, an Accelerate config whose ``deepspeed_config``
sets ``gradient_accumulation_steps: 8`` and ``accelerate launch ... train.py
--gradient_accumulation_steps 4``: the HF Trainer refuses the mismatch when training starts.

The real ``accelerate launch`` (torchrun's elastic agent), 2 CPU processes, a training script that
parses ``TrainingArguments`` from its command line with ``HfArgumentParser`` (as PEFT's
examples/sft/train.py does) and runs ``Trainer.train()`` on the healthy scenario's tiny GPT-2.
Transformers' ``HfTrainerDeepSpeedConfig`` compares the Accelerate DeepSpeed plugin's values with
the arguments and raises "Please correct the following DeepSpeed config values that mismatch
TrainingArguments values: - ds gradient_accumulation_steps=8 vs hf gradient_accumulation_steps=4".
The launch command is kept as ``run.sh`` so that a pre-flight check (``--script run.sh``) sees
the Trainer arguments too (DS311).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import healthy_zero2_trainer as healthy  # noqa: E402

NAME = "accelerate_trainer_accumulation_mismatch"
SCRIPT = Path(__file__).resolve()

ACCELERATE_YAML = """compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_multinode_launcher: standard
  gradient_accumulation_steps: 8
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""

#: The script's own options, as the PEFT guide's run_peft_deepspeed.sh passes them (shortened).
TRAIN_ARGS = ["--output_dir", "out", "--max_steps", "20", "--logging_steps", "5",
              "--log_level", "info", "--logging_strategy", "steps", "--save_strategy", "no",
              "--bf16", "True", "--learning_rate", "1e-3", "--max_grad_norm", "1.0",
              "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "4",
              "--report_to", "none", "--use_cpu", "True"]  # this machine has no GPU


def worker() -> None:
    """One process: TrainingArguments from the command line, then Trainer.train()."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments

    argv = [a for a in sys.argv[1:] if a != "--worker"]
    (training_args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses(argv)
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    cfg = {k: v for k, v in healthy.MODEL_CONFIG.items() if k != "architectures"}
    model = GPT2LMHeadModel(GPT2Config(**cfg))
    Trainer(model=model, args=training_args, train_dataset=healthy.make_dataset(1024)).train()


def generate(out: Path) -> c.Outcome:
    """Write the Accelerate config and run.sh, run accelerate launch, write the scenario folder."""
    (out / "accelerate_config.yaml").write_text(ACCELERATE_YAML, encoding="utf-8")
    c.write_json(out / "model_config.json", healthy.MODEL_CONFIG)
    exe = Path(sys.executable).parent / "accelerate"
    base = [str(exe), "launch"] if exe.exists() else [sys.executable, "-m", "accelerate.commands.launch"]
    port = str(c.free_port())
    argv = [*base, "--config_file", "accelerate_config.yaml", "--main_process_port", port,
            str(SCRIPT), "--worker", *TRAIN_ARGS]
    shown = ["accelerate", "launch", "--config_file", "accelerate_config.yaml",
             "--main_process_port", port, f"scripts/scenarios/{SCRIPT.name}", "--worker", *TRAIN_ARGS]
    (out / "run.sh").write_text("#!/bin/bash\n# the launch command of train.log (paths relative to "
                                "the repository)\n" + " ".join(shown) + "\n", encoding="utf-8")
    run = c.run_logged(c.Run("train.log", argv), out, timeout=900)
    shutil.rmtree(out / "out", ignore_errors=True)  # the Trainer's (empty) output_dir
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "mismatch TrainingArguments" in log,
              "Transformers did not reject the Accelerate config's gradient_accumulation_steps")
    c.write_expected(out, symptoms=["config-mismatch"], rules=["DS109", "DS311"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "fp16-overflow", "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS110", "DS113"],
                     scripts=[f"sample_logs/{NAME}/run.sh"], fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "Accelerate config vs the Trainer's --gradient_accumulation_steps", """
The PEFT DeepSpeed guide's shape: an Accelerate config (`accelerate_config.yaml`, as `accelerate
config` writes it) whose `deepspeed_config` sets `gradient_accumulation_steps: 8`, and the training
script launched with `accelerate launch --config_file accelerate_config.yaml ... --worker
--gradient_accumulation_steps 4 ...` (`run.sh`: the exact command), 2 CPU processes. The script
parses `TrainingArguments` from its command line with `HfArgumentParser`, as PEFT's
examples/sft/train.py does, and calls `Trainer.train()` (tiny GPT-2 of `model_config.json`).
When training starts, Transformers raises on both ranks

    ValueError: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:
    - ds gradient_accumulation_steps=8 vs hf gradient_accumulation_steps=4

and torchrun's elastic agent reports the failed ranks.

A correct analysis reports the `config-mismatch` symptom and DS109 from the log, and DS311 from
the launch command (`--script run.sh`) with the Accelerate config's line (fix: delete the key from
the Accelerate config so the Trainer fills it, or make it 4); no memory or hang problem, and no
"nothing more specific" DS113.

## Inputs
- `accelerate_config.yaml`, `run.sh` and `model_config.json` as described.
- Real Accelerate launcher, real Trainer and DeepSpeed integration, CPU, gloo (`--use_cpu True`:
  without it Transformers refuses bf16 on a machine without GPU). Nothing was patched.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
