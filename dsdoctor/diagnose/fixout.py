"""``--fix-out FILE``: write a copy of the DeepSpeed config with the safe fixes applied.

Only findings that carry a ``fix_change`` are applied: renaming a typo'd key inside its own
section, deleting a setting the release ignores anyway (``offload_param`` below stage 3), writing
a number without quotes, ``"auto"`` for a value the Trainer refused. Anything that needs a decision
(which precision, which batch size, whether to gather 16-bit weights on save) stays in the report.

The original file is never touched: the copy goes to a NEW path (refused when it is the input, or
an existing file without ``--force``), written atomically. The copy is plain JSON: comments are
not kept, and a duplicated key keeps its last value (what ``json.load`` does).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import ConfigDoc, load_config, lookup, split_path
from dsdoctor.model import Finding
from dsdoctor.safeio import same_file

_MISSING = object()


def _parent_and_key(data: dict[str, Any], path: str, create: bool = False) -> tuple[Any, Any]:
    parts = split_path(path)
    cur: Any = data
    for part in parts[:-1]:
        if isinstance(part, int):
            if not isinstance(cur, list) or part >= len(cur):
                return None, None
            cur = cur[part]
            continue
        if not isinstance(cur, dict):
            return None, None
        if part not in cur:
            if not create:
                return None, None
            cur[part] = {}
        cur = cur[part]
    return cur, parts[-1] if parts else None


def apply_changes(data: dict[str, Any], changes: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Apply machine-readable fixes to a copy of ``data``: (new data, one line per applied change).

    A change whose ``old`` value no longer matches (another fix touched it) is skipped.
    """
    out = copy.deepcopy(data)
    done: list[str] = []
    seen: set[str] = set()
    for ch in changes:
        op, path = ch.get("op"), ch.get("path")
        if not isinstance(path, str) or path in seen:
            continue
        current = lookup(out, path, _MISSING)
        if "old" in ch and current is not _MISSING and current != ch["old"]:
            continue
        if op == "rename":
            new_path = ch.get("new_path")
            parent, key = _parent_and_key(out, path)
            if not isinstance(parent, dict) or key not in parent:
                continue
            # Only now may the target's missing sections be created (a skipped rename adds none).
            new_parent, new_key = _parent_and_key(out, str(new_path), create=True)
            if not isinstance(new_parent, dict) or new_key in new_parent:
                continue
            # Keep the key's place in its section: rebuild the dict in order.
            if new_parent is parent:
                items = [((new_key if k == key else k), v) for k, v in parent.items()]
                parent.clear()
                parent.update(items)
            else:
                new_parent[new_key] = parent.pop(key)
            done.append(f"renamed {path} -> {new_path}")
        elif op == "delete":
            parent, key = _parent_and_key(out, path)
            if not isinstance(parent, dict) or key not in parent:
                continue
            del parent[key]
            done.append(f"deleted {path}")
        elif op == "set":
            parent, key = _parent_and_key(out, path, create=True)
            if not isinstance(parent, dict) or isinstance(key, int):
                continue
            parent[key] = ch.get("new")
            old = "(absent)" if current is _MISSING else json.dumps(current)
            done.append(f"set {path}: {old} -> {json.dumps(ch.get('new'))}")
        else:
            continue
        seen.add(path)
    return out, done


def _target_doc(configs: Iterable[str]) -> ConfigDoc:
    for path in configs:
        doc = load_config(path)
        if doc.kind == "deepspeed" and not doc.synthesized:
            return doc
        if doc.deepspeed is not None and not doc.deepspeed.synthesized:
            return doc.deepspeed
    raise UsageError("--fix-out needs a DeepSpeed JSON config: give it with --config ds_config.json "
                     "(an Accelerate config without deepspeed_config_file has nothing to rewrite)")


def write_fixed(configs: Sequence[str], target: str, report: Any, force: bool = False) -> str | None:
    """Write the fixed copy of the DeepSpeed config among ``configs`` to ``target`` (--fix-out);
    returns its path, or None if nothing to fix."""
    doc = _target_doc(list(configs))
    if same_file(target, doc.path):
        raise UsageError(f"--fix-out {target}: that is the input config; give a new file name "
                         "(dsdoctor never modifies your config)")
    if os.path.exists(target) and not force:
        raise UsageError(f"--fix-out {target}: the file exists; choose a new name or add --force")
    findings: list[Finding] = list(getattr(report, "findings", ()) or ())
    changes = [f.fix_change for f in findings if f.fix_change
               and (f.config_file is None or same_file(f.config_file, doc.path))]
    fixed, done = apply_changes(doc.data, changes)
    if not done:
        print("dsdoctor: --fix-out: no safe fix applies to this config; nothing written",
              file=sys.stderr)
        return None
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dsdoctor-fix-", suffix=".json", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(fixed, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, target)
    except OSError as exc:
        raise UsageError(f"--fix-out {target}: cannot write ({exc.strerror or exc})") from None
    for line in done:
        print(f"dsdoctor: --fix-out: {line}", file=sys.stderr)
    if doc.duplicates:
        print("dsdoctor: --fix-out: duplicated keys keep their last value in the copy",
              file=sys.stderr)
    return target
