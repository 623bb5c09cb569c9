"""Scenario: the desync of ``hang_desync_allreduce``, with PyTorch's Flight Recorder on.

The same tiny GPT-2 and ZeRO-2 run on 2 CPU ranks (gloo) under the ``deepspeed`` launcher, with the
same logging bug (an ``all_reduce`` only rank 0 enters, every 5 steps), and with
``TORCH_FR_BUFFER_SIZE=2000`` so that torch records every collective of every rank. gloo has no
watchdog that writes the recorder to disk on a timeout (ProcessGroupNCCL's does), so each rank
writes it itself when its collective raises: the bytes of
``torch._C._distributed_c10d._dump_fr_trace()``, the pickle NCCL's watchdog writes, to
``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (the file name torch's writer uses), then re-raises.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _lm  # noqa: E402

NAME = "hang_desync_fr_trace"
SCRIPT = Path(__file__).resolve()
TIMEOUT_S = 20
MEAN_EVERY = 5
TRACE_DIR = "fr_trace"
PREFIX = "nccl_trace_rank_"  # torch's default dump name (TORCH_NCCL_DEBUG_INFO_TEMP_FILE)


def worker() -> None:
    """One rank: ZeRO-2 steps; rank 0 alone all-reduces the loss every MEAN_EVERY steps; on the
    timeout each rank writes its Flight Recorder buffer."""
    import torch._C._distributed_c10d as c10d
    import torch.distributed as dist

    args, model = _lm.start_rank(with_timeout=True)
    rank = dist.get_rank()

    def mean_loss(step: int, engine, loss) -> None:
        if rank == 0 and step % MEAN_EVERY == 0:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            print(f"step {step}: mean loss over ranks = {mean.item() / dist.get_world_size():.4f}",
                  flush=True)

    try:
        _lm.train_loop(model, args.deepspeed_config, 4 * MEAN_EVERY, after_step=mean_loss)
    except Exception:
        path = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank)
        with open(path, "wb") as fh:
            fh.write(c10d._dump_fr_trace())
        print(f"rank {rank}: wrote the Flight Recorder buffer to {path}", flush=True)
        raise
    if rank == 0:
        print("training finished", flush=True)


def generate(out: Path) -> c.Outcome:
    """Run the desynchronized training with the Flight Recorder on; write the scenario folder."""
    traces = out / TRACE_DIR
    shutil.rmtree(traces, ignore_errors=True)
    traces.mkdir()
    env = c.launcher_env({"TORCH_FR_BUFFER_SIZE": "2000",
                          "TORCH_FR_DUMP_TEMP_FILE": f"{TRACE_DIR}/{PREFIX}"})
    run, log = _lm.run_two_ranks(out, SCRIPT, TIMEOUT_S, run_timeout=TIMEOUT_S * 6 + 120, env=env)
    c.require(run.returncode != 0 and not run.timed_out, "the hang did not end in an error")
    c.require(f"step {MEAN_EVERY}/" in log and "training finished" not in log,
              "the run did not stop at the desynchronizing step")
    dumps = sorted(p.name for p in traces.iterdir())
    c.require(dumps == [f"{PREFIX}0", f"{PREFIX}1"], f"not one dump per rank: {dumps}")
    c.write_expected(out, symptoms=["hang"], rules=["DS107"],
                     must_not=["gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss"],
                     must_not_rules=["DS105", "DS106"], fate="hung")
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "a collective only rank 0 enters, with Flight Recorder dumps", f"""
Run on {time.strftime('%Y-%m-%d %H:%M:%S %Z')} (when the run ended).

The run of `hang_desync_allreduce` (a tiny GPT-2, ZeRO-2, 2 CPU ranks with gloo, the real
`deepspeed` launcher; rank 0 alone all-reduces the loss every {MEAN_EVERY} steps, inside its
`if rank == 0:` print branch), with PyTorch's Flight Recorder on:
`TORCH_FR_BUFFER_SIZE=2000` in the ranks' environment.

`{TRACE_DIR}/{PREFIX}0` and `{PREFIX}1` are the ranks' Flight Recorder dumps: the bytes
`torch._C._distributed_c10d._dump_fr_trace()` returned (a pickle of plain dicts, lists,
strings and numbers, version "2.10", with stack frames), written by each rank when its collective
raised. gloo has no watchdog that dumps on a timeout (ProcessGroupNCCL's writes the same pickle to
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`); the script does it in its `except` and re-raises.
torch 2.13's own analyzer (`python -m torch.distributed.flight_recorder.fr_trace {TRACE_DIR}`)
stops on these files with `KeyError: ('0', 0)`: gloo records the default group's pg_config under
the name "" while the entries name it "0".

`dsdoctor analyze train.log --trace {TRACE_DIR}` (sample_check passes `--trace` for this folder)
reads the dumps as plain data only, matches each collective sequence id of the default group across
both ranks, and names the collective the ranks disagree on and the rank whose call site made no
earlier collective (rank 0's `all_reduce` in `mean_loss`).

A correct analysis reports the `hang` symptom, DS107, the verdict `hung` (exit 1), and rank 0 as the
culprit. Nothing in DeepSpeed or torch was patched; DeepSpeed's logger is at INFO.
""", outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, worker)
