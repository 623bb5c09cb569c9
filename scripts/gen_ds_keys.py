#!/usr/bin/env python3
"""Generate dsdoctor/data/ds_keys_<release>.json: the config keys one DeepSpeed release knows.

Run it with a Python where that DeepSpeed release is installed (``bash scripts/install_deepspeed.sh
VENV [RELEASE]`` makes one)::

    VENV/bin/python scripts/gen_ds_keys.py            # writes ds_keys_<installed>.json

How the table is built, from DeepSpeed's own code (nothing typed by hand but the map of which
pydantic model parses which section):

* top-level keys: ``DeepSpeedConfig`` is constructed on a dict that records every key it asks
  for (``in``, ``get``, ``[]``, ``keys()``); each of those keys is then given an empty recording
  dict to learn the sub-keys that section reads (``aio``, ``checkpoint``, ``flops_profiler``...);
* keys DeepSpeed rejects with an error (removed features) come from
  ``_REMOVED_TOP_LEVEL_CONFIG_KEYS`` / ``_REMOVED_ZERO_CONFIG_KEYS``;
* sections parsed by a pydantic ``DeepSpeedConfigModel`` (``extra="forbid"``: unknown keys are an
  error) are read from the models' fields, with their aliases and deprecated names;
* ``optimizer.params`` / ``scheduler.params`` (never validated) from the signatures of DeepSpeed's
  optimizer and LR-scheduler classes and of torch.optim's.

This script imports DeepSpeed (it is a developer tool); dsdoctor itself only reads the JSON.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import sys
from typing import Any, get_args, get_origin

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "dsdoctor", "data")


class _Keys:
    def __init__(self, owner: _Recorder) -> None:
        self.owner = owner

    def __contains__(self, key: object) -> bool:
        self.owner.seen.add(key)
        return dict.__contains__(self.owner, key)

    def __iter__(self):
        return iter(dict.keys(self.owner))

    def __len__(self) -> int:
        return dict.__len__(self.owner)


class _Recorder(dict):
    """A dict that remembers which keys were asked for."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.seen: set[Any] = set()

    def __getitem__(self, key: Any) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.seen.add(key)
        return super().__contains__(key)

    def keys(self):  # type: ignore[override]
        return _Keys(self)

    def __copy__(self) -> _Recorder:  # DeepSpeedConfig copies the dict; keep recording
        return self


