"""DS224: training or saving with DeepSpeed after ``load_state_dict_from_zero_checkpoint`` in the
same program (the Transformers guide, "Online" fp32 weights recovery: use it only at the end).

``deepspeed.utils.zero_to_fp32.load_state_dict_from_zero_checkpoint(model, checkpoint_dir)``
loads the consolidated fp32 weights into ``model`` and removes its DeepSpeed partitioning
(ZeRO-3 parameters become plain tensors), so the DeepSpeed engine cannot use that model any more.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, script_trees
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding

LOADER = "load_state_dict_from_zero_checkpoint"
#: Calls that need the DeepSpeed engine (training, evaluation through the engine, DeepSpeed saves).
ENGINE_CALLS = frozenset({"train", "backward", "step", "save_checkpoint", "save_16bit_model"})


def _calls(tree: ast.AST) -> list[tuple[int, str, ast.Call]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            out.append((node.lineno, name, node))
    return sorted(out, key=lambda t: t[0])


def engine_use_after_fp32_load(ctx: Context, rule: Any) -> Iterator[Finding]:
    for path, text, tree in script_trees(ctx, LOADER):
        lines = text.splitlines()
        calls = _calls(tree)
        load = next((c for c in calls if c[1] == LOADER), None)
        if load is None:
            continue
        later = next((c for c in calls if c[0] > load[0] and c[1] in ENGINE_CALLS
                      and isinstance(c[2].func, ast.Attribute)), None)
        if later is None:
            continue
        ev = tuple(Evidence(file=path, line=n, text=lines[n - 1].strip()[:160])
                   for n in (load[0], later[0]))
        yield finding(
            f"{path}:{load[0]} calls {LOADER}(), and {path}:{later[0]} then calls "
            f".{later[1]}(): the fp32 load moves the model to the CPU and loads plain fp32 "
            f"tensors into it, and DeepSpeed's docstring says the model is then no longer usable "
            f"by the engine of the same program; use it only at the very end.",
            fix=f"move {LOADER}() after the last training/saving call (it is for the final "
                f"fp32 weights), or recover them offline with zero_to_fp32.py from the checkpoint",
            evidence=ev)
