"""Scenario: one rank killed with ``kill -9`` (SIGKILL) while the host has RAM to spare.

After 5 steps the driver sends SIGKILL to rank 1's Python process (not the launcher), as a person
typing ``kill -9 PID``, a health checker or a preemption agent would. The kernel's OOM killer plays
no part: the driver reads MemAvailable at that moment and the README states it. DeepSpeed's
launcher notices the dead rank within a second, terminates the other one and logs
``exits with return code = -9``. The run (see ``_signals.py``) is otherwise healthy.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import _signals  # noqa: E402

NAME = "killed_sigkill"
SCRIPT = Path(__file__).resolve()
VICTIM = 1  # local rank killed


def kill_rank(proc) -> dict:
    """``kill -9 <pid>`` of one rank's Python process."""
    import psutil

    ranks = c.launcher_processes(proc)["ranks"]
    c.require(VICTIM in ranks, f"rank {VICTIM} not found")
    victim = ranks[VICTIM]
    rss = victim.memory_info().rss
    os.kill(victim.pid, signal.SIGKILL)
    return {"pid": victim.pid, "signal": "SIGKILL", "rss_bytes": rss,
            "ram_total_bytes": psutil.virtual_memory().total}


def generate(out: Path) -> c.Outcome:
    """Run, SIGKILL rank 1 after 5 steps, and write the scenario folder."""
    run, fired = _signals.run(out, SCRIPT, kill_rank)
    log = c.read_log(out, "train.log")
    c.require("exits with return code = -9" in log, "the launcher did not report -9")
    c.require(fired["ram_available_bytes"] > 2 * 1024**3, "less than 2 GiB RAM available: not 'RAM to spare'")
    # Not an OOM: nothing in the log may say so (the kernel's OOM killer never ran).
    c.require(not any(w in log for w in ("Out of memory", "oom-kill", "OOM", "MemoryError",
                                          "Cannot allocate memory")), "OOM evidence in the log")
    c.write_expected(out, symptoms=[], rules=[],
                     must_not=["hang", "gpu-oom", "fp16-overflow", "nan-loss", "loss-scale-collapse"],
                     must_not_rules=["DS105", "DS107"], fate="killed")
    outcome = c.Outcome([run])
    gib = 1024**3
    c.write_readme(out, NAME, "one rank killed by kill -9 (SIGKILL) with RAM to spare", f"""
Run on {fired.get('at', '?')} (when the driver sent the signal).

A healthy training run in which one rank is killed from outside: after the log showed
`{fired.get('after', '?')}`, the scenario driver sent **SIGKILL** to rank {VICTIM}'s Python process
(pid {fired.get('pid', '?')}, `--local_rank={VICTIM}`; not the launcher) with
`os.kill(pid, signal.SIGKILL)`, which is what `kill -9 <pid>` does.

**Not an out-of-memory kill.** At that moment (`/proc/meminfo`, read by the driver just before the
signal) the host had **{fired.get('ram_available_bytes', 0) / gib:.1f} GiB available** of
{fired.get('ram_total_bytes', 0) / gib:.1f} GiB, and the killed rank's RSS was
{fired.get('rss_bytes', 0) / 2**20:.0f} MiB. The kernel's OOM killer did not run, and nothing in the
log speaks of memory. The same log lines follow any SIGKILL: the OOM killer, a cgroup limit, a
scheduler's preemption or `scancel`, a health checker, a person; only outside evidence
(`dmesg -T | grep -i oom`, `sacct`, the scheduler's records) tells them apart.

What the log shows (the end of `train.log`): the progress lines, then DeepSpeed's launcher, which
polls its ranks each second, finds rank {VICTIM} dead and runs its handler: `Killing subprocess <pid>`
for each rank (terminating the survivor) and
`[ERROR] [launch.py:...:sigkill_handler] [...'--local_rank={VICTIM}'...] exits with return code = -9`.
The killed rank itself printed nothing (SIGKILL cannot be caught); depending on where the survivor
was, it may print a gloo error about the lost peer before it is terminated. The launcher then
exits with `sys.exit(-9)`, which the OS reports as status 247 (-9 modulo 256), and the `deepspeed`
command passes that on: a shell sees 247, not 137 (128 + 9) as for a process killed by the signal.

A correct analysis calls the run **killed** (SIGKILL, rank {VICTIM}, after step {_signals.AFTER_STEPS}), exit 1,
and does not call it a host out-of-memory kill without OOM evidence; it says SIGKILL, lists the
usual causes and how to tell them apart. For now `expected.json` lists no symptom kind (the kinds
for a SIGKILL are being reworked in issue 19) and does not list `cpu-oom` or DS106 under
`must_not` (dsdoctor reports a -9 exit as `cpu-oom` today); the verdict (`fate: killed`) is what
it checks.
""" + _signals.NOTES_COMMON, outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, _signals.worker)