def _model_fields(model: Any) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(accepted keys, alias -> field name, deprecated key -> replacement) of a pydantic model."""
    keys: list[str] = []
    aliases: dict[str, str] = {}
    deprecated: dict[str, str] = {}
    for name, info in model.model_fields.items():
        keys.append(name)
        if info.alias and info.alias != name:
            keys.append(info.alias)
            aliases[info.alias] = name
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("deprecated"):
            deprecated[name] = str(extra.get("new_param", ""))
    return sorted(set(keys)), aliases, deprecated


def _constraints(model: Any) -> dict[str, dict[str, Any]]:
    """Value rules pydantic enforces per key: type (bool/int/float), bounds, enum choices."""
    import enum

    out: dict[str, dict[str, Any]] = {}
    for name, info in model.model_fields.items():
        ann = info.annotation
        args = [a for a in get_args(ann) if a is not type(None)] if get_origin(ann) is not None else [ann]
        if len(args) != 1:
            continue
        t = args[0]
        rule: dict[str, Any] = {}
        if inspect.isclass(t) and issubclass(t, enum.Enum):
            rule["choices"] = [m.value for m in t]
        elif t in (bool, int, float):
            rule["type"] = t.__name__
        for m in info.metadata:
            for bound in ("gt", "ge", "lt", "le"):
                if getattr(m, bound, None) is not None:
                    rule[bound] = getattr(m, bound)
        if rule:
            for key in {name, info.alias or name}:
                out[key] = rule
    return out


def _submodels(model: Any) -> dict[str, Any]:
    """Fields of a pydantic model whose type is itself a DeepSpeedConfigModel (nested sections)."""
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        ann = info.annotation
        cands = [ann] + list(get_args(ann)) if get_origin(ann) is not None else [ann]
        for c in cands:
            if inspect.isclass(c) and issubclass(c, DeepSpeedConfigModel):
                out[info.alias or name] = c
                if info.alias and info.alias != name:
                    out[name] = c
    return out


def _pydantic_sections() -> dict[str, Any]:
    """Section path -> the pydantic model DeepSpeed parses it with (the one hand-kept map)."""
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
    from deepspeed.runtime.config import HybridEngineConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    sections: dict[str, Any] = {
        "zero_optimization": DeepSpeedZeroConfig,
        "fp16": DeepSpeedFP16Config,
        "bf16": DeepSpeedBF16Config,
        "tensorboard": TensorBoardConfig,
        "wandb": WandbConfig,
        "csv_monitor": CSVConfig,
        "comet": CometConfig,
        "comms_logger": CommsLoggerConfig,
        "compile": CompileConfig,
        "hybrid_engine": HybridEngineConfig,
    }
    try:
        from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
        sections["tensor_parallel"] = TPTrainingConfig
    except ImportError:
        pass
    # Nested models (offload_param, offload_optimizer, zenflow, ...) follow from the fields.
    todo = list(sections.items())
    while todo:
        path, model = todo.pop()
        for sub, submodel in _submodels(model).items():
            p = f"{path}.{sub}"
            if p not in sections:
                sections[p] = submodel
                todo.append((p, submodel))
    return sections


def _signature_params(classes: list[Any]) -> list[str]:
    names: set[str] = set()
    for cls in classes:
        try:
            sig = inspect.signature(cls.__init__)
        except (TypeError, ValueError):
            continue
        for p in sig.parameters.values():
            if p.name in ("self", "params", "model_params", "optimizer", "args", "kwargs",
                          "deepspeed", "last_batch_iteration"):
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            names.add(p.name)
    return sorted(names)


def _optimizer_params() -> list[str]:
    import torch.optim

    classes: list[Any] = [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad]
    for mod, name in (("deepspeed.ops.adam", "FusedAdam"), ("deepspeed.ops.adam", "DeepSpeedCPUAdam"),
                      ("deepspeed.ops.lamb", "FusedLamb"), ("deepspeed.ops.lion", "FusedLion"),
                      ("deepspeed.ops.adagrad", "DeepSpeedCPUAdagrad"),
                      ("deepspeed.runtime.fp16.onebit.adam", "OnebitAdam"),
                      ("deepspeed.runtime.fp16.onebit.zoadam", "ZeroOneAdam"),
                      ("deepspeed.runtime.fp16.onebit.lamb", "OnebitLamb")):
        try:
            classes.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return _signature_params(classes)


def _scheduler_params() -> list[str]:
    from deepspeed.runtime import lr_schedules

    classes = [getattr(lr_schedules, n) for n in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                  "OneCycle", "LRRangeTest")
               if hasattr(lr_schedules, n)]
    return _signature_params(classes)


def _engine_optimizer_keys(engine_src: str, consts: dict[str, str]) -> set[str]:
    """optimizer.params keys the engine itself consumes (``torch_adam``, ``adam_w_mode``, Muon's).

    Read statically from deepspeed/runtime/engine.py: keys taken out of ``optimizer_parameters``
    (``pop``/``get``/``[]``/``in``), string arguments of calls that also receive it, and the
    ``*_KEYS`` tuples the engine splits parameter groups with.
    """
    import ast

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


def build_table() -> dict[str, Any]:
    """Introspect the installed DeepSpeed into the known-key table."""
    logging.disable(logging.CRITICAL)
    import deepspeed
    from deepspeed.runtime import config as ds_config

    top = _Recorder({"train_batch_size": 1})
    ds_config.DeepSpeedConfig(top)
    top_keys = {k for k in top.seen if isinstance(k, str)}
    removed = {k: str(v) for k, v in getattr(ds_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {}).items()}
    removed_zero = {k: str(v) for k, v in getattr(ds_config, "_REMOVED_ZERO_CONFIG_KEYS", {}).items()}

    sections: dict[str, dict[str, Any]] = {}
    for path, model in sorted(_pydantic_sections().items()):
        keys, aliases, deprecated = _model_fields(model)
        sections[path] = {"keys": keys, "strict": True, "model": f"{model.__module__}.{model.__name__}"}
        cons = _constraints(model)
        if cons:
            sections[path]["constraints"] = cons
        if aliases:
            sections[path]["aliases"] = aliases
        if deprecated:
            sections[path]["deprecated"] = deprecated
    # Sections read key by key (unknown keys silently ignored): learn them by recording.
    for key in sorted(top_keys - set(sections) - set(removed)):
        sub = _Recorder()
        probe = _Recorder({"train_batch_size": 1, key: sub})
        try:
            ds_config.DeepSpeedConfig(probe)
        except Exception:  # a scalar key given a dict: not a section
            continue
        sub_keys = sorted(k for k in sub.seen if isinstance(k, str))
        if sub_keys:
            sections[key] = {"keys": sub_keys, "strict": False}
    sections.setdefault("optimizer", {"keys": ["type", "params"], "strict": False})
    sections["optimizer"]["keys"] = sorted(set(sections["optimizer"]["keys"]) | {"type", "params"})
    engine_file = os.path.join(os.path.dirname(deepspeed.__file__), "runtime", "engine.py")
    with open(engine_file, encoding="utf-8") as fh:
        engine_src = fh.read()
    engine_keys = _engine_optimizer_keys(engine_src, {k: v for k, v in vars(ds_config).items()
                                                      if isinstance(v, str)})
    sections["optimizer.params"] = {"keys": sorted(set(_optimizer_params()) | engine_keys),
                                    "strict": False}
    sections.setdefault("scheduler", {"keys": ["type", "params"], "strict": False})
    sections["scheduler"]["keys"] = sorted(set(sections["scheduler"]["keys"]) | {"type", "params"})
    sections["scheduler.params"] = {"keys": _scheduler_params(), "strict": False}
    # Keys the engine reads outside DeepSpeedConfig (deepspeed/runtime/engine.py, __init__.py).
    top_keys |= {"sequence_parallel_size"}
    return {
        "release": deepspeed.__version__.split("+")[0],
        "generated_by": "scripts/gen_ds_keys.py (introspection of the installed DeepSpeed)",
        "top_level": sorted(top_keys - set(removed)),
        "removed_top_level": removed,
        "removed_zero_optimization": removed_zero,
        "sections": sections,
        # Verified behaviour of this release (see tests/test_dskeys.py and issue 3).
        "behaviour": {
            "unknown_top_level": "ignored",
            "unknown_in_strict_section": "error",
            "auto_values": "dropped before validation (default used)",
            "offload_param_below_stage3": "ignored",
        },
    }


# ----------------------------------------------------------------------------------------------
# Older releases: read statically from their sdist (never imported: their code does not run on
# today's torch/pydantic, and a developer tool should not execute downloaded code anyway).
# Get one with:  pip download --no-deps --no-binary :all: deepspeed==0.9.5 -d /tmp/dssrc

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
    import ast

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


def _static_reads(sources: dict[str, str], consts: dict[str, str]) -> tuple[set[str], dict[str, set[str]]]:
    """Keys read from ``param_dict`` (top level) and from sections taken out of it."""
    import ast

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
                elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                    cont = node.comparators[0]
                    if isinstance(cont, ast.Call) and isinstance(cont.func, ast.Attribute) and cont.func.attr == "keys":
                        cont = cont.func.value
                    record(cont, node.left)
                elif isinstance(node, ast.Call):
                    f = node.func
                    if isinstance(f, ast.Name) and f.id in _READERS and len(node.args) >= 2:
                        record(node.args[0], node.args[1])
                    elif isinstance(f, ast.Attribute) and f.attr == "get" and node.args:
                        record(f.value, node.args[0])
    return top, sections


def _static_models(sources: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Pydantic DeepSpeedConfigModel classes: name -> (keys, alias -> field name)."""
    import ast

    models: dict[str, tuple[list[str], dict[str, str]]] = {}
    for src in sources.values():
        if "DeepSpeedConfigModel" not in src:
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            if not any(isinstance(b, ast.Name) and b.id == "DeepSpeedConfigModel" for b in cls.bases):
                continue
            keys: list[str] = []
            aliases: dict[str, str] = {}
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                name = st.target.id
                keys.append(name)
                if isinstance(st.value, ast.Call):
                    for kw in st.value.keywords:
                        if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
                            keys.append(kw.value.value)
                            aliases[kw.value.value] = name
            models[cls.name] = (sorted(set(keys)), aliases)
    return models


def build_table_from_sdist(path: str) -> dict[str, Any]:
    """The known-key table of an older release, read statically from its sdist tarball."""
    import re as _re

    m = _re.search(r"deepspeed-(\d+\.\d+\.\d+)", os.path.basename(path))
    if not m:
        raise SystemExit(f"{path}: expected a deepspeed-<version>.tar.gz sdist")
    sources = _sdist_sources(path)
    consts = _str_constants(sources)
    top, read_sections = _static_reads(sources, consts)
    models = _static_models(sources)
    sections: dict[str, dict[str, Any]] = {}
    for sec, cls in _PYDANTIC_SECTIONS.items():
        if cls in models:
            keys, aliases = models[cls]
            sections[sec] = {"keys": keys, "strict": True, "model": cls}
            if aliases:
                sections[sec]["aliases"] = aliases
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
            "keys": sorted(_engine_optimizer_keys(sources["deepspeed/runtime/engine.py"], consts) | torch_params),
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
        "release": m.group(1),
        "generated_by": f"scripts/gen_ds_keys.py --sdist {os.path.basename(path)} (static read, never imported)",
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=OUT_DIR)
    ap.add_argument("--sdist", help="read an older release statically from its sdist tarball")
    args = ap.parse_args()
    table = build_table_from_sdist(args.sdist) if args.sdist else build_table()
    path = os.path.join(args.out_dir, f"ds_keys_{table['release']}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(table, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {os.path.relpath(path)}: {len(table['top_level'])} top-level keys, "
          f"{len(table['sections'])} sections", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
