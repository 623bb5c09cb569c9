"""Scenario: ZeRO-3 ``generate`` on 2 ranks without ``synced_gpus`` -> a real gloo collective timeout.

A tiny GPT-2 (built from a ``GPT2Config``, nothing downloaded) is sharded with ZeRO stage 3 by
``deepspeed.initialize`` on 2 CPU ranks and each rank generates for its own prompt with
``max_length=32``. The prompts have different lengths, so rank 1 reaches ``max_length`` after fewer
new tokens than rank 0. Under ZeRO-3 every forward step all-gathers the layer weights from all ranks;
once rank 1 has left ``generate`` (and waits in ``dist.barrier()`` before writing its results),
rank 0's next forward waits for a peer that never joins: after the process-group timeout (set short
with ``deepspeed.init_distributed(timeout=...)``) gloo raises, the ranks die, the launcher reports it.

The model is not wrapped by ``HfDeepSpeedConfig`` (the user called ``deepspeed.initialize`` directly),
so ``transformers`` cannot know ZeRO-3 is on and does not turn ``synced_gpus`` on by itself. The twin
scenario ``zero3_generate_synced`` passes ``synced_gpus=True`` and finishes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

NAME = "zero3_generate_hang"
SCRIPT = Path(__file__).resolve()
TIMEOUT_S = 20  # process-group timeout: short so the hang turns into an error quickly

CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "stage3_prefetch_bucket_size": 0,
    },
    "steps_per_print": 10,
}

MODEL_CONFIG = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 256,
    "n_positions": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 2,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "torch_dtype": "float32",
}

# Different prompt lengths per rank: with max_length=32 rank 0 generates 22 tokens, rank 1 only 8.
PROMPT_LENGTHS = (10, 24)


def worker() -> None:
    """One rank: ZeRO-3 inference with generate(), synced_gpus as the flag says."""
    from datetime import timedelta

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args(lambda p: p.add_argument("--synced_gpus", action="store_true"))
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=args.timeout))
    rank = torch.distributed.get_rank()

    model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in MODEL_CONFIG.items() if k != "architectures"}))
    model.eval()
    engine, _, _, _ = deepspeed.initialize(model=model, config=args.deepspeed_config)
    gen = torch.Generator().manual_seed(100 + rank)
    prompt = torch.randint(1, 256, (1, PROMPT_LENGTHS[rank]), generator=gen)
    print(f"[rank {rank}] generating from a prompt of {prompt.shape[1]} tokens", flush=True)
    with torch.no_grad():
        if args.synced_gpus:
            out = engine.module.generate(prompt, max_length=32, do_sample=False, pad_token_id=0,
                                         eos_token_id=None, synced_gpus=True)
        else:
            out = engine.module.generate(prompt, max_length=32, do_sample=False, pad_token_id=0,
                                         eos_token_id=None)
    print(f"[rank {rank}] generated {out.shape[1] - prompt.shape[1]} new tokens", flush=True)
    # Wait for every rank before writing the predictions (a common pattern in eval scripts).
    torch.distributed.barrier()
    if rank == 0:
        print("all ranks finished generation", flush=True)


def generate_scenario(out: Path, synced: bool) -> c.Outcome:
    """Run the 2-rank generate, hanging or synced, and write the scenario folder."""
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", MODEL_CONFIG)
    argv = ["--worker", "--deepspeed_config", "ds_config.json", "--timeout", str(TIMEOUT_S)]
    if synced:
        argv.append("--synced_gpus")
    run = c.run_logged(c.Run("generate.log", c.deepspeed_cmd(SCRIPT, 2, argv)), out,
                       timeout=TIMEOUT_S * 6 + 120)
    log = c.read_log(out, "generate.log")
    if synced:
        c.require(run.returncode == 0 and "all ranks finished generation" in log,
                  "the synced_gpus=True twin did not finish")
        c.write_expected(out, symptoms=[], rules=[],
                         must_not=["hang", "gpu-oom", "cpu-oom", "launcher-nonzero-exit",
                                   "python-exception"], max_severity="warning", fate="healthy")
    else:
        c.require(run.returncode != 0 and not run.timed_out, "the hang did not end in a timeout error")
        # The script itself (passed with --script) shows the generate() call without synced_gpus.
        c.write_expected(out, symptoms=["hang"], rules=["DS107", "DS202"],
                         must_not=["gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss"],
                         must_not_rules=["DS105", "DS106"],
                         scripts=["scripts/scenarios/zero3_generate_hang.py"], fate="hung")
    return c.Outcome([run])


NOTES_COMMON = """
## Inputs
- `ds_config.json`: ZeRO stage 3, no optimizer (ZeRO-Inference style), fp32.
- `model_config.json`: the tiny GPT-2 config the model was built from (2 layers, 64 wide, vocab 256;
  random weights, nothing downloaded).
- Launched with the real `deepspeed` launcher on 2 ranks, CPU accelerator, gloo backend, with
  `deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=20))`.
- Nothing in DeepSpeed or Transformers was patched. DeepSpeed's logger is at INFO.
"""


def generate(out: Path) -> c.Outcome:
    """Driver for the hanging variant."""
    outcome = generate_scenario(out, synced=False)
    c.write_readme(out, NAME, "ZeRO-3 generate without synced_gpus: collective timeout", """
Two ranks run `model.generate(prompt, max_length=32)` on a GPT-2 sharded with ZeRO stage 3. Their
prompts have different lengths (10 and 24 tokens), so rank 1 needs 8 new tokens and rank 0 needs 22.
Under ZeRO-3 every forward all-gathers the weights from every rank: when rank 1 is done it leaves
`generate` and waits in `dist.barrier()`, while rank 0's next forward waits for rank 1's shard. After
the 20 s process-group timeout gloo raises on the waiting ranks and the launcher reports the failure.
Transformers only turns `synced_gpus` on by itself when it knows ZeRO-3 is active (through
`HfDeepSpeedConfig` / the Trainer); this script called `deepspeed.initialize` directly, as many
inference scripts do. On GPUs the same bug shows as an NCCL watchdog timeout after 30 minutes (see
`huggingface/trl#1726` in ../shared/real_logs). The twin `zero3_generate_synced` passes
`synced_gpus=True` and finishes.

A correct analysis reports the `hang` symptom (the gloo timeout) and the DS107 collective-timeout
finding, and, given the script (`--script scripts/scenarios/zero3_generate_hang.py`, listed under
`scripts` in expected.json), DS202: `generate()` without `synced_gpus` under ZeRO-3 on 2 ranks.
""" + NOTES_COMMON, outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
