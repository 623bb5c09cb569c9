"""DS236 and DS237: recovering fp32 weights from a ZeRO checkpoint inside the training script
(the Transformers DeepSpeed guide, "Save model weights" / fp32, S72 and S73).

S72: "do not save fp32 weights during training (it can take a lot of memory); save them
offline once training is done; online only with plenty of free CPU RAM". DeepSpeed's recovery
functions consolidate the whole model in fp32 (4 bytes per parameter) in the CPU RAM of every
process that calls them; from 0.16.0 convert_zero_checkpoint_to_fp32_state_dict does it one output
shard at a time. Statically visible, and so checked: a call inside the training
loop (a for/while body that also steps the model) or inside a TrainerCallback's method (run at
every save/step/evaluation). A call after ``trainer.train()`` is the guide's "online" recipe.

S73: "at least one checkpoint must have been saved" before ``load_state_dict_from_zero_checkpoint``
on ``get_last_checkpoint(output_dir)``. get_last_checkpoint returns None when output_dir holds no
``checkpoint-N`` folder, and the load then fails. That is certain when the run saves no
checkpoints (``save_strategy="no"``) and the result is not tested for None; with saves, whether
one exists depends on the run and nothing is said.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, param_count, script_trees
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Evidence, Finding

RECOVERY = frozenset({"get_fp32_state_dict_from_zero_checkpoint",
                      "load_state_dict_from_zero_checkpoint",
                      "convert_zero_checkpoint_to_fp32_state_dict"})
RECOVERY_NAMES = tuple(sorted(RECOVERY))  # the text test before a script is parsed
#: From 0.16.0 convert_zero_checkpoint_to_fp32_state_dict reads the checkpoint lazily and
#: materializes one output shard at a time (utils/zero_to_fp32.py: lazy_mode, max_shard_size).
LAZY_CONVERT = (0, 16, 0)
#: Calls that show a loop body is the training loop.
STEP_CALLS = frozenset({"backward", "step", "train_batch", "training_step"})


def _name(f: ast.expr) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _calls_in(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _during_training(tree: ast.AST) -> list[tuple[ast.Call, str]]:
    """(recovery call, where) for calls in a training loop body or a TrainerCallback method."""
    out: list[tuple[ast.Call, str]] = []
    seen: set[int] = set()
    for node in ast.walk(tree):
        where = ""
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            body = ast.Module(body=node.body, type_ignores=[])
            if any(_name(c.func) in STEP_CALLS for c in _calls_in(body)):
                where = f"the training loop (line {node.lineno})"
        elif isinstance(node, ast.ClassDef) and any(
                _name(b).endswith("Callback") for b in node.bases):
            where = f"the callback {node.name} (line {node.lineno}), run during training"
        if not where:
            continue
        for c in _calls_in(node):
            if _name(c.func) in RECOVERY and id(c) not in seen:
                seen.add(id(c))
                out.append((c, where))
    return out


def fp32_recovery_during_training(ctx: Context, rule: Any) -> Iterator[Finding]:
    total, _, src = param_count(ctx)
    size = (f" ({gib(total * 4)} for this model, {src}, in each calling process)" if total else "")
    for path, text, tree in script_trees(ctx, any_of=RECOVERY_NAMES):
        lines = text.splitlines()
        for call, where in _during_training(tree):
            name = _name(call.func)
            cost = (f"each call reads every rank's fp32 partitions and writes the whole model in "
                    f"fp32 (4 bytes per parameter{', ' + gib(total * 4) if total else ''}), one "
                    f"shard (max_shard_size, 5GB by default) in CPU RAM at a time"
                    if name == "convert_zero_checkpoint_to_fp32_state_dict"
                    and parse_version(ctx.ds_version) >= LAZY_CONVERT else
                    f"each call consolidates the whole model in fp32 (4 bytes per parameter) in "
                    f"CPU RAM{size}")
            yield finding(
                f"{path}:{call.lineno} calls {name}() inside {where}: {cost}, again at every "
                f"pass. DeepSpeed asks for plenty of free CPU RAM for it, else zero_to_fp32.py "
                f"offline once training is done.",
                fix=f"move {name}() after training (after trainer.train() / the loop), or run "
                    f"zero_to_fp32.py on the last checkpoint offline",
                evidence=(Evidence(file=path, line=call.lineno,
                                   text=lines[call.lineno - 1].strip()[:160]),))


# ------------------------------------------------------------------ DS237 (S73)

def _save_strategy_no(ctx: Context) -> str | None:
    """Where the run says save_strategy "no", or None."""
    arg = run_arg(ctx, "save_strategy")
    if arg is not None:
        return arg[1] if str(arg[0]).strip().lower() in ("no", "intervalstrategy.no") else None
    for sc in ctx.scripts:
        for name, value, line in sc.training_arg_values:
            if name == "save_strategy":
                return (f"save_strategy=\"no\" at {sc.path}:{line}"
                        if str(value).strip().lower() == "no" else None)
    return None


def _tested(tree: ast.AST, var: str) -> bool:
    """Whether ``var`` appears in an if/while/assert/conditional test (a None check)."""
    for node in ast.walk(tree):
        test = getattr(node, "test", None) if isinstance(
            node, (ast.If, ast.While, ast.Assert, ast.IfExp)) else None
        if test is not None and any(isinstance(n, ast.Name) and n.id == var
                                    for n in ast.walk(test)):
            return True
    return False


def fp32_load_without_checkpoint(ctx: Context, rule: Any) -> Iterator[Finding]:
    for path, text, tree in script_trees(ctx, "get_last_checkpoint", any_of=RECOVERY_NAMES):
        lasts = {t.id: n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Call) and _name(n.value.func) == "get_last_checkpoint"
                 for t in n.targets if isinstance(t, ast.Name)}
        loads = [c for c in _calls_in(tree) if _name(c.func) in RECOVERY
                 and any(isinstance(a, ast.Name) and a.id in lasts for a in c.args)]
        for call in loads:
            var = next(a.id for a in call.args if isinstance(a, ast.Name) and a.id in lasts)
            if _tested(tree, var):
                continue
            no_saves = _save_strategy_no(ctx)
            if no_saves is None:
                continue  # with saves, whether a checkpoint exists depends on the run
            lines = text.splitlines()
            ev = tuple(Evidence(file=path, line=n, text=lines[n - 1].strip()[:160])
                       for n in (lasts[var], call.lineno))
            yield finding(
                f"{path}:{call.lineno} passes {var} = get_last_checkpoint(...) "
                f"({path}:{lasts[var]}) to {_name(call.func)}(), but the run saves no "
                f"checkpoints ({no_saves}): get_last_checkpoint returns None when output_dir "
                f"has no checkpoint-N folder, and the fp32 recovery then fails after the whole "
                f"training. At least one checkpoint must exist before it.",
                fix="save one first (trainer.deepspeed.save_checkpoint(checkpoint_dir) and load "
                    "from that directory, as the guide does with --load_best_model_at_end), or "
                    "set save_strategy to \"steps\"/\"epoch\"; test the directory for None",
                evidence=ev)


__all__ = ["fp32_load_without_checkpoint", "fp32_recovery_during_training"]
