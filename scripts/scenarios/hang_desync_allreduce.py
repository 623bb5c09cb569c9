"""Scenario: a collective only rank 0 enters -> the ranks desynchronize and the run hangs.

A tiny GPT-2 (random weights, nothing downloaded) is trained with ZeRO stage 2 on 2 CPU ranks under
the ``deepspeed`` launcher; rank 0 prints the loss each step. Every 5 steps the script averages the
loss over the ranks for its log line, but the ``all_reduce`` sits inside ``if rank == 0:`` with the
print (a common logging bug): rank 0 waits in that all-reduce while rank 1 goes on to the next
step's forward and backward, whose gradient reduction waits for rank 0. Neither collective can
finish; after the process-group timeout (short, set with ``deepspeed.init_distributed(timeout=...)``)
gloo raises on the waiting ranks, they die, and the launcher reports it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "hang_desync_allreduce"
SCRIPT = Path(__file__).resolve()
TIMEOUT_S = 20  # process-group timeout: short so that the hang turns into an error quickly
MEAN_EVERY = 5  # the step whose (rank-0-only) mean-loss all-reduce desynchronizes the ranks


def worker() -> None:
    """One rank: ZeRO-2 steps; rank 0 alone all-reduces the loss every MEAN_EVERY steps."""
    import torch.distributed as dist

    args, model = _lm.start_rank(with_timeout=True)
    rank = dist.get_rank()

    def mean_loss(step: int, engine, loss) -> None:
        # The bug: the collective is inside the rank-0 branch that prints; rank 1 never joins it.
        if rank == 0 and step % MEAN_EVERY == 0:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            print(f"step {step}: mean loss over ranks = {mean.item() / dist.get_world_size():.4f}",
                  flush=True)

    _lm.train_loop(model, args.deepspeed_config, 4 * MEAN_EVERY, after_step=mean_loss)
    if rank == 0:
        print("training finished", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run the desynchronized training and write the scenario folder."""
    run, log = _lm.run_two_ranks(out, SCRIPT, TIMEOUT_S, run_timeout=TIMEOUT_S * 6 + 120)
    c.require(run.returncode != 0 and not run.timed_out, "the hang did not end in an error")
    c.require(f"step {MEAN_EVERY}/" in log and "training finished" not in log,
              "the run did not stop at the desynchronizing step")
    c.require("Timed out" in log or "timed out" in log, "no timeout in the log")
    c.write_expected(out, symptoms=["hang"], rules=["DS107"],
                     must_not=["gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss"],
                     must_not_rules=["DS105", "DS106"], fate="hung")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "a collective only rank 0 enters: desynchronized ranks time out", f"""
Run on {time.strftime('%Y-%m-%d %H:%M:%S %Z')} (when the run ended).

A tiny GPT-2 (`model_config.json`: 2 layers, 64 wide, vocab 128; random weights, nothing downloaded)
trained with ZeRO stage 2 (`ds_config.json`), AdamW, fp32, on 2 ranks (CPU accelerator, gloo) with
the real `deepspeed` launcher; rank 0 prints `step N/20: loss = X` after each step. Every
{MEAN_EVERY} steps the script averages the loss over the ranks for a log line, but it does so inside
the rank-0 branch that prints:

```python
if rank == 0 and step % {MEAN_EVERY} == 0:
    mean = loss.detach().clone()
    dist.all_reduce(mean)          # only rank 0 gets here
    print(f"step {{step}}: mean loss over ranks = ...")
```

At step {MEAN_EVERY} rank 0 waits in that all-reduce while rank 1 goes on to step {MEAN_EVERY + 1}'s
forward and backward, whose ZeRO-2 gradient reduction waits for rank 0. The ranks are desynchronized:
each waits in a collective the other never enters. The process group was created with
`deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds={TIMEOUT_S}))`, so after
{TIMEOUT_S} s gloo raises (on GPUs with NCCL the same bug is a watchdog timeout after 10-30 minutes, or
a silent hang). Rank 0, which began waiting first, times out
(`Timed out waiting {TIMEOUT_S * 1000}ms for recv operation to complete`) and dies; rank 1, still waiting, then
loses its peer (`Connection closed by peer ... This is typically caused by a remote worker
crashing`), and the launcher reports the exit code.

The log is the launcher's output as printed: the progress lines up to step {MEAN_EVERY}, both ranks'
tracebacks (`[rank0]:` / `[rank1]:` prefixes), and the launcher's `Killing subprocess` /
`exits with return code` lines.

A correct analysis reports the `hang` symptom (the gloo timeout), the DS107 collective-timeout
finding, and the verdict `hung` (exit 1); nothing about memory. Nothing in DeepSpeed was patched;
its logger is at INFO.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
