"""How the ranks are started outside the plain launcher (the Transformers DeepSpeed guide,
"SLURM" and "Notebook"): a SLURM job that starts several per-node launchers on one node (DS229),
and a script that fakes the launcher's environment by hand on a machine with several GPUs (DS230).

Both read the scripts given with ``--script`` as text (never run): ``#SBATCH`` directives and
launch commands through ``facts/launch.py``, ``os.environ[...] = ...`` assignments by regex.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import env_gpus, finding
from dsdoctor.facts.context import Context
from dsdoctor.facts.launch import is_shell_script, sbatch_options, spawning_launch
from dsdoctor.facts.run_sources import launches
from dsdoctor.model import Evidence, Finding

# ------------------------------------------------------------- DS229 SLURM tasks per node

_SRUN = re.compile(r"(?:^|[\s;&|(])srun\s")
_SRUN_ONE_PER_NODE = re.compile(r"\bsrun\b[^'\"]*?--ntasks-per-node(?:=|\s+)1\b")


def slurm_tasks_per_node(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS229: ``#SBATCH --ntasks-per-node`` above 1 while each task runs a per-node launcher."""
    for path, text in ctx.script_sources.items():
        if not is_shell_script(path, text):
            continue
        opts = sbatch_options(text)
        tasks = opts.get("ntasks-per-node")
        if tasks is None or not tasks[0].isdigit() or int(tasks[0]) <= 1:
            continue
        spawn = spawning_launch(text)
        if spawn is None:
            continue  # `srun python train.py`: one task per GPU is SLURM's own way, and right
        n, (line, cmd) = int(tasks[0]), spawn
        if not _SRUN.search(cmd) or _SRUN_ONE_PER_NODE.search(cmd):
            # without srun the batch script (one copy, on the first node) runs the launcher once;
            # srun's own --ntasks-per-node=1 overrides the #SBATCH value for that step
            continue
        launcher = next(w for w in ("torch.distributed.run", "torch.distributed.launch", "torchrun",
                                    "accelerate launch", "deepspeed") if w in cmd)
        yield finding(
            f"{path}:{tasks[1]} asks SLURM for --ntasks-per-node={n}, and each task runs "
            f"{launcher} ({path}:{line}), which itself starts one process per GPU: every node then "
            f"runs {n} launchers that all claim the same GPUs, node_rank ($SLURM_PROCID counts "
            f"tasks, not nodes) and rendezvous port, which can end in a hang at rendezvous, "
            f"'Address already in use' or duplicate ranks. The Transformers guide: "
            f"--ntasks-per-node=1 is crucial, one launcher per node.",
            fix=f"set #SBATCH --ntasks-per-node=1 at {path}:{tasks[1]} (give the node's cores with "
                f"--cpus-per-task); or drop {launcher} and start one task per GPU with "
                f"`srun python train.py` (then --ntasks-per-node equals the GPUs per node)",
            evidence=(Evidence(path, tasks[1], f"#SBATCH --ntasks-per-node={n}"),
                      Evidence(path, line, cmd[:200])))


# -------------------------------------------------- DS230 launcher environment faked by hand

_ENV_SET = re.compile(r"""os\.environ\[\s*["'](MASTER_ADDR|MASTER_PORT|RANK|LOCAL_RANK|WORLD_SIZE)["']\s*\]"""
                      r"""\s*=\s*["']?([^"'\s)]+)""")


_VISIBLE_SET = re.compile(r"""os\.environ\[\s*["']CUDA_VISIBLE_DEVICES["']\s*\]\s*=\s*["']([^"']*)["']""")


def _one_visible_gpu(ctx: Context, text: str) -> bool:
    """The script (or the launch shell) makes a single GPU visible: CUDA_VISIBLE_DEVICES="0"."""
    shown = [m.group(1) for m in _VISIBLE_SET.finditer(text)]
    env_value = ctx.env_get("env_vars.CUDA_VISIBLE_DEVICES")
    if isinstance(env_value, str):
        shown.append(env_value)
    return any(len([d for d in v.split(",") if d.strip()]) == 1 for v in shown)


def launcher_env_by_hand(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS230: a script sets RANK/WORLD_SIZE itself (the guide's notebook emulation) on a machine
    with several GPUs, and nothing launches it with a launcher: it trains on one GPU."""
    gpus = env_gpus(ctx)
    if any(la.launcher in ("deepspeed", "torchrun", "accelerate") for la in launches(ctx)):
        return
    for path, text in ctx.script_sources.items():
        if is_shell_script(path, text):
            continue
        found = {m.group(1): (m.group(2), text.count("\n", 0, m.start()) + 1)
                 for m in _ENV_SET.finditer(text)}
        ws = found.get("WORLD_SIZE")
        if ws is None or ws[0] != "1" or "RANK" not in found:
            continue
        if not gpus:
            ctx.missing(rule.code, "whether the hand-set WORLD_SIZE=1 leaves GPUs idle",
                        "--env snapshot.json")
        if len(gpus) <= 1 or _one_visible_gpu(ctx, text):
            continue  # one GPU is what the script means to use: the emulation is right there
        yield finding(
            f"{path}:{ws[1]} sets WORLD_SIZE to 1 (and RANK at line {found['RANK'][1]}) by hand, as "
            f"the Transformers guide does to run DeepSpeed in a notebook: this runs one process, "
            f"so DeepSpeed trains on one GPU, while the environment ({ctx.env_source}) has "
            f"{len(gpus)}. The guide: the emulation works for one GPU only; more GPUs need the "
            f"launcher (several processes).",
            fix=f"save the code as a script without the os.environ lines and start it with "
                f"`deepspeed --num_gpus {len(gpus)} train.py` (in a notebook: `!deepspeed "
                f"--num_gpus {len(gpus)} train.py` in a cell, or %%bash); keep the emulation only "
                f"for one GPU",
            evidence=tuple(Evidence(path, ln, f'os.environ["{k}"] = "{v}"')
                           for k, (v, ln) in sorted(found.items(), key=lambda t: t[1][1])),
            severity="warning")


__all__ = ["launcher_env_by_hand", "slurm_tasks_per_node"]
