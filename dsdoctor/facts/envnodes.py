"""Several nodes' environment snapshots (``dsdoctor env --format json`` on each node), compared.

A multi-node job runs one software stack per node; ``--env a.json --env b.json`` (or a folder of
snapshots, or a quoted glob) gives analyze and report one snapshot per node, and the fields below
must read the same on all of them (DS246 reports those that do not; ``report`` prints the table).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dsdoctor.errors import UsageError

_HINT = "collect the snapshots with 'dsdoctor env --format json -o env-$(hostname).json' on each node"


def _gpu_field(key: str) -> Callable[[dict[str, Any]], str | None]:
    def read(s: dict[str, Any]) -> str | None:
        return ", ".join(sorted({str(g.get(key)) for g in s.get("gpus") or []
                                 if isinstance(g, dict) and g.get(key)})) or None
    return read


#: What must agree between nodes: (label, how to read it from a snapshot).
NODE_FIELDS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("NVIDIA driver", _gpu_field("driver")),
    ("CUDA (torch)", lambda s: (s.get("cuda") or {}).get("torch_cuda")),
    ("CUDA (nvcc)", lambda s: (s.get("cuda") or {}).get("nvcc_version")),
    ("NCCL (torch)", lambda s: (s.get("cuda") or {}).get("torch_nccl")),
    ("torch", lambda s: (s.get("packages") or {}).get("torch")),
    ("deepspeed", lambda s: (s.get("packages") or {}).get("deepspeed")),
    ("transformers", lambda s: (s.get("packages") or {}).get("transformers")),
    ("accelerate", lambda s: (s.get("packages") or {}).get("accelerate")),
    ("Python", lambda s: (s.get("python") or {}).get("version")),
    ("GPU", _gpu_field("name")),
)


def expand_specs(specs: Sequence[str]) -> list[str]:
    """``--env`` values: files, ``local``, folders (their ``*.json``) or globs (``'env-*.json'``,
    quoted from the shell), each once, in the order given."""
    out: list[str] = []
    for spec in specs:
        if spec != "local" and os.path.isdir(spec):
            found = sorted(str(p) for p in Path(spec).glob("*.json") if p.is_file())
            if not found:
                raise UsageError(f"--env {spec}: a folder without *.json snapshots; {_HINT}")
            out.extend(found)
        elif spec != "local" and not Path(spec).exists() and glob.has_magic(spec):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise UsageError(f"--env {spec}: no file matches; {_HINT}")
            out.extend(matches)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))


def node_name(path: str) -> str:
    """``env-node1.json`` -> ``node1``: the file name is all a snapshot says about its host."""
    stem = Path(path).name
    for suffix in (".json", ".gz"):
        stem = stem.removesuffix(suffix)
    return stem.removeprefix("env-").removeprefix("env_") or stem


def node_differences(envs: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, str]]]:
    """(label, {node: value}) for each field whose value differs between the snapshots (a node
    whose snapshot does not say is ``unknown`` and differs from none)."""
    out = []
    for label, get in NODE_FIELDS:
        vals = {}
        for path, snap in envs:
            try:
                v = get(snap)
            except (AttributeError, TypeError):
                v = None
            vals[node_name(path)] = str(v) if v not in (None, "") else "unknown"
        known = {v for v in vals.values() if v != "unknown"}
        if len(known) > 1:
            out.append((label, vals))
    return out


__all__ = ["NODE_FIELDS", "expand_specs", "node_differences", "node_name"]
