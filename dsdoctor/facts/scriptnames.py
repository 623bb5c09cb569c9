"""What a script binds to plain names, and the name helpers scriptcheck's visit uses.

Split from scriptcheck.py (the visit itself) to keep each module small.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for Name/Attribute chains, the callee name for calls, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return ""


def dtype_literal(node: ast.AST, names: dict[str, str] | None = None) -> str | None:
    """'bfloat16' for torch.bfloat16 / "bfloat16" / torch.bf16-like spellings, else None.

    ``names`` resolves a variable the script assigns one literal dtype (``quant_storage_dtype =
    torch.bfloat16``), ``x or torch.float32`` takes ``x`` when it resolves (a dtype is truthy),
    and ``getattr(torch, "bfloat16")`` reads its literal name.
    """
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Name) and names is not None:
        return names.get(node.id)
    elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and node.values:
        return dtype_literal(node.values[0], names)
    elif isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) == 2 \
            and dotted(node.args[0]) == "torch" and isinstance(node.args[1], ast.Constant) \
            and isinstance(node.args[1].value, str):
        name = node.args[1].value
    else:
        return None
    name = name.removeprefix("torch.")
    return {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
            "float": "float32"}.get(name, name)


_DTYPE_NAMES = {"bfloat16", "float16", "float32", "float64", "uint8", "int8"}

# Calls whose result is a model's input batch (a tokenizer's BatchEncoding, a processor's output):
# ``generate(**inputs)`` with such a dict cannot carry ``synced_gpus``.
_INPUT_MAKERS = ("tokenizer", "tokenize", "processor", "encode", "collator", "apply_chat_template")


@dataclass(frozen=True)
class Bindings:
    """What the script binds to plain names, whatever the order of the statements.

    ``dtypes``: names assigned one literal dtype everywhere (a name also assigned anything else
    is left out: its value depends on the path taken). ``inputs``: names only ever bound to
    a tokenizer/processor output or a loop over batches. ``sync_dicts``: names a ``synced_gpus``
    key is put into (a dict display, ``dict(synced_gpus=...)``, ``d["synced_gpus"] = ...``).
    """

    dtypes: dict[str, str]
    inputs: set[str]
    sync_dicts: set[str]


class BindingsSeen:
    """Collects :class:`Bindings` from the nodes the visit passes (each node once), so that one
    parse serves both: the facts that depend on a binding are resolved after the whole script."""

    def __init__(self) -> None:
        self.dtype_values: dict[str, set[str | None]] = {}
        self.input_like: dict[str, bool] = {}
        self.sync: set[str] = set()

    def assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        if node.value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                self.dtype_values.setdefault(t.id, set()).add(dtype_literal(node.value))
                self.input_like[t.id] = self.input_like.get(t.id, True) \
                    and makes_inputs(node.value)
                if mentions_synced_gpus(node.value):
                    self.sync.add(t.id)
            elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) \
                    and isinstance(t.slice, ast.Constant) and t.slice.value == "synced_gpus":
                self.sync.add(t.value.id)

    def loop(self, node: ast.For | ast.AsyncFor) -> None:
        if isinstance(node.target, ast.Name):
            # for batch in dataloader: a data batch, never generation options
            self.input_like[node.target.id] = self.input_like.get(node.target.id, True)
            self.dtype_values.setdefault(node.target.id, set()).add(None)

    def call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Name) and mentions_synced_gpus(node):
            self.sync.add(node.func.value.id)

    def result(self) -> Bindings:
        dtypes = {k: next(iter(v)) for k, v in self.dtype_values.items()
                  if len(v) == 1 and None not in v}
        return Bindings({k: v for k, v in dtypes.items() if v in _DTYPE_NAMES},
                         {k for k, ok in self.input_like.items() if ok}, self.sync)


def makes_inputs(value: ast.AST) -> bool:
    """``tokenizer(...)``, ``tokenizer(...).to(device)``, ``processor(images=...)``."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in ("to", "cuda"):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    callee = dotted(value.func).lower()
    return any(m in callee for m in _INPUT_MAKERS)


def mentions_synced_gpus(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value == "synced_gpus":
            return True
        if isinstance(sub, ast.keyword) and sub.arg == "synced_gpus":
            return True
    return False
