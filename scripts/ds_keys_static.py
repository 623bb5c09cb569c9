"""Known-key tables of older DeepSpeed releases, read statically (never imported).

Their code does not run on today's torch/pydantic, and a developer tool should not execute
downloaded code anyway. Two sources give the same ``deepspeed/**.py`` texts:

* an sdist: ``pip download --no-deps --no-binary :all: deepspeed==0.9.5 -d /tmp/dssrc``, then
  ``gen_ds_keys.py --sdist /tmp/dssrc/deepspeed-0.9.5.tar.gz``;
* a tag of a DeepSpeed git clone (bare or not): ``gen_ds_keys.py --git CLONE --tag v0.16.9``.

Used by ``gen_ds_keys.py`` (the command line); see its docstring for how a table is built.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "dsdoctor", "data")


def engine_optimizer_keys(engine_src: str, consts: dict[str, str]) -> set[str]:
    """optimizer.params keys the engine itself consumes (``torch_adam``, ``adam_w_mode``, Muon's).

    Read statically from deepspeed/runtime/engine.py: keys taken out of ``optimizer_parameters``
    (``pop``/``get``/``[]``/``in``), string arguments of calls that also receive it, and the
    ``*_KEYS`` tuples the engine splits parameter groups with.
    """
    tree = ast.parse(engine_src)
    keys: set[str] = set()

    def val(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in consts:
            return consts[node.id]
        return None

    def is_params(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "optimizer_parameters"

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_params(node.value):
            v = val(node.slice)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("pop", "get") and is_params(node.func.value) and node.args):
            v = val(node.args[0])
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1
              and isinstance(node.ops[0], (ast.In, ast.NotIn)) and is_params(node.comparators[0])):
            v = val(node.left)
        elif isinstance(node, ast.Call) and any(is_params(a) for a in node.args):
            for a in node.args:
                v = val(a)
                if v and v.isidentifier():
                    keys.add(v)
            continue
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_KEYS")
              and isinstance(node.value, (ast.Tuple, ast.List))):
            keys.update(v for e in node.value.elts if (v := val(e)))
            continue
        else:
            continue
        if v and v.isidentifier():
            keys.add(v)
    return keys




_PYDANTIC_SECTIONS = {
    "zero_optimization": "DeepSpeedZeroConfig",
    "zero_optimization.offload_param": "DeepSpeedZeroOffloadParamConfig",
    "zero_optimization.offload_optimizer": "DeepSpeedZeroOffloadOptimizerConfig",
    "fp16": "DeepSpeedFP16Config",
    "bf16": "DeepSpeedBF16Config",
    "tensorboard": "TensorBoardConfig",
    "wandb": "WandbConfig",
    "csv_monitor": "CSVConfig",
    "comet": "CometConfig",
    "comms_logger": "CommsLoggerConfig",
    "compile": "CompileConfig",
    "hybrid_engine": "HybridEngineConfig",
}
_READERS = {"get_scalar_param", "get_dict_param", "get_list_param"}


def _sdist_sources(path: str) -> dict[str, str]:
    import tarfile

    out: dict[str, str] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            parts = m.name.split("/")
            if m.isfile() and m.name.endswith(".py") and len(parts) > 2 and parts[1] == "deepspeed":
                fh = tf.extractfile(m)
                if fh is not None:
                    out["/".join(parts[1:])] = fh.read().decode("utf-8", "replace")
    return out


def _str_constants(sources: dict[str, str]) -> dict[str, str]:
    consts: dict[str, str] = {}
    # runtime/constants.py first: it wins name clashes, as config.py star-imports it.
    for name in sorted(sources, key=lambda n: (not n.endswith("runtime/constants.py"), n)):
        try:
            tree = ast.parse(sources[name])
        except SyntaxError:
            continue
        local: dict[str, str] = {}
        for node in tree.body:  # the last assignment in a module wins (docstring, then the key)
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                local[node.targets[0].id] = node.value.value
        for k, v in local.items():
            consts.setdefault(k, v)
    return consts


def _forwarders(tree: ast.Module, keyval: Any, top: set[str]) -> set[str]:
    """Helpers that take the key to read as an argument, ``def get_communication_data_type(
    param_dict, comm_type=COMMUNICATION_DATA_TYPE, ...)`` calling ``get_scalar_param(param_dict,
    comm_type, ...)``: their callers' second arguments are keys, and so is the default (added to
    ``top`` here)."""
    out: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or len(fn.args.args) < 2 or fn.args.args[0].arg != "param_dict":
            continue
        key_arg = fn.args.args[1].arg
        forwards = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _READERS
                       and len(n.args) >= 2 and isinstance(n.args[1], ast.Name) and n.args[1].id == key_arg
                       for n in ast.walk(fn))
        if not forwards:
            continue
        out.add(fn.name)
        defaults = fn.args.defaults
        first_default = len(fn.args.args) - len(defaults)
        if first_default <= 1:  # the key argument has a default: that key is read too
            top.update(keyval(defaults[1 - first_default], {}))
    return out


def _static_reads(sources: dict[str, str], consts: dict[str, str]) -> tuple[set[str], dict[str, set[str]]]:
    """Keys read from ``param_dict`` (top level) and from sections taken out of it."""
    def keyval(node: ast.AST, loops: dict[str, list[str]]) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            if node.id in loops:
                return loops[node.id]
            if node.id in consts:
                return [consts[node.id]]
        return []

    top: set[str] = set()
    sections: dict[str, set[str]] = {}
    for name, src in sources.items():
        # Config readers only. compression/, elasticity/ and data_pipeline/ name their *section*
        # dict "param_dict" too; reading them would leak section keys into the top level.
        base = name.rsplit("/", 1)[-1]
        if not (base == "config.py" or base.endswith("_config.py")) or any(
                d in name for d in ("compression/", "elasticity/", "data_pipeline/", "inference/")):
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        readers = _READERS | _forwarders(tree, keyval, top)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = {a.arg for a in fn.args.args}
            if "param_dict" not in args:
                continue
            loops: dict[str, list[str]] = {}
            alias: dict[str, list[str]] = {}  # local var -> section key(s) it holds
            for node in ast.walk(fn):
                if (isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name)
                        and isinstance(node.iter, (ast.List, ast.Tuple))):
                    loops[node.target.id] = [v for e in node.iter.elts for v in keyval(e, {})]

            def section_of(expr: ast.AST, alias: dict = alias, loops: dict = loops) -> list[str] | None:
                if isinstance(expr, ast.Name) and expr.id == "param_dict":
                    return []
                if isinstance(expr, ast.Name) and expr.id in alias:
                    return alias[expr.id]
                if (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
                        and expr.value.id == "param_dict"):
                    return keyval(expr.slice, loops)
                if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                        and expr.func.attr == "get" and isinstance(expr.func.value, ast.Name)
                        and expr.func.value.id == "param_dict" and expr.args):
                    return keyval(expr.args[0], loops)
                return None

            def record(container: ast.AST, key: ast.AST, loops: dict = loops) -> None:
                sec = section_of(container)
                if sec is None:
                    return
                for k in keyval(key, loops):
                    if sec == []:
                        top.add(k)
                    else:
                        for s in sec:
                            sections.setdefault(s, set()).add(k)

            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    sec = section_of(node.value)
                    if sec:
                        alias[node.targets[0].id] = sec
            for node in ast.walk(fn):
                if isinstance(node, ast.Subscript):
                    record(node.value, node.slice)
                elif (isinstance(node, ast.Compare) and len(node.ops) == 1
                      and isinstance(node.ops[0], (ast.In, ast.NotIn))):
                    cont = node.comparators[0]
                    if isinstance(cont, ast.Call) and isinstance(cont.func, ast.Attribute) and cont.func.attr == "keys":
                        cont = cont.func.value
                    record(cont, node.left)
                elif isinstance(node, ast.Call):
                    f = node.func
                    if isinstance(f, ast.Name) and f.id in readers and len(node.args) >= 2:
                        record(node.args[0], node.args[1])
                    elif isinstance(f, ast.Attribute) and f.attr == "get" and node.args:
                        record(f.value, node.args[0])
    return top, sections


def _enums(trees: list[ast.Module]) -> dict[str, list[Any]]:
    """``class OffloadDeviceEnum(str, Enum): none = "none" ...`` -> name -> member values."""
    out: dict[str, list[Any]] = {}
    for tree in trees:
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "Enum"
                                                     for b in cls.bases):
                out[cls.name] = [st.value.value for st in cls.body
                                 if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant)]
    return out


def _number(node: ast.AST) -> float | int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return -inner if inner is not None else None
    return None


def _field_rule(st: ast.AnnAssign, enums: dict[str, list[Any]], pydantic2: bool) -> dict[str, Any]:
    """The value rule pydantic enforces on one field: type, bounds, enum choices (as the
    introspected tables' ``constraints``). Pydantic v1 (DeepSpeed < 0.15) truncates a fractional
    number given to an int field instead of refusing it, so there an int is only "a number"."""
    ann = st.annotation
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "Optional":
        ann = ann.slice
    elif isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        sides = [a for a in (ann.left, ann.right) if not (isinstance(a, ast.Constant) and a.value is None)]
        ann = sides[0] if len(sides) == 1 else ann
    rule: dict[str, Any] = {}
    if isinstance(ann, ast.Name):
        if ann.id in enums and enums[ann.id]:
            rule["choices"] = enums[ann.id]
        elif ann.id in ("bool", "int", "float"):
            rule["type"] = "float" if ann.id == "int" and not pydantic2 else ann.id
    if isinstance(st.value, ast.Call):
        for kw in st.value.keywords:
            if kw.arg in ("gt", "ge", "lt", "le") and (n := _number(kw.value)) is not None:
                rule[kw.arg] = n
    return rule


def _static_models(sources: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str], dict[str, Any]]]:
    """Pydantic DeepSpeedConfigModel classes: name -> (keys, alias -> field name, value rules)."""
    pydantic2 = "ConfigDict" in sources.get("deepspeed/runtime/config_utils.py", "")
    trees: list[ast.Module] = []
    for src in sources.values():
        if "DeepSpeedConfigModel" in src or "Enum" in src:
            try:
                trees.append(ast.parse(src))
            except SyntaxError:
                continue
    enums = _enums(trees)
    models: dict[str, tuple[list[str], dict[str, str], dict[str, Any]]] = {}
    for tree in trees:
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            if not any(isinstance(b, ast.Name) and b.id == "DeepSpeedConfigModel" for b in cls.bases):
                continue
            keys: list[str] = []
            aliases: dict[str, str] = {}
            rules: dict[str, Any] = {}
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                name = st.target.id
                keys.append(name)
                names = [name]
                if isinstance(st.value, ast.Call):
                    for kw in st.value.keywords:
                        if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
                            keys.append(kw.value.value)
                            aliases[kw.value.value] = name
                            names.append(kw.value.value)
                rule = _field_rule(st, enums, pydantic2)
                if rule:
                    rules.update({n: rule for n in names})
            models[cls.name] = (sorted(set(keys)), aliases, rules)
    return models


def git_sources(repo: str, tag: str) -> dict[str, str]:
    """``deepspeed/**.py`` of one tag of a DeepSpeed clone, read with git (no checkout)."""
    names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", tag, "deepspeed"],
                           capture_output=True, text=True, check=True).stdout.split()
    names = [n for n in names if n.endswith(".py")]
    batch = "".join(f"{tag}:{n}\n" for n in names).encode()
    raw = subprocess.run(["git", "-C", repo, "cat-file", "--batch"], input=batch,
                         capture_output=True, check=True).stdout
    out: dict[str, str] = {}
    pos = 0
    for name in names:  # "<sha> blob <size>\n<content>\n" per object, in request order
        eol = raw.index(b"\n", pos)
        size = int(raw[pos:eol].split()[2])
        out[name] = raw[eol + 1:eol + 1 + size].decode("utf-8", "replace")
        pos = eol + 1 + size + 1
    return out


def build_table_from_git(repo: str, tag: str) -> dict[str, Any]:
    """The known-key table of a release, read statically from its tag in a DeepSpeed clone."""
    version = tag.lstrip("v")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise SystemExit(f"{tag}: expected a release tag such as v0.16.9")
    return _build(git_sources(repo, tag), version,
                  f"scripts/gen_ds_keys.py --git DeepSpeed --tag {tag} (static read, never imported)")


def build_table_from_sdist(path: str) -> dict[str, Any]:
    """The known-key table of an older release, read statically from its sdist tarball."""
    m = re.search(r"deepspeed-(\d+\.\d+\.\d+)", os.path.basename(path))
    if not m:
        raise SystemExit(f"{path}: expected a deepspeed-<version>.tar.gz sdist")
    return _build(_sdist_sources(path), m.group(1),
                  f"scripts/gen_ds_keys.py --sdist {os.path.basename(path)} (static read, never imported)")


def _build(sources: dict[str, str], release: str, generated_by: str) -> dict[str, Any]:
    consts = _str_constants(sources)
    top, read_sections = _static_reads(sources, consts)
    models = _static_models(sources)
    sections: dict[str, dict[str, Any]] = {}
    for sec, cls in _PYDANTIC_SECTIONS.items():
        if cls in models:
            keys, aliases, rules = models[cls]
            sections[sec] = {"keys": keys, "strict": True, "model": cls}
            if aliases:
                sections[sec]["aliases"] = aliases
            if rules:
                sections[sec]["constraints"] = rules
    for sec, keys in read_sections.items():
        if sec in sections or sec not in top:
            continue
        sections[sec] = {"keys": sorted(keys), "strict": False}
    if "deepspeed/runtime/engine.py" in sources:
        # Old releases' optimizer signatures cannot be introspected without importing them:
        # take the engine's own keys plus torch.optim's Adam/AdamW/SGD parameters (stable API).
        torch_params = {"lr", "betas", "eps", "weight_decay", "amsgrad", "momentum", "dampening",
                        "nesterov", "bias_correction", "max_grad_norm", "max_coeff", "min_coeff",
                        "freeze_step", "cuda_aware", "comm_backend_name", "foreach", "fused",
                        "capturable", "maximize", "differentiable", "set_grad_none"}
        sections["optimizer.params"] = {
            "keys": sorted(engine_optimizer_keys(sources["deepspeed/runtime/engine.py"], consts) | torch_params),
            "strict": False}
    for sec in ("optimizer", "scheduler"):
        sections.setdefault(sec, {"keys": [], "strict": False})
        sections[sec]["keys"] = sorted(set(sections[sec]["keys"]) | {"type", "params"})
    # The static read misses keys read through helper modules (elasticity, compression,
    # data_efficiency...). A known key must never be reported unknown, so also take every key a
    # newer table knows (or lists as removed) when this release's sources quote it as a string.
    quoted = set(consts.values())
    for other in sorted(os.listdir(OUT_DIR)):
        if other.startswith("ds_keys_") and other.endswith(".json"):
            with open(os.path.join(OUT_DIR, other), encoding="utf-8") as fh:
                newer = json.load(fh)
            if newer.get("generated_by", "").startswith("scripts/gen_ds_keys.py (introspection"):
                for k in list(newer["top_level"]) + list(newer.get("removed_top_level", {})):
                    if k in quoted:
                        top.add(k)
    return {
        "release": release,
        "generated_by": generated_by,
        "top_level": sorted(k for k in top if k.isidentifier()),
        "removed_top_level": {},
        "removed_zero_optimization": {},
        "sections": sections,
        "behaviour": {
            "unknown_top_level": "ignored",
            "unknown_in_strict_section": "error",
            "auto_values": "dropped before validation in pydantic sections",
            "offload_param_below_stage3": "ignored",
        },
    }


