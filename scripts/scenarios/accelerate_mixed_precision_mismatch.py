"""Scenario: ``accelerate launch --mixed_precision fp16`` with a DeepSpeed config that enables bf16.

A user's Accelerate training script (``Accelerator()``, ``accelerator.prepare(model, optimizer,
dataloader)``) is launched with the real ``accelerate launch`` (which runs torchrun's elastic agent)
on 2 CPU processes, with an Accelerate YAML config that points to a DeepSpeed JSON config
(``deepspeed_config_file``) whose ``bf16.enabled`` is true, and ``--mixed_precision fp16`` on the
command line. Accelerate's DeepSpeed plugin refuses the combination in ``prepare`` on every rank:
"`--mixed_precision` arg cannot be set to `fp16` when `bf16` is set in the DeepSpeed config file.";
torchrun's elastic agent then prints its ChildFailedError summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "accelerate_mixed_precision_mismatch"
SCRIPT = Path(__file__).resolve()

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "overlap_comm": False},
}

ACCELERATE_YAML = """compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_config_file: ds_config.json
  zero3_init_flag: false
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""

MODEL_CONFIG = _lm.model_config()


def worker() -> None:
    """One process: the usual Accelerate loop (it fails in prepare)."""
    import torch
    from accelerate import Accelerator
    from transformers import GPT2Config, GPT2LMHeadModel

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**_lm.TINY_GPT2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = _lm.lm_batches(0)
    data = [next(batches)[0] for _ in range(64)]
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, ids in enumerate(loader):
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.print(f"step {step}: loss {loss.item():.4f}")


def generate(out: Path) -> c.Outcome:
    """Write both configs, run accelerate launch, write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    (out / "accelerate_config.yaml").write_text(ACCELERATE_YAML, encoding="utf-8")
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    exe = Path(sys.executable).parent / "accelerate"
    base = [str(exe), "launch"] if exe.exists() else [sys.executable, "-m", "accelerate.commands.launch"]
    argv = [*base, "--config_file", "accelerate_config.yaml", "--mixed_precision", "fp16",
            "--main_process_port", str(c.free_port()), str(SCRIPT), "--worker"]
    run = c.run_logged(c.Run("train.log", argv), out, timeout=600)
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "cannot be set to `fp16` when `bf16`" in log,
              "Accelerate did not reject --mixed_precision fp16 against bf16 in the DeepSpeed config")
    c.write_expected(out, symptoms=["config-mismatch"], rules=["DS109"],
                     must_not=["fp16-overflow", "gpu-oom", "cpu-oom", "hang", "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS107"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "accelerate launch --mixed_precision fp16 vs bf16 in the DeepSpeed config", """
A user's Accelerate loop (`Accelerator()`, then `accelerator.prepare(model, optimizer, dataloader)`;
a tiny GPT-2 built from `model_config.json`) launched with the real `accelerate launch --config_file
accelerate_config.yaml --mixed_precision fp16` on 2 processes (CPU, gloo; Accelerate runs torchrun's
elastic agent). The Accelerate config (`accelerate_config.yaml`, as `accelerate config` writes it)
points to `ds_config.json` (`deepspeed_config_file`), which enables bf16. In `prepare`, Accelerate's
DeepSpeed plugin raises on both ranks

    ValueError: `--mixed_precision` arg cannot be set to `fp16` when `bf16` is set in the DeepSpeed config file.

and torchrun's elastic agent prints its `ChildFailedError` summary (`exitcode: 1` for each failed
rank; in other runs a rank the agent had to stop shows `-15 (SIGTERM)`).

A correct analysis reports the `config-mismatch` symptom and DS109 (fix: drop `--mixed_precision` or
make it `bf16`, or switch the DeepSpeed config to fp16), not a memory or hang problem; an exit code
-15 is not an OOM kill.

Measured on the way: with `mixed_precision: fp16` written in the YAML itself (instead of on the
command line), Accelerate 1.15 refuses earlier and differently: "When using `deepspeed_config_file`,
the following accelerate config variables will be ignored: [...]".

## Inputs
- `accelerate_config.yaml` and `ds_config.json` as described; `model_config.json`.
- Nothing was patched.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
