"""Scenario: a training run stopped by SIGTERM sent to DeepSpeed's launcher after 5 steps.

What ``kill PID`` (SIGTERM) of the launcher does, or a scheduler or container runtime that
terminates it: ``deepspeed.launcher.launch`` catches the signal, terminates its ranks and logs
``Main process received SIGTERM, exiting``. The run (see ``_signals.py``) is otherwise healthy.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _signals  # noqa: E402

NAME = "stopped_sigterm"
SCRIPT = Path(__file__).resolve()


def sigterm_launcher(proc) -> dict:
    """``kill <pid>`` of the per-node launcher (deepspeed.launcher.launch)."""
    launch = c.launcher_processes(proc)["launch"]
    c.require(launch is not None, "no deepspeed.launcher.launch process found")
    os.kill(launch.pid, signal.SIGTERM)
    return {"pid": launch.pid, "signal": "SIGTERM"}


def generate(out: Path) -> c.Outcome:
    """Run, SIGTERM the launcher after 5 steps, and write the scenario folder."""
    run, fired = _signals.run(out, SCRIPT, sigterm_launcher)
    log = c.read_log(out, "train.log")
    c.require("Main process received SIGTERM" in log, "the launcher did not log the SIGTERM")
    _signals.write_stopped_expected(out)
    outcome = c.Outcome([run])
    c.write_readme(out, NAME, "training stopped by SIGTERM to the launcher", f"""
Run on {fired.get('at', '?')} (when the driver sent the signal).

A healthy training run that something outside it stops: after the log showed
`{fired.get('after', '?')}`, the scenario driver sent **SIGTERM** to the per-node launcher
(`python -u -m deepspeed.launcher.launch ...`, pid {fired.get('pid', '?')}) with
`os.kill(pid, signal.SIGTERM)`, as `kill <pid>`, a scheduler or a container runtime stopping the job
would. Nothing failed inside the run.

What the log shows (the end of `train.log`): the progress lines, then the launcher's handler:
`Killing subprocess <pid>` for each rank (it terminates their process trees with SIGTERM; Python
does not catch SIGTERM, so the ranks die without a traceback) and
`Main process received SIGTERM, exiting`; the launcher exits 1, and the `deepspeed` command with it.
No `exits with return code` line: no rank had failed before the signal.

A correct analysis calls the run **stopped** (by SIGTERM, after step {_signals.AFTER_STEPS}), exit 1: not
healthy (it did not finish), not a hang, not an out-of-memory kill. The symptom is `run-stopped`
(issue 19), listed in `expected.json`.

**Why the signal goes to `deepspeed.launcher.launch`, not to the `deepspeed` command.** Tried
once by hand on this machine (DeepSpeed 0.19.8, not kept as a sample): SIGTERM to the `deepspeed`
command's pid on a single node ends only that process (status -15; `runner.py` installs its
SIGINT/SIGTERM handler only for multi-node pdsh launches) and prints nothing; its
`deepspeed.launcher.launch` child and both ranks keep training, orphaned, and keep writing
`step N` lines into the log. Stopping a run with `kill <pid>` therefore has to target the launcher
(or the whole process group, as Ctrl-C and schedulers do).
""" + _signals.NOTES_COMMON, outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, _signals.worker)
