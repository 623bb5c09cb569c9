"""A user's hand-written DeepSpeed training loop for a tiny GPT-2 causal LM (shared by scenarios)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TINY_GPT2 = {
    "vocab_size": 128,
    "n_positions": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 2,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


#: ZeRO-2 with AdamW at a sane rate, DeepSpeed's own step lines off: the runs that go well until
#: something outside the training code ends them (a desync, a signal, a kill).
ZERO2_CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 100,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 2},
}


def start_rank(with_timeout: bool = False) -> tuple[Any, Any]:
    """A scenario rank's start: its arguments, DeepSpeed's logger at INFO, seed 0, the gloo process
    group (``with_timeout``: its collectives time out after ``args.timeout`` seconds), and the
    tiny GPT-2. Returns (args, model)."""
    from datetime import timedelta

    import _common as c
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import deepspeed

    args = c.worker_args()
    c.set_deepspeed_log_level("info")
    torch.manual_seed(0)
    if with_timeout:
        deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=args.timeout))
    else:
        deepspeed.init_distributed(dist_backend="gloo")
    return args, GPT2LMHeadModel(GPT2Config(**TINY_GPT2))


def model_config(**overrides: Any) -> dict[str, Any]:
    """The tiny GPT-2's config.json as the scenarios write it (``model_config.json``, for --model)."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **TINY_GPT2, **overrides,
            "torch_dtype": "float32"}


def lm_batches(rank: int, batch: int = 8, seq: int = 32):
    """Endless learnable synthetic token batches (noisy arithmetic sequences), BOS first."""
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    while True:
        start = torch.randint(1, 128, (batch, 1), generator=g)
        step = torch.randint(1, 4, (batch, 1), generator=g)
        ids = (start + step * torch.arange(seq - 1)) % 127 + 1
        yield torch.cat([torch.zeros(batch, 1, dtype=torch.long), ids], dim=1)  # token 0 = BOS


def train_loop(model: Any, ds_config: str, steps: int, print_every: int = 1,
               resume_from: str | None = None, pause: float = 0.0,
               after_step: Callable[[int, Any, Any], None] | None = None) -> Any:
    """deepspeed.initialize + the usual forward/backward/step loop; rank 0 prints the loss.

    ``resume_from``: a checkpoint directory loaded before the first step. ``pause``: seconds each
    step sleeps after printing (a run that must last until the driver signals it idles instead of
    burning the shared CPU). ``after_step(step, engine, loss)``: the scenario's own code after each
    step (e.g. a collective only one rank enters). Returns the engine (scenarios save a checkpoint
    with it)."""
    import time

    import torch

    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config)
    if resume_from is not None:
        engine.load_checkpoint(resume_from)
    rank = torch.distributed.get_rank()
    batches = lm_batches(rank)
    for step in range(1, steps + 1):
        ids = next(batches)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        if rank == 0 and step % print_every == 0:
            print(f"step {step}/{steps}: loss = {loss.item():.4f}", flush=True)
        if after_step is not None:
            after_step(step, engine, loss)
        if pause:
            time.sleep(pause)
    return engine


def run_two_ranks(out: Any, script: Any, timeout_s: int, run_timeout: float,
                  env: dict[str, str] | None = None) -> tuple[Any, str]:
    """Write ZERO2_CONFIG and the model config into ``out``, run ``script --worker`` on 2 ranks
    under the deepspeed launcher with a process-group timeout of ``timeout_s``, and return
    (the run, its train.log). DeepSpeed's shared-memory buffers of the run are removed."""
    import _common as c  # noqa: PLC0415 - the scenarios' own helpers, next to this file

    c.write_json(out / "ds_config.json", ZERO2_CONFIG)
    c.write_json(out / "model_config.json", model_config())
    port = c.free_port()
    argv = ["--worker", "--deepspeed_config", "ds_config.json", "--timeout", str(timeout_s)]
    try:
        run = c.run_logged(c.Run("train.log", c.deepspeed_cmd(script, 2, argv, port=port)), out,
                           env=env, timeout=run_timeout)
    finally:
        c.remove_shm_buffers(port)
    return run, c.read_log(out, "train.log")
