"""Scenario: the checkpoint does not fit on the disk; DeepSpeed's save fails with ENOSPC.

A tiny GPT-2 (random weights, nothing downloaded) is trained with ZeRO stage 2 on 2 CPU ranks under
the ``deepspeed`` launcher, then ``engine.save_checkpoint`` writes to a directory on a filesystem
that is too small for it. The small filesystem is real: a 512 KiB tmpfs the driver mounts for the
run (root needed) and unmounts afterwards; the ZeRO-2 checkpoint (16-bit weights plus fp32 master
weights and Adam moments, sharded per rank) needs a few MiB. Nothing is simulated: the error in the
log is what torch.save / the kernel reported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "checkpoint_disk_full"
SCRIPT = Path(__file__).resolve()
# A fixed path so that regenerated logs compare line for line.
CKPT_DIR = Path("/tmp/dsdoctor-scenario-small-disk")
TMPFS_SIZE = "512k"

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 5,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 2},
}


def worker() -> None:
    """One rank: a few ZeRO-2 steps, then a checkpoint saved onto the small filesystem."""
    args, model = _lm.start_rank()
    engine = _lm.train_loop(model, args.deepspeed_config, 5)
    engine.save_checkpoint(str(CKPT_DIR))


def _mount() -> None:
    CKPT_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(CKPT_DIR)],
                   check=True)


def _umount() -> None:
    subprocess.run(["umount", str(CKPT_DIR)], check=False)


def generate(out: Path) -> c.Outcome:
    """Mount the small tmpfs, run, unmount, write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", _lm.model_config())
    _mount()
    try:
        run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=600)
    finally:
        _umount()
    log = c.read_log(out, "train.log")
    c.require(run.returncode != 0, "the save did not fail")
    c.require(any(t in log for t in ("No space left on device", "file write failed", "unexpected pos")),
              "the log shows no full-disk error")
    c.write_expected(out, fate="failed", symptoms=["disk-full"], rules=["DS117"],
                     must_not=["gpu-oom", "cpu-oom", "hang", "checkpoint-error", "nan-loss",
                               "shm-exhausted"],
                     must_not_rules=["DS105", "DS106", "DS107", "DS113"])
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "a checkpoint save that does not fit on the disk", f"""
A tiny GPT-2 (`model_config.json`; random weights, nothing downloaded) trained for 5 steps with
ZeRO stage 2 (`ds_config.json`), AdamW, 2 ranks (CPU accelerator, gloo), `deepspeed` launcher; then
`engine.save_checkpoint("{CKPT_DIR}")`. That directory is a real {TMPFS_SIZE} tmpfs the driver mounted for
the run (and unmounted after it): the checkpoint (16-bit weights plus fp32 master weights and both
Adam moments, sharded per rank) does not fit, and the write fails as it would on a full disk or a
quota. Nothing was patched or simulated; DeepSpeed's logger is at INFO.

A correct analysis reports the `disk-full` symptom and DS117 with the path that could not be written
and the fix (free space, fewer checkpoints, smaller checkpoints), and no out-of-memory or hang; the
launcher's non-zero exit is explained by the full disk (no DS113).
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
