"""Scenario: zero_to_fp32.py run on the global_stepN folder instead of the checkpoint directory.

A tiny GPT-2 (random weights, nothing downloaded) is trained for a few ZeRO stage 2 steps on 2 CPU
ranks under the ``deepspeed`` launcher and saved with ``engine.save_checkpoint``; DeepSpeed copies
its ``zero_to_fp32.py`` into the checkpoint directory. The user then runs that script the way many
do by mistake: on ``global_step3`` (the tag folder) rather than on the directory holding the
``latest`` file. The conversion fails; its output is the second log.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "zero_to_fp32_wrong_dir"
SCRIPT = Path(__file__).resolve()
# A fixed path so that regenerated logs compare line for line; removed after the run.
WORK = Path("/tmp/dsdoctor-scenario-zero-to-fp32")
CKPT_DIR = WORK / "ckpt"
STEPS = 3

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 2},
}


def worker() -> None:
    """One rank: a few ZeRO-2 steps, then a regular checkpoint."""
    args, model = _lm.start_rank()
    engine = _lm.train_loop(model, args.deepspeed_config, STEPS)
    engine.save_checkpoint(str(CKPT_DIR))


def generate(out: Path) -> c.Outcome:
    """Train and save, then convert from the wrong folder; write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", _lm.model_config())
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        train = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=600)
        c.require(train.returncode == 0, f"training failed (exit {train.returncode})")
        c.require((CKPT_DIR / "zero_to_fp32.py").is_file(), "DeepSpeed did not write zero_to_fp32.py")
        convert = c.run_logged(c.Run("convert.log", [
            sys.executable, str(CKPT_DIR / "zero_to_fp32.py"), str(CKPT_DIR / f"global_step{STEPS}"),
            str(WORK / "pytorch_model.bin")]), out, timeout=300, cwd=WORK)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    c.require(convert.returncode != 0, "the conversion did not fail")
    c.write_expected(out, fate="failed", symptoms=["checkpoint-error"], rules=["DS119"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "disk-full", "nan-loss",
                               "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS107", "DS113"])
    outcome = c.Outcome([train, convert])
    c.write_readme(out, NAME, "zero_to_fp32.py pointed at the tag folder", f"""
A tiny GPT-2 (`model_config.json`; random weights, nothing downloaded) trained for {STEPS} steps with
ZeRO stage 2 (`ds_config.json`), AdamW, 2 ranks (CPU accelerator, gloo), `deepspeed` launcher, then
`engine.save_checkpoint("{CKPT_DIR}")` (`train.log`, a healthy run). DeepSpeed copies
`zero_to_fp32.py` into that directory; `convert.log` is its output when it is run on
`{CKPT_DIR}/global_step{STEPS}` (the tag folder) instead of `{CKPT_DIR}` (the folder holding the
`latest` file), a common mistake. The checkpoint was deleted after the run (it is not needed to
analyze the logs). Nothing was patched; DeepSpeed's logger is at INFO.

A correct analysis reports the `checkpoint-error` symptom and DS119 naming the directory and the fix
(point the script at the directory with the `latest` file, or pass the tag), and nothing about
memory or hangs.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
