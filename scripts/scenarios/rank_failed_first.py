"""Scenario: one rank fails on its own exception while the other goes on into the next collective.

A tiny GPT-2 (random weights, nothing downloaded) is trained with ZeRO stage 2 on 2 CPU ranks under
the ``deepspeed`` launcher. After step FAIL_AT rank 1 raises in the user's own code (a data sanity
check that fails on that rank's batch, as a corrupt shard does); rank 0, which saw nothing wrong,
goes on into step FAIL_AT + 1, whose ZeRO-2 gradient all-reduce waits for rank 1. Rank 1's process
exits, its gloo sockets close, rank 0's all-reduce fails with the lost peer, and the launcher
reports the exit. The rank that failed first is rank 1; rank 0 only waited for it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "rank_failed_first"
SCRIPT = Path(__file__).resolve()
TIMEOUT_S = 20  # process-group timeout: short, so that a wait that never ends becomes an error
FAIL_AT = 5  # the step after which rank 1's check fails
VICTIM = 1


def check_batch(step: int, rank: int) -> None:
    """The user's check of the next batch; on rank VICTIM it fails after step FAIL_AT."""
    if rank == VICTIM and step == FAIL_AT:
        raise ValueError(f"batch {step + 1} on rank {rank}: token id 131 >= vocab_size 128 "
                         "(corrupt shard?)")


def worker() -> None:
    """One rank: ZeRO-2 steps; rank 1's batch check raises after step FAIL_AT."""
    import torch.distributed as dist

    args, model = _lm.start_rank(with_timeout=True)
    rank = dist.get_rank()
    _lm.train_loop(model, args.deepspeed_config, 4 * FAIL_AT,
                   after_step=lambda step, engine, loss: check_batch(step, rank))
    if rank == 0:
        print("training finished", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run the training whose rank 1 fails and write the scenario folder."""
    run, log = _lm.run_two_ranks(out, SCRIPT, TIMEOUT_S, run_timeout=TIMEOUT_S * 6 + 120)
    c.require(run.returncode != 0 and not run.timed_out, "the run did not end in an error")
    c.require(f"step {FAIL_AT}/" in log and "training finished" not in log,
              "the run did not stop after the failing step")
    c.require("[rank1]: ValueError: batch" in log, "rank 1's exception is not in the log")
    c.write_expected(out, symptoms=["python-exception"], rules=["DS113"],
                     must_not=["hang", "gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss"],
                     must_not_rules=["DS105", "DS106", "DS107"], fate="failed")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "one rank fails first; the other only waits for it", f"""
Run on {time.strftime('%Y-%m-%d %H:%M:%S %Z')} (when the run ended).

A tiny GPT-2 (`model_config.json`: 2 layers, 64 wide, vocab 128; random weights, nothing downloaded)
trained with ZeRO stage 2 (`ds_config.json`), AdamW, fp32, on 2 ranks (CPU accelerator, gloo) with
the real `deepspeed` launcher; rank 0 prints `step N/20: loss = X` after each step. After each step
the script checks the next batch, and on rank {VICTIM} that check fails after step {FAIL_AT}:

```python
if rank == {VICTIM} and step == {FAIL_AT}:
    raise ValueError(f"batch {{step + 1}} on rank {{rank}}: token id 131 >= vocab_size 128 (corrupt shard?)")
```

Rank 0 saw nothing wrong and went on into step {FAIL_AT + 1}, whose ZeRO-2 gradient all-reduce waits
for rank {VICTIM}. Rank {VICTIM}'s process exits with its traceback (`[rank1]:` prefix), its gloo
sockets close, and rank 0's all-reduce fails with the lost peer (`Connection closed by peer ... This
is typically caused by a remote worker crashing`). The process group's timeout
(`deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds={TIMEOUT_S}))`) is short
so that a wait that never ends would turn into an error quickly; on GPUs with NCCL rank 0 would
instead wait in the watchdog until its timeout (10-30 minutes) unless the launcher ended it first.
DeepSpeed's launcher then terminates the survivor and logs `exits with return code = 1`; that
line names the last command it spawned (`--local_rank=1` here, whichever rank failed), not the failed
one.

A correct analysis names rank {VICTIM} as the rank that failed first, with its exception and the
user's frame (`check_batch`), says that rank 0 only waited (its lost peer is the consequence), and
calls the run failed (exit 1); nothing about memory or the loss scaler. Nothing in DeepSpeed was
patched; its logger is at INFO.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
