"""The training-loop calls of a script that DS220/DS221 look at (diagnose/checks/script_loops.py).

They are collected during scriptcheck's one visit of the script's syntax tree (a 7 MB script
was parsed and walked twice more for them: 36 s of 53), or by :func:`loop_calls` for a text
scriptcheck did not read. Names are followed one step: the variable a script binds to
``Accelerator(...)`` is "the accelerator", so ``accelerator.backward(loss)`` is told apart from
``loss.backward()``; since the binding may come after the call, calls are classified at the end.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dsdoctor.facts.pyparse import parse_bounded

Site = tuple[int, str]  # (line, the line's stripped text, capped)
_METHODS = frozenset({"prepare", "backward", "save_model"})


@dataclass(frozen=True)
class LoopCalls:
    """The calls of one script that DS220/DS221 look at, each as (line, source text)."""

    path: str
    accelerators: tuple[str, ...]  # names bound to Accelerator(...)
    prepares: tuple[Site, ...]  # <accelerator>.prepare(...)
    bare_backward: tuple[Site, ...]  # x.backward() on a loss, not the accelerator
    acc_backward: tuple[Site, ...]  # <accelerator>.backward(loss)
    save_model: tuple[Site, ...]  # trainer.save_model(...)
    full_state_dict: tuple[Site, ...]  # a FULL_STATE_DICT switch before saving


def _callee(node: ast.Call) -> tuple[str | None, str | None]:
    """(object name, method) of ``obj.method(...)``; (None, name) for ``name(...)``."""
    f = node.func
    if isinstance(f, ast.Attribute):
        base = f.value
        while isinstance(base, ast.Attribute):  # trainer.accelerator.backward -> "accelerator"
            if base.attr == "accelerator":
                return "accelerator", f.attr
            base = base.value
        return (base.id if isinstance(base, ast.Name) else None), f.attr
    if isinstance(f, ast.Name):
        return None, f.id
    return None, None


class LoopCallsSeen:
    """Fed the Assign, Call, Attribute and Constant nodes of a script (each once, any order)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.accs: set[str] = {"accelerator"}  # trainer.accelerator, and the usual name
        # (object, method, bare: no arguments and called as an attribute, site)
        self.calls: list[tuple[str | None, str, bool, Site]] = []
        self.full: list[Site] = []

    def _src(self, node: ast.AST) -> Site:
        n = getattr(node, "lineno", 0)
        return n, (self.lines[n - 1].strip()[:160] if 0 < n <= len(self.lines) else "")

    def assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and _callee(node.value)[1] == "Accelerator":
            self.accs.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def call(self, node: ast.Call) -> None:
        obj, meth = _callee(node)
        if meth in _METHODS:
            bare = not node.args and isinstance(node.func, ast.Attribute)
            self.calls.append((obj, meth, bare, self._src(node)))  # type: ignore[arg-type]

    def name(self, node: ast.Attribute | ast.Constant) -> None:
        if (node.attr if isinstance(node, ast.Attribute) else node.value) == "FULL_STATE_DICT":
            self.full.append(self._src(node))

    def result(self, path: str) -> LoopCalls:
        prepares, bare, acc_bw, saves = [], [], [], []
        for obj, meth, no_args, site in self.calls:
            if meth == "prepare":
                if obj in self.accs:
                    prepares.append(site)
            elif meth == "backward":
                if obj in self.accs:
                    acc_bw.append(site)
                elif no_args:
                    bare.append(site)
            elif obj is not None and obj not in self.accs:  # save_model
                saves.append(site)
        return LoopCalls(path, tuple(sorted(self.accs)), tuple(sorted(prepares)),
                         tuple(sorted(bare)), tuple(sorted(acc_bw)), tuple(sorted(saves)),
                         tuple(sorted(self.full)))


def loop_calls(path: str, text: str) -> LoopCalls | None:
    """The script's loop calls, or None when it does not parse (DS-wide: scriptcheck reports it)."""
    try:
        tree = parse_bounded(text)  # ParseBudgetError is a ValueError
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    seen = LoopCallsSeen(text.splitlines())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            seen.assign(node)
        elif isinstance(node, ast.Call):
            seen.call(node)
        elif isinstance(node, (ast.Attribute, ast.Constant)):
            seen.name(node)
    return seen.result(path)
