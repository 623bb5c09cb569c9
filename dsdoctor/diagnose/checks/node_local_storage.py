"""DS235: a multi-node resume that cannot see the other nodes' ZeRO shards (S63).

The guides (multi-node deployment): without storage shared by all nodes, set
``checkpoint.use_node_local_storage`` true in the DeepSpeed config (or ``--save_on_each_node``
with the Trainer). Each rank saves its own ``zero_pp_rank_N_*_optim_states.pt`` shard where it
runs, and without node-local storage only global rank 0 writes ``mp_rank_00_model_states.pt``,
so on resume every node misses what the others wrote. DeepSpeed's engine from 0.3.14 to 0.7.4
(March 2021 to October 2022) warns "The following zero checkpoints paths are missing:
[...zero_pp_rank_8...]" and goes on WITHOUT the optimizer states (0.7.5 removed the warning and
added use_node_local_storage, deepspeedai/DeepSpeed#2438; a rank then fails to open its own
missing shard) (EleutherAI/gpt-neox#750: "the loss immediately spikes to very high values
and never recovers"; deepspeedai/DeepSpeed#2319).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import env_gpus, finding, log_facts, truthy
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

KEY = "checkpoint.use_node_local_storage"


def _multi_node(ctx: Context, first_rank: int) -> tuple[bool | None, str]:
    """(whether the run spans nodes, how we know); None when no input says."""
    nodes = log_facts(ctx).nodes
    if isinstance(nodes, int) and nodes > 0:
        return nodes > 1, f"the launcher log says {nodes} node(s)"
    gpus = len(env_gpus(ctx))
    if gpus and first_rank >= gpus:
        return True, (f"rank {first_rank}'s shard is missing while a node has {gpus} GPU(s) "
                      f"({ctx.env_source}), so the run had more ranks than one node")
    return None, ""


def zero_shards_on_other_nodes(ctx: Context, rule: Any) -> Iterator[Finding]:
    facts = ctx.facts_named("zero-shards-missing")
    if not facts:
        return
    f = facts[0]
    rank, path = f.values.get("first_rank"), f.values.get("first_path")
    if not isinstance(rank, int):
        return
    multi, how = _multi_node(ctx, rank)
    if multi is None:
        ctx.missing(rule.code, "whether the run spans nodes (ZeRO shards kept per node)",
                    "the launcher log or --env snapshot.json")
        return
    if not multi:
        return  # one node: the shard was never written (DS119 / an interrupted save), not storage
    local = truthy(ctx.cfg_get(KEY))
    trainer = bool(ctx.run.value("uses_trainer"))
    each = run_arg(ctx, "save_on_each_node")
    fixes = []
    if not local:
        fixes.append(f"set {KEY} to true in the DeepSpeed config so each node writes the files "
                     "it needs to resume")
    if trainer and not (each and truthy(each[0])):
        fixes.append("pass --save_on_each_node to the Trainer (it then saves the model and "
                     "trainer state on every node)")
    fixes.append("or put output_dir on storage every node mounts (NFS, Lustre, ...)")
    if local:
        fixes.append(f"({KEY} is already true: a checkpoint saved before it was set, or copied "
                     "from another layout, still lacks the other nodes' files: resume from one "
                     "saved with it)")
    yield finding(
        f"On resume, DeepSpeed could not find other ranks' ZeRO optimizer shards ({path} and "
        f"on), and {how}. Without storage shared by all nodes each node holds only the shards "
        f"of its own ranks, so DeepSpeed resumes WITHOUT the optimizer states: the loss jumps "
        f"back up after the resume (EleutherAI/gpt-neox#750).",
        path=KEY if ctx.cfg_has(KEY) or ctx.ds is not None else None,
        fix="; ".join(fixes), evidence=(f.evidence,))


__all__ = ["zero_shards_on_other_nodes"]
