"""Scenario: a ZeRO-2 checkpoint saved on 2 ranks is resumed on 1 rank.

A tiny GPT-2 (random weights, nothing downloaded) is trained for a few ZeRO stage 2 steps on 2 CPU
ranks under the ``deepspeed`` launcher and saved with ``engine.save_checkpoint`` (``train.log``).
The run is then resumed with ``engine.load_checkpoint`` on 1 rank (``resume.log``), as when fewer
GPUs are free: ZeRO's optimizer states are partitioned per data-parallel rank, and DeepSpeed refuses
to load them with another world size.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "zero_checkpoint_world_size_changed"
SCRIPT = Path(__file__).resolve()
# A fixed path so that regenerated logs compare line for line; removed after the run.
WORK = Path("/tmp/dsdoctor-scenario-resume")
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
    """One rank: train and save (``--phase save``), or load the checkpoint and go on (``resume``)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args(lambda p: p.add_argument("--phase", choices=("save", "resume")))
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = GPT2LMHeadModel(GPT2Config(**_lm.TINY_GPT2))
    engine = _lm.train_loop(model, args.deepspeed_config, STEPS,
                            resume_from=str(CKPT_DIR) if args.phase == "resume" else None)
    if args.phase == "save":
        engine.save_checkpoint(str(CKPT_DIR))


def generate(out: Path) -> c.Outcome:
    """Save on 2 ranks, resume on 1; write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", _lm.model_config())
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        train = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--phase", "save", "--deepspeed_config", "ds_config.json"])),
            out, timeout=600)
        c.require(train.returncode == 0, f"training failed (exit {train.returncode})")
        resume = c.run_logged(c.Run("resume.log", c.deepspeed_cmd(
            SCRIPT, 1, ["--worker", "--phase", "resume", "--deepspeed_config", "ds_config.json"])),
            out, timeout=600, env=c.launcher_env({"LOCAL_SIZE": "1"}))
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    log = c.read_log(out, "resume.log")
    c.require(resume.returncode != 0, "the resume did not fail")
    c.require("DP world size of 2" in log, "the log shows no world-size error")
    c.write_expected(out, fate="failed", symptoms=["checkpoint-error"], rules=["DS119"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "disk-full", "nan-loss",
                               "op-build-failure"],
                     must_not_rules=["DS105", "DS106", "DS107", "DS113"])
    outcome = c.Outcome([train, resume])
    c.write_readme(out, NAME, "a ZeRO-2 checkpoint from 2 ranks resumed on 1", f"""
A tiny GPT-2 (`model_config.json`; random weights, nothing downloaded) trained for {STEPS} steps with
ZeRO stage 2 (`ds_config.json`), AdamW, 2 ranks (CPU accelerator, gloo), `deepspeed` launcher, then
`engine.save_checkpoint("{CKPT_DIR}")` (`train.log`, a healthy run). `resume.log` is the same script
started on 1 rank with `engine.load_checkpoint("{CKPT_DIR}")`: ZeRO partitions the optimizer states
per data-parallel rank, and DeepSpeed refuses to load them with another world size. The checkpoint
was deleted after the run. Nothing was patched; DeepSpeed's logger is at INFO.

A correct analysis reports the `checkpoint-error` symptom and DS119 with both world sizes and the
ways out (resume on 2 ranks, convert to a universal checkpoint and set `"checkpoint":
{{"load_universal": true}}`, or extract the weights with zero_to_fp32.py), and nothing about memory
or hangs; the launcher's non-zero exit is explained by the checkpoint error (no DS113).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
