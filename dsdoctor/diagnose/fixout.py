"""``--fix-out FILE``: write a copy of the DeepSpeed config with the safe fixes applied.

Only findings that carry a ``fix_change`` are applied: renaming a typo'd key inside its own
section, deleting a setting the release ignores anyway (``offload_param`` below stage 3), writing
a number without quotes, ``"auto"`` for a value the Trainer refused. Anything that needs a decision
(which precision, which batch size, whether to gather 16-bit weights on save) stays in the report.

The original file is never touched: the copy goes to a NEW path (refused when it is an input, a
link to one, a directory or a device, or an existing file without ``--force``), written atomically
with the input's mode bits (never writable by group or others). The copy is the input's text with
only the fixed members' bytes changed (``jsonsplice``): indentation, key order, comments, number
spellings, line endings and the trailing newline stay as written. A duplicated key that is deleted
or renamed loses its earlier occurrences too (``json.load`` kept only the last).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from dsdoctor.diagnose import jsonsplice
from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import ConfigDoc, JsonLayout, config_bytes, json_layout, load_config, lookup, split_path
from dsdoctor.model import Finding
from dsdoctor.safeio import one_line, same_file, write_new_file

_BOM = "\ufeff"

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


def _same_data(a: Any, b: Any) -> bool:
    """Equal configs (NaN equal to NaN, 2e8 to 200000000)."""
    return bool(a == b) or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _edit(layout: JsonLayout, ch: dict[str, Any]) -> str:
    """The text with one change made (``apply_changes`` said it applies)."""
    op, path = ch["op"], ch["path"]
    if op == "set":
        if path in layout.members:
            return jsonsplice.set_value(layout, path, ch.get("new"))
        return jsonsplice.insert_member(layout, path, jsonsplice.rendered(ch.get("new"), layout))
    if op == "delete":
        return jsonsplice.delete_member(layout, path)
    new_path = str(ch.get("new_path"))
    if split_path(new_path)[:-1] == split_path(path)[:-1]:
        return jsonsplice.rename_key(layout, path, str(split_path(new_path)[-1]))
    moved = jsonsplice.moved_value(layout, path)
    removed = json_layout(jsonsplice.delete_member(layout, path), layout.file)
    return jsonsplice.insert_member(removed, new_path, moved)


def _without_shadowed(layout: JsonLayout, path: str) -> JsonLayout:
    """The layout with the earlier occurrences of a duplicated key removed (the value that
    counts stays): a deleted or renamed key must not let an older copy come back."""
    while layout.shadowed.get(path):
        obj = layout.objects[jsonsplice.parent_of(path)]
        layout = json_layout(jsonsplice.delete_span(layout, obj, layout.shadowed[path][0]),
                             layout.file)
    return layout


def apply_to_text(text: str, changes: Iterable[dict[str, Any]], file: str = "<config>"
                  ) -> tuple[str, list[str]]:
    """The config's text with the fixes made in place: (new text, one line per applied change).

    The same changes as :func:`apply_changes` apply (each one checked the same way), and the new
    text must read back as exactly the config ``apply_changes`` gives; every byte no fix touches
    is the input's."""
    layout = json_layout(text, file)
    original = layout.data
    applied: list[dict[str, Any]] = []
    done: list[str] = []
    seen: set[str] = set()
    for ch in changes:
        path = ch.get("path")
        if not isinstance(path, str) or path in seen:
            continue
        want, said = apply_changes(layout.data, [ch])
        if not said:
            continue
        try:
            if ch.get("op") in ("delete", "rename"):
                layout = _without_shadowed(layout, path)
            layout = json_layout(_edit(layout, ch), file)
        except (jsonsplice.SpliceError, KeyError, UsageError) as exc:
            raise UsageError(f"--fix-out: cannot edit {one_line(path)} in {one_line(file)} "
                             f"in place ({exc}); nothing written, apply the fix by hand") from None
        if not _same_data(layout.data, want):
            raise UsageError(f"--fix-out: editing {one_line(path)} in {one_line(file)} did not "
                             "give the fixed config; nothing written, apply the fix by hand")
        applied.append(ch)
        done += said
        seen.add(path)
    if not _same_data(layout.data, apply_changes(original, applied)[0]):
        raise UsageError(f"--fix-out: the edited {one_line(file)} does not read back as the fixed "
                         "config; nothing written, apply the fixes by hand")
    return layout.text, done


def _target_doc(configs: Iterable[str]) -> ConfigDoc:
    for path in configs:
        doc = load_config(path)
        if doc.kind == "deepspeed" and not doc.synthesized:
            return doc
        if doc.deepspeed is not None and not doc.deepspeed.synthesized:
            return doc.deepspeed
    raise UsageError("--fix-out needs a DeepSpeed JSON config: give it with --config ds_config.json "
                     "(an Accelerate config without deepspeed_config_file has nothing to rewrite)")


def write_fixed(configs: Sequence[str], target: str, report: Any, force: bool = False,
                inputs: Sequence[str] = ()) -> str | None:
    """Write the fixed copy of the DeepSpeed config among ``configs`` to ``target`` (--fix-out);
    returns its path, or None if nothing to fix. ``inputs``: every file the run reads, none of
    which is ever written."""
    doc = _target_doc(list(configs))
    if same_file(target, doc.path):
        raise UsageError(f"--fix-out {one_line(target)}: that is the input config; give a new file "
                         "name (dsdoctor never modifies your config)")
    findings: list[Finding] = list(getattr(report, "findings", ()) or ())
    changes = [f.fix_change for f in findings if f.fix_change
               and (f.config_file is None or same_file(f.config_file, doc.path))]
    raw = config_bytes(doc.path)
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = raw[3 if bom else 0:].decode("utf-8")  # load_config decoded it already
    fixed, done = apply_to_text(text, changes, doc.path)
    if not done:
        print("dsdoctor: --fix-out: no safe fix applies to this config; nothing written",
              file=sys.stderr)
        return None
    try:
        mode = os.stat(doc.path).st_mode
    except OSError:
        mode = 0o644
    write_new_file(target, ((_BOM if bom else "") + fixed).encode("utf-8"),
                   [*inputs, doc.path], force=force, mode=mode, option="--fix-out")
    for line in done:
        print(f"dsdoctor: --fix-out: {line}", file=sys.stderr)
    return target
