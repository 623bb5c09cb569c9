"""DS246: the nodes of one job run different software or hardware (their env snapshots differ).

``analyze --env a.json --env b.json`` (one ``dsdoctor env --format json`` per node) compares the
fields every node should share (facts/envnodes.py): driver, CUDA, NCCL, torch, DeepSpeed,
Transformers, Accelerate, Python, GPU model. A difference is reported as what it is; dsdoctor does
not claim that this difference broke the run, only that it is the first thing to remove. For NCCL
an NCCL maintainer read a "received N bytes instead of M" error as "a version or configuration
mismatch between two ranks" (NVIDIA/nccl#1328), and that is all the message says about it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.facts.context import Context
from dsdoctor.facts.envnodes import node_differences
from dsdoctor.model import Finding

#: Fields whose difference is software the job's ranks load (a reinstall fixes it).
_SOFTWARE = ("NVIDIA driver", "CUDA (torch)", "CUDA (nvcc)", "NCCL (torch)", "torch", "deepspeed",
             "transformers", "accelerate", "Python")


def env_differs_across_nodes(ctx: Context, rule: Any) -> Iterator[Finding]:
    if len(ctx.envs) < 2:
        return
    diffs = node_differences(ctx.envs)
    if not diffs:
        return
    parts = ["{}: {}".format(label, ", ".join(f"{node} {value}" for node, value in vals.items()))
             for label, vals in diffs]
    labels = {label for label, _ in diffs}
    notes = []
    if "NCCL (torch)" in labels:
        notes.append("NCCL's maintainers read errors such as 'receiving N bytes instead of M' as "
                     "a version or configuration mismatch between ranks (NVIDIA/nccl#1328)")
    if "GPU" in labels:
        notes.append("different GPU models also run at different speeds, so the faster nodes "
                     "wait in every collective for the slowest")
    fixes = []
    software = [label for label in _SOFTWARE if label in labels]
    if software:
        fixes.append(f"install the same {', '.join(software)} on every node (one container "
                     "image or one environment for all of them) and re-run")
    if "GPU" in labels:
        fixes.append("or run the job on nodes with one GPU model")
    yield finding(
        f"The {len(ctx.envs)} nodes' environment snapshots differ: {'; '.join(parts)}. Every "
        "rank of one job should load the same software stack; the log alone cannot tell "
        "whether this difference caused the failure, but it is the first thing to rule out"
        + (f" ({'; '.join(notes)})" if notes else "") + ".",
        fix="; ".join(fixes) + ".")


__all__ = ["env_differs_across_nodes"]
