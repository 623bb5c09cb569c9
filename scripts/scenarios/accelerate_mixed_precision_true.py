"""Scenario: an Accelerate config with ``mixed_precision: 'True'`` (the PEFT guide's help text says
"Set this to True"); ``accelerate launch`` refuses it before any process starts.

The user's Accelerate loop of ``accelerate_mixed_precision_mismatch`` (never reached), an Accelerate
YAML config for DeepSpeed ZeRO-2 (``deepspeed_config_file``) whose ``mixed_precision`` is the string
``'True'``. ``accelerate launch`` validates the value while it builds the launch environment and
raises ``ValueError: Unknown mixed_precision mode: true. Choose between ['no', 'fp8', 'fp16',
'bf16'].``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import accelerate_mixed_precision_mismatch as mismatch  # noqa: E402

NAME = "accelerate_mixed_precision_true"
SCRIPT = Path(__file__).resolve()

CONFIG = {**mismatch.CONFIG}
CONFIG.pop("bf16")
ACCELERATE_YAML = mismatch.ACCELERATE_YAML.replace(
    "machine_rank: 0\n", "machine_rank: 0\nmixed_precision: 'True'\n")


def worker() -> None:
    """One process: the usual Accelerate loop (never reached: the launcher refuses the config)."""
    mismatch.worker()


def generate(out: Path) -> c.Outcome:
    """Write both configs, run accelerate launch, write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    (out / "accelerate_config.yaml").write_text(ACCELERATE_YAML, encoding="utf-8")
    c.write_json(out / "model_config.json", mismatch.MODEL_CONFIG)
    exe = Path(sys.executable).parent / "accelerate"
    base = [str(exe), "launch"] if exe.exists() else [sys.executable, "-m", "accelerate.commands.launch"]
    argv = [*base, "--config_file", "accelerate_config.yaml",
            "--main_process_port", str(c.free_port()), str(SCRIPT), "--worker"]
    run = c.run_logged(c.Run("train.log", argv), out, timeout=300)
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0 and "Unknown mixed_precision mode" in log,
              "accelerate launch did not refuse mixed_precision: 'True'")
    c.write_expected(out, symptoms=["python-exception"], rules=["DS324"],
                     must_not=["fp16-overflow", "gpu-oom", "cpu-oom", "hang", "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS107", "DS109"],
                     fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "Accelerate mixed_precision: 'True' refused by accelerate launch", """
An Accelerate config (`accelerate_config.yaml`, as `accelerate config` writes it, pointing to
`ds_config.json` for DeepSpeed ZeRO-2) with `mixed_precision: 'True'`, as the PEFT DeepSpeed
guide's help text ("Set this to True") suggests. The real `accelerate launch --config_file
accelerate_config.yaml` refuses the value while it prepares the launch, before any training process
starts:

    ValueError: Unknown mixed_precision mode: true. Choose between ['no', 'fp8', 'fp16', 'bf16'].

A correct analysis says the run failed and gives DS324 at the config's `mixed_precision` line with
the fix (bf16 on Ampere or newer GPUs, fp16 on older ones, or no).

## Inputs
- `accelerate_config.yaml` and `ds_config.json` as above; `model_config.json`: the tiny GPT-2.
- Real `accelerate launch`; nothing was patched. The worker (never reached) is
  `scripts/scenarios/accelerate_mixed_precision_true.py`.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
