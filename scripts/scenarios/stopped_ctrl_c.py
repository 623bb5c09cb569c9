"""Scenario: a training run stopped with Ctrl-C in the terminal after 5 steps.

Ctrl-C in a terminal makes the kernel send SIGINT to the whole foreground process group: the
``deepspeed`` command, its ``deepspeed.launcher.launch`` child and every rank at once. The driver
does the same with ``os.killpg(pgid, SIGINT)`` (the launch runs in its own session, so the group
holds exactly the launcher's processes). Python turns SIGINT into ``KeyboardInterrupt`` in the ranks
and in the runner; the launcher's handler terminates the ranks and logs
``Main process received SIGINT, exiting``. The run (see ``_signals.py``) is otherwise healthy.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _signals  # noqa: E402

NAME = "stopped_ctrl_c"
SCRIPT = Path(__file__).resolve()


def ctrl_c(proc) -> dict:
    """What the terminal does on Ctrl-C: SIGINT to every process of the foreground group."""
    pgid = os.getpgid(proc.pid)
    members = c.launcher_processes(proc)
    os.killpg(pgid, signal.SIGINT)
    return {"pgid": pgid, "signal": "SIGINT",
            "pids": [proc.pid] + ([members["launch"].pid] if members["launch"] else [])
            + [p.pid for _, p in sorted(members["ranks"].items())]}


def generate(out: Path) -> c.Outcome:
    """Run, Ctrl-C the process group after 5 steps, and write the scenario folder."""
    run, fired = _signals.run(out, SCRIPT, ctrl_c)
    log = c.read_log(out, "train.log")
    c.require("KeyboardInterrupt" in log, "no KeyboardInterrupt in the log")
    _signals.write_stopped_expected(out)
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "training stopped with Ctrl-C (SIGINT to the process group)", f"""
Run on {fired.get('at', '?')} (when the driver sent the signal).

A healthy training run that a person stops with Ctrl-C: after the log showed
`{fired.get('after', '?')}`, the scenario driver sent **SIGINT** to the launch's whole process group
(pgid {fired.get('pgid', '?')}: the `deepspeed` command, `deepspeed.launcher.launch` and both ranks,
pids {', '.join(str(p) for p in fired.get('pids', []))}) with `os.killpg(pgid, signal.SIGINT)`, which
is what a terminal does on Ctrl-C: the kernel signals every process of the foreground group at once.
Nothing failed inside the run.

What the log shows (the end of `train.log`): the progress lines, then, interleaved as the processes
wrote them, Python's `KeyboardInterrupt` tracebacks from the ranks (wherever each was: in the
step's pause or inside a collective) and from the `deepspeed` runner (waiting on its child in
`runner.py`), and the launcher's handler: `Killing subprocess <pid>` for each rank and
`Main process received SIGINT, exiting`. The launcher exits 1. The `deepspeed` command itself has
no SIGINT handler on a single node (`runner.py` installs one only for multi-node pdsh launches): it
dies of its `KeyboardInterrupt` in `result.wait()`, and Python then ends it with SIGINT, so its exit
status is -2 (130 in a shell).

A correct analysis calls the run **stopped** (by Ctrl-C / SIGINT, after step {_signals.AFTER_STEPS}), exit 1:
not healthy, not a hang, and not a crash of the training code (the tracebacks are the interrupt's).
The symptom is `run-stopped` (issue 19), listed in `expected.json`.
""" + _signals.NOTES_COMMON, outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, _signals.worker)
