"""Scenario: one rank stalls in its data loader longer than the collective timeout.

A tiny GPT-2 (random weights, nothing downloaded) is trained with ZeRO stage 2 on 2 CPU ranks under
the ``deepspeed`` launcher, fed by a ``torch.utils.data.DataLoader`` (``num_workers=0``: the batch
is fetched in the rank's own process); after fetching a batch each rank all-reduces its token count
(the default process group, whose timeout ``init_distributed`` sets). On rank 1 one sample's
``__getitem__`` stalls for STALL_S seconds (a slow network filesystem, a hung remote read), longer
than that timeout. Rank 0 gets its batch and waits in the token all-reduce for rank 1, which is in
no collective; after the timeout gloo raises on rank 0, it dies, and the launcher terminates rank 1
while it still sleeps in its data loader, so rank 1 prints nothing.

(The token all-reduce is what makes the short timeout apply: DeepSpeed's ZeRO gradient reduction
runs on process groups made with ``dist.new_group``, which take torch's default timeout of 30
minutes, not the one given to ``init_distributed``.)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "dataloader_stall"
SCRIPT = Path(__file__).resolve()
TIMEOUT_S = 20  # process-group timeout
STALL_AT = 5  # the step whose batch rank 1 stalls on
STALL_S = 3 * TIMEOUT_S  # longer than the timeout: rank 0 gives up first
BATCH = 8
SEQ = 32


def worker() -> None:
    """One rank: ZeRO-2 steps over a DataLoader; rank 1's sample for step STALL_AT stalls."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    import deepspeed

    args, model = _lm.start_rank(with_timeout=True)
    rank = dist.get_rank()

    class TokenShard(Dataset):
        """Noisy arithmetic token sequences; reading sample ``i`` is where a slow disk would wait."""

        def __init__(self, n: int) -> None:
            self.rows = next(_lm.lm_batches(rank, batch=n, seq=SEQ))

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int):
            if rank == 1 and i == (STALL_AT - 1) * BATCH:
                time.sleep(STALL_S)  # the read that hangs
            return self.rows[i]

    steps = 4 * STALL_AT
    loader = DataLoader(TokenShard(steps * BATCH), batch_size=BATCH, shuffle=False, num_workers=0)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.deepspeed_config)
    for step, ids in enumerate(loader, start=1):
        # the batch's tokens over all ranks (for per-token loss normalization and the progress
        # line): a collective on the default group, whose timeout init_distributed set
        tokens = torch.tensor([ids.numel()])
        dist.all_reduce(tokens)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        if rank == 0:
            print(f"step {step}/{steps}: loss = {loss.item():.4f}", flush=True)
    if rank == 0:
        print("training finished", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run the training whose rank 1 stalls in its data loader and write the scenario folder."""
    run, log = _lm.run_two_ranks(out, SCRIPT, TIMEOUT_S, run_timeout=STALL_S * 3 + 120)
    c.require(run.returncode != 0 and not run.timed_out, "the stall did not end in an error")
    c.require(f"step {STALL_AT - 1}/" in log and f"step {STALL_AT}/" not in log,
              "the run did not stop at the stalled step")
    c.require("Timed out" in log or "timed out" in log, "no timeout in the log")
    c.write_expected(out, symptoms=["hang"], rules=["DS107"],
                     must_not=["gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss"],
                     must_not_rules=["DS105", "DS106"], fate="hung")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "one rank stalls in its data loader past the collective timeout", f"""
Run on {time.strftime('%Y-%m-%d %H:%M:%S %Z')} (when the run ended).

A tiny GPT-2 (`model_config.json`: 2 layers, 64 wide, vocab 128; random weights, nothing downloaded)
trained with ZeRO stage 2 (`ds_config.json`), AdamW, fp32, on 2 ranks (CPU accelerator, gloo) with
the real `deepspeed` launcher, fed by a `torch.utils.data.DataLoader` (batch {BATCH},
`num_workers=0`, so each batch is read in the rank's own process); after fetching its batch each
rank all-reduces the batch's token count (`dist.all_reduce(tokens)`, for per-token loss
normalization), and rank 0 prints `step N/20: loss = X` after each step. On rank 1, reading the
first sample of step {STALL_AT}'s batch stalls for {STALL_S} s (a hung read from a network
filesystem looks the same):

```python
def __getitem__(self, i):
    if rank == 1 and i == {(STALL_AT - 1) * BATCH}:
        time.sleep({STALL_S})   # the read that hangs
    return self.rows[i]
```

Rank 0 reads its batch and waits in the token all-reduce for rank 1, which is in no collective: it
is still in its data loader. The process group was created with
`deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds={TIMEOUT_S}))`, so after
{TIMEOUT_S} s gloo raises on rank 0 (`Timed out waiting {TIMEOUT_S * 1000}ms for recv operation to
complete`), rank 0 dies, and DeepSpeed's launcher terminates rank 1 (SIGTERM) while it still sleeps.
Rank 1 prints nothing at all: no timeout (it never entered the collective), no lost peer, no
traceback (SIGTERM's default action ends a Python process without one). The launcher's
`exits with return code = 1` line names the last command it spawned (`--local_rank=1`), not the
rank that failed (rank 0 here). (The token all-reduce runs on the default process group, whose
timeout `init_distributed` sets; DeepSpeed's ZeRO gradient reduction runs on groups made with
`dist.new_group`, which keep torch's default of 30 minutes, so a stall that reaches it waits that
long.)

A correct analysis reports the `hang` symptom (the gloo timeout), the DS107 collective-timeout
finding and the verdict `hung` (exit 1), names rank 1 as the rank the others waited for (it was in
no collective: its silence while rank 0 timed out says so; where it was, only its stack shows, which
the log does not have), and does not advise only a longer timeout. Nothing in DeepSpeed was patched;
its logger is at INFO.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
