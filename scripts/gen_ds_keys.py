#!/usr/bin/env python3
"""Generate dsdoctor/data/ds_keys_<release>.json: the config keys one DeepSpeed release knows.

Run it with a Python where that DeepSpeed release is installed (``bash scripts/install_deepspeed.sh
VENV [RELEASE]`` makes one)::

    VENV/bin/python scripts/gen_ds_keys.py            # writes ds_keys_<installed>.json

Older releases (one table per minor release, its last patch: 0.9.5, 0.10.3 ... 0.18.9) are read
statically from a DeepSpeed clone's tags, never imported (scripts/ds_keys_static.py)::

    python scripts/gen_ds_keys.py --git CLONE --tag v0.16.9   # CLONE: github.com/deepspeedai/DeepSpeed

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

from ds_keys_static import OUT_DIR, build_table_from_git, build_table_from_sdist, engine_optimizer_keys


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
    engine_keys = engine_optimizer_keys(engine_src, {k: v for k, v in vars(ds_config).items()
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=OUT_DIR)
    ap.add_argument("--sdist", help="read an older release statically from its sdist tarball")
    ap.add_argument("--git", metavar="CLONE", help="read a release statically from a DeepSpeed clone (with --tag)")
    ap.add_argument("--tag", help="the release tag to read from --git, e.g. v0.16.9")
    args = ap.parse_args()
    if bool(args.git) != bool(args.tag):
        ap.error("--git and --tag go together")
    if args.git:
        table = build_table_from_git(args.git, args.tag)
    elif args.sdist:
        table = build_table_from_sdist(args.sdist)
    else:
        table = build_table()
    path = os.path.join(args.out_dir, f"ds_keys_{table['release']}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(table, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {os.path.relpath(path)}: {len(table['top_level'])} top-level keys, "
          f"{len(table['sections'])} sections", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
