"""Shared by the scenarios in which something outside the run ends it: a signal after N steps.

The run is an ordinary one (a tiny GPT-2, ZeRO stage 2, 2 CPU ranks, gloo, the ``deepspeed``
launcher), long enough to still be training when the signal comes: rank 0 prints
``step N/200: loss = X`` after each step, and each step then pauses a little (as a data loader
would) so the run idles on the shared CPU instead of racing. The driver watches the log and, at the
``AFTER_STEPS``-th progress line, does what the scenario is about (SIGTERM to the launcher, Ctrl-C
to the terminal's process group, ``kill -9`` of one rank). Nothing is printed into the log by the
driver; every line in it is DeepSpeed's, torch's, Python's or the script's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c
import _lm

STEPS = 200  # never reached: the signal comes first
PAUSE_S = 0.5  # per step, after the print
AFTER_STEPS = 5  # the driver acts once the log shows this many progress lines
PROGRESS = r"^step \d+/\d+: loss = "

CONFIG = _lm.ZERO2_CONFIG


def write_stopped_expected(out: Path) -> None:
    """expected.json of a run a signal stopped: run-stopped, exit 1, no failure of its own."""
    c.write_expected(out, symptoms=["run-stopped"], rules=[],
                     must_not=["hang", "gpu-oom", "cpu-oom", "fp16-overflow", "nan-loss",
                               "loss-scale-collapse"],
                     must_not_rules=["DS105", "DS106", "DS107"], fate="stopped")


def worker() -> None:
    """One rank: ZeRO-2 training of the tiny GPT-2 until something stops it."""
    import torch

    args, model = _lm.start_rank()
    _lm.train_loop(model, args.deepspeed_config, STEPS, pause=PAUSE_S)
    if torch.distributed.get_rank() == 0:
        print("training finished", flush=True)


def run(out: Path, script: Path, action: Callable[[Any], dict[str, Any]]) -> tuple[c.Run, dict[str, Any]]:
    """Launch the training, let ``action`` act after AFTER_STEPS progress lines, wait for the end.

    Returns the run and what the action did (plus ``after``: the last progress line seen then, and
    ``ram_available_bytes``: MemAvailable at that moment). Fails the regeneration if the action
    never fired.
    """
    c.write_json(out / "ds_config.json", CONFIG)
    c.write_json(out / "model_config.json", _lm.model_config())
    port = c.free_port()

    def act(proc: Any) -> dict[str, Any]:
        ram = c.free_ram_bytes()
        done = action(proc)
        done["ram_available_bytes"] = ram
        done["at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        return done

    trigger = c.StepTrigger(out / "train.log", PROGRESS, AFTER_STEPS, act)
    argv = ["--worker", "--deepspeed_config", "ds_config.json"]
    try:
        r = c.run_logged(c.Run("train.log", c.deepspeed_cmd(script, 2, argv, port=port)), out,
                         timeout=300, watch=trigger)
    finally:
        c.remove_shm_buffers(port)
    c.require(trigger.fired is not None, "the run ended before the driver acted")
    c.require(not r.timed_out, "the run outlived the driver's timeout after the signal")
    c.require("training finished" not in c.read_log(out, "train.log"), "the run finished anyway")
    return r, trigger.fired or {}


NOTES_COMMON = f"""
## The run
A tiny GPT-2 (`model_config.json`: 2 layers, 64 wide, vocab 128; random weights, nothing
downloaded) trained with ZeRO stage 2 (`ds_config.json`), AdamW, fp32, on 2 ranks (CPU accelerator,
gloo backend) with the real `deepspeed` launcher, for {STEPS} steps that it never reaches; rank 0
prints `step N/{STEPS}: loss = X` after each step, and each step then sleeps {PAUSE_S} s (as if
waiting on a data loader) so that the run idles on the shared 2-core machine. The driver
(`scripts/scenarios/_signals.py`) watches the log and acts once it shows {AFTER_STEPS} progress lines.
It writes nothing into the log. Nothing in DeepSpeed was patched; its logger is at INFO.

The processes, as `ps --forest` shows them: the `deepspeed` command (DeepSpeed's runner,
`deepspeed/launcher/runner.py`) starts `python -u -m deepspeed.launcher.launch ...` (the per-node
launcher, `launch.py`, whose lines carry `launch.py:` in the log), which spawns one Python process
per rank (`--local_rank=0`, `--local_rank=1`). `launch.py` installs a handler for SIGINT and SIGTERM
(`sigkill_handler`) that terminates every rank's process tree (SIGTERM, then SIGKILL after 30 s)
and, when a rank had exited non-zero, logs `exits with return code = N`; otherwise
`Main process received SIGINT/SIGTERM, exiting`. It also polls its ranks each second and calls the
same handler when one has exited non-zero.
"""
