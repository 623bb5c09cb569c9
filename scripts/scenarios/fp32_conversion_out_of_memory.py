"""Scenario: zero_to_fp32.py runs out of memory converting a ZeRO-3 checkpoint.

A small GPT-2 (29.5M parameters, random weights, nothing downloaded) is trained for one ZeRO stage
3 step on 2 CPU ranks under the ``deepspeed`` launcher and saved with ``engine.save_checkpoint``;
DeepSpeed copies its ``zero_to_fp32.py`` into the checkpoint directory. The user then converts
the checkpoint with that script, correctly invoked, under an address-space limit
(``prlimit --as``, what ``ulimit -v`` or a scheduler's virtual-memory limit sets) too small for
the conversion. The kernel refuses the allocation and torch's CPU allocator fails: the real
failure, nothing simulated. Its output is the second log.

The limit is the one knob: 1100 MiB fails in the conversion itself on the machine that made the
sample (less fails earlier, at the mmap of the optimizer shards; 1300 MiB succeeds). Another
machine's baseline (torch's import) may differ; the driver checks the failure is the allocator's.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

NAME = "fp32_conversion_out_of_memory"
SCRIPT = Path(__file__).resolve()
# A fixed path so that regenerated logs compare line for line; removed after the run.
WORK = Path("/tmp/dsdoctor-scenario-zero-to-fp32-oom")
CKPT_DIR = WORK / "ckpt"
AS_LIMIT = 1100 * 2**20  # bytes of address space the conversion may use

# Bigger than the other scenarios' tiny GPT-2 so the conversion's own allocations matter.
MODEL = {"vocab_size": 8192, "n_positions": 128, "n_embd": 512, "n_layer": 8, "n_head": 8,
         "bos_token_id": 0, "eos_token_id": 0}

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 3},
}


def worker() -> None:
    """One rank: one ZeRO-3 step, then a regular checkpoint."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo")
    model = GPT2LMHeadModel(GPT2Config(**MODEL))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.deepspeed_config)
    ids = torch.randint(1, MODEL["vocab_size"], (2, 32), generator=torch.Generator().manual_seed(1))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    if torch.distributed.get_rank() == 0:
        print(f"step 1/1: loss = {loss.item():.4f}", flush=True)
    engine.save_checkpoint(str(CKPT_DIR))


def generate(out: Path) -> c.Outcome:
    """Train and save, then convert under the address-space limit; write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                                             **MODEL, "torch_dtype": "float32"})
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        train = c.run_logged(c.Run("train.log", c.deepspeed_cmd(
            SCRIPT, 2, ["--worker", "--deepspeed_config", "ds_config.json"])), out, timeout=900)
        c.require((CKPT_DIR / "zero_to_fp32.py").is_file() and (CKPT_DIR / "latest").is_file(),
                  f"no checkpoint was saved (training exit {train.returncode})")
        convert = c.run_logged(c.Run("convert.log", [
            "prlimit", f"--as={AS_LIMIT}", sys.executable, str(CKPT_DIR / "zero_to_fp32.py"),
            str(CKPT_DIR), str(WORK / "fp32")]), out, timeout=300, cwd=WORK)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    c.require(convert.returncode != 0, "the conversion did not fail (raise nothing, lower AS_LIMIT)")
    c.require("DefaultCPUAllocator: can't allocate memory" in c.read_log(out, "convert.log"),
              "the conversion failed, but not in torch's allocator (adjust AS_LIMIT)")
    c.write_expected(out, fate="failed", symptoms=["cpu-oom"], rules=["DS106"],
                     must_not=["gpu-oom", "hang", "disk-full", "nan-loss", "op-build-failure"],
                     must_not_rules=["DS105", "DS107", "DS119"])
    outcome = c.Outcome([train, convert])
    c.write_readme(out, NAME, "zero_to_fp32.py out of memory", f"""
A GPT-2 of 29.5M parameters (`model_config.json`; random weights, nothing downloaded) trained for
one step with ZeRO stage 3 (`ds_config.json`), AdamW, 2 ranks (CPU accelerator, gloo), `deepspeed`
launcher, then `engine.save_checkpoint("{CKPT_DIR}")` (`train.log`). DeepSpeed copies
`zero_to_fp32.py` into that directory; `convert.log` is its output when run correctly on
`{CKPT_DIR}` under `prlimit --as={AS_LIMIT}` ({AS_LIMIT // 2**20} MiB of address space, what
`ulimit -v` or a scheduler's virtual-memory limit sets): torch's CPU allocator fails while the
script builds the fp32 weights. The checkpoint was deleted after the run. Nothing was patched;
DeepSpeed's logger is at INFO. (The training's exit code may be non-zero: a rank can abort in
gloo's teardown after the checkpoint is written; the checkpoint is complete, the driver checks it.)

A correct analysis of `convert.log` (with `--model model_config.json`) reports the `cpu-oom` symptom
and DS106 about the conversion: the guide's 2x-the-fp32-weights figure for releases before 0.16, and
for this 0.16+ script (mmap, shard by shard) what the address-space limit has to cover, with the
fixes that apply to this release.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
