"""Lints of the config file's own keys: duplicates (DS301), unknown keys (DS302, DS303), rejected
values (DS319), numbers written as strings (DS318), config vs the printed one (DS320).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from dsdoctor.diagnose.checks.common import (
    as_numlike,
    finding,
    lintable,
    same_value,
    show_json,
    strip_strings,
)
from dsdoctor.diagnose.checks.trainer import _BATCH
from dsdoctor.facts import dskeys
from dsdoctor.facts.configfile import ConfigDoc, lookup
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

# ------------------------------------------------------------------------ DS301 duplicate keys

#: Duplicate keys explained one by one per config file; the rest are counted in one finding.
MAX_DUPLICATES_SHOWN = 50


def duplicate_keys(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Keys written twice in one object: DeepSpeed refuses the file."""
    seen: set[str] = set()
    hf = bool(ctx.run.value("uses_trainer")) or ctx.uses_accelerate
    docs: list[ConfigDoc] = []
    for doc in ctx.configs:
        docs.append(doc)
        if doc.deepspeed is not None:
            docs.append(doc.deepspeed)
    for doc in docs:
        # An Accelerate config's deepspeed_config_file may also be given with --config: once.
        if doc.path in seen or doc.synthesized:
            continue
        seen.add(doc.path)
        for dup in doc.duplicates[:MAX_DUPLICATES_SHOWN]:
            severity = ""
            if doc.kind != "deepspeed":
                where = "YAML keeps the last value without a word"
                severity = "warning"
            elif hf:
                # the Trainer/Accelerate json.load the file and hand DeepSpeed a dict: no check
                where = ("the Trainer/Accelerate read the file with json.load, which keeps the last "
                         "value without a word, and hand DeepSpeed the result")
                severity = "warning"
            else:
                where = ("DeepSpeed refuses the file (ValueError: Duplicate keys in DeepSpeed "
                         "config) when it reads the path itself; under the Trainer or Accelerate "
                         "json.load keeps the last value silently")
            a, b = ((f"{dup.first.line}:{dup.first.col}", f"{dup.pos.line}:{dup.pos.col}")
                    if dup.first.line == dup.pos.line else (str(dup.first.line), str(dup.pos.line)))
            yield finding(
                f"'{dup.path}' is written twice: line {a} and line {b}. {where}.",
                severity=severity,
                path=dup.path, file=dup.pos.file, line=dup.pos.line,
                fix=f"delete one of the two '{dup.path.rpartition('.')[2]}' entries "
                    f"(lines {a} and {b}), keeping the value you mean")
        rest = doc.duplicates[MAX_DUPLICATES_SHOWN:]
        if rest:  # 10^5 duplicates: one finding each would be 10^5 paragraphs (issue 24)
            names = sorted({d.path for d in rest})
            yield finding(
                f"{len(rest):,} more keys are written more than once in {doc.path} (the first "
                f"{MAX_DUPLICATES_SHOWN} are shown one by one; these are only counted): "
                + ", ".join(f"'{n}'" for n in names[:5])
                + (f" and {len(names) - 5:,} more names" if len(names) > 5 else "") + ".",
                severity="warning" if doc.kind != "deepspeed" or hf else "",
                path=rest[0].path, file=rest[0].pos.file, line=rest[0].pos.line,
                fix="keep one entry per key")


# ------------------------------------------------------------------ DS302/DS303 unknown keys

def _release_story(path: str, value: Any) -> str:
    """Which releases refuse, ignore or read this key."""
    refuse, ignore, read = [], [], []
    rejecting = dskeys.releases_rejecting(path, value)
    for rel in dskeys.available_releases():
        t = dskeys.table_for(rel)
        if rel in rejecting:
            refuse.append(rel)
        elif t.is_known(path):
            read.append(rel)
        else:
            ignore.append(rel)
    parts = []
    if refuse:
        parts.append(f"refused by DeepSpeed {dskeys.release_ranges(refuse)}")
    if ignore:
        parts.append(f"silently ignored by {dskeys.release_ranges(ignore)}")
    if read:
        parts.append(f"read by {dskeys.release_ranges(read)}")
    return "; ".join(parts)


#: apex.amp.initialize()'s keywords. DeepSpeed releases that still read "amp" pass every key of
#: the section but "enabled" to it (runtime/config.py get_amp_params), so these are read.
_APEX_AMP_KEYWORDS = frozenset({
    "opt_level", "cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32",
    "master_weights", "loss_scale", "cast_model_outputs", "num_losses", "verbosity",
    "min_loss_scale", "max_loss_scale"})


#: Unknown keys explained one by one per rule (each with a difflib suggestion and its story over
#: every release); the rest are counted in one more finding that names the first few of them.
#: A config with 10,000 unknown keys gave 10,000 findings and took a minute (issue 14).
MAX_UNKNOWN_SHOWN = 50
_REST_NAMED = 5


def _unknown(ctx: Context, rejected: bool) -> Iterator[Finding]:
    doc = lintable(ctx)
    if doc is None:
        return
    table = dskeys.table_for(ctx.ds_version)
    note = dskeys.table_note(ctx.ds_version, ctx.ds_version_source)
    shown = 0
    rest: list[dskeys.UnknownKey] = []
    for u in table.check(doc.data, suggest=False):  # set lookups; suggestions for shown keys
        if u.rejected != rejected:
            continue
        if u.section == "amp" and not u.rejected and u.key in _APEX_AMP_KEYWORDS:
            continue  # handed to apex.amp.initialize(**amp_params): read, not ignored
        if shown >= MAX_UNKNOWN_SHOWN:
            rest.append(u)
            continue
        shown += 1
        removed = (u.key in table.removed_top_level if not u.section
                   else u.section == "zero_optimization" and u.key in table.removed_zero)
        if not removed:
            u = replace(u, suggestion=table.suggest(u.key, u.section))
        yield _unknown_finding(doc, table, u, rejected, note)
    if rest:
        yield _more_unknown(table.release, rest, rejected)


def _more_unknown(release: str, rest: list[dskeys.UnknownKey], rejected: bool) -> Finding:
    """One finding for the unknown keys past MAX_UNKNOWN_SHOWN: counted, the first few named."""
    named = ", ".join(f"'{u.path}'" for u in rest[:_REST_NAMED])
    more = f" and {len(rest) - _REST_NAMED:,} more" if len(rest) > _REST_NAMED else ""
    verb = "refuses" if rejected else "ignores"
    return finding(
        f"{len(rest):,} more keys DeepSpeed {release} {verb} (the first {MAX_UNKNOWN_SHOWN} "
        f"are explained one by one; these are only counted): {named}{more}.",
        path=rest[0].path,
        fix=(f"delete the keys DeepSpeed {release} does not read (or move them out of the "
             "DeepSpeed config), then run dsdoctor again to see the ones left"))


def _unknown_finding(doc: ConfigDoc, table: Any, u: dskeys.UnknownKey, rejected: bool,
                     note: str) -> Finding:
    """The finding for one unknown key: what DeepSpeed does with it, the key probably meant."""
    value = doc.get(u.path)
    story = _release_story(u.path, value)
    if u.section == "amp" and not u.rejected:
        return _apex_keyword(u.path, u.key, value, table.release)
    mean = f" Did you mean '{u.suggestion}'?" if u.suggestion else ""
    change = None
    if u.suggestion and not doc.has(u.suggestion) and u.suggestion.rpartition(".")[0] == u.section:
        # Renaming a typo inside its own section cannot make a working run worse: the typo
        # is either refused (the run does not start) or ignored (the default is used).
        change = {"op": "rename", "path": u.path, "new_path": u.suggestion, "old": value}
    if (u.section in ("bf16", "bfloat16") and not u.suggestion
            and u.key in table.section_keys("fp16")):
        mean = (" It is an fp16 setting: bf16 has fp32's exponent range and needs no loss "
                "scaling, so it does nothing here.")
        change = {"op": "delete", "path": u.path, "old": value}
    # A top-level section written inside another ("aio" in zero_optimization, as in the
    # Transformers guide's NVMe example): DeepSpeed reads it only at the top level.
    misplaced = bool(u.section) and not u.suggestion and u.key in table.top_level \
        and not doc.has(u.key)
    if misplaced:
        mean = (f" '{u.key}' is a top-level section: DeepSpeed reads it only there, so its "
                "settings belong at the top level of the config.")
        change = {"op": "rename", "path": u.path, "new_path": u.key, "old": value}
    if rejected:
        msg = (f"'{u.path}' is not a key DeepSpeed {table.release} accepts: {u.reason.rstrip('.')}."
               f"{mean} ({story}; {note}.)")
        fix = (f"rename '{u.path}' to '{u.suggestion}'" if u.suggestion
               else f"move '{u.path}' to the top level as '{u.key}'" if misplaced
               else f"delete '{u.path}'")
    else:
        effect = ("the whole section is ignored and every key in it takes its default"
                  if isinstance(value, dict) else "the default value is used instead")
        msg = (f"'{u.path}' is not a key DeepSpeed {table.release} reads: {u.reason}, so "
               f"{effect}.{mean} ({story}; {note}.)")
        fix = (f"rename '{u.path}' to '{u.suggestion}'" if u.suggestion
               else f"move '{u.path}' to the top level as '{u.key}'" if misplaced
               else f"delete '{u.path}' or check the DeepSpeed config documentation for the right name")
    return finding(msg, path=u.path, fix=fix, change=change)


def _apex_keyword(path: str, key: str, value: Any, release: str) -> Finding:
    """An "amp" key apex.amp.initialize() does not take (DeepSpeed hands it every amp key)."""
    match = difflib.get_close_matches(key, sorted(_APEX_AMP_KEYWORDS), n=1, cutoff=0.75)
    mean = f" Did you mean 'amp.{match[0]}'?" if match else ""
    change = {"op": "rename", "path": path, "new_path": f"amp.{match[0]}", "old": value} \
        if match else None
    return finding(
        f"'{path}' is not an apex.amp.initialize() keyword: DeepSpeed {release} passes every "
        f"'amp' key but 'enabled' to it (runtime/config.py get_amp_params), so the run stops "
        f"with a TypeError when Apex AMP starts.{mean}",
        path=path, change=change,
        fix=(f"rename '{path}' to 'amp.{match[0]}'" if match
             else f"delete '{path}' (apex.amp.initialize takes: "
                  f"{', '.join(sorted(_APEX_AMP_KEYWORDS))})"))


def unknown_keys_ignored(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Unknown keys the target release silently ignores (warning: the setting has no effect)."""
    yield from _unknown(ctx, rejected=False)


def unknown_keys_rejected(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Unknown or removed keys the target release refuses (error: the run does not start)."""
    yield from _unknown(ctx, rejected=True)


# ------------------------------------------------------------------ DS319 values refused

def values_rejected(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Values the target release's config models refuse (type, range, choices)."""
    doc = lintable(ctx)
    if doc is None:
        return
    table = dskeys.table_for(ctx.ds_version)
    note = dskeys.table_note(ctx.ds_version, ctx.ds_version_source)
    for bad in table.check_values(doc.data):
        hint = ' (or "auto" under the Trainer)' if ctx.run.value("uses_trainer") else ""
        yield finding(
            f"{bad.path} is {show_json(bad.value)}: DeepSpeed {table.release} refuses it at "
            f"deepspeed.initialize ({bad.reason}; pydantic ValidationError; {note}).",
            path=bad.path,
            fix=f"set {bad.path} to a value that {bad.reason.replace('must be', 'is', 1)}{hint}")


# ------------------------------------------------------------ DS318 numbers written as strings

_NUMERIC_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                 "gradient_clipping", "steps_per_print", "zero_optimization.stage",
                 "optimizer.params.lr", "optimizer.params.eps", "optimizer.params.weight_decay",
                 "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps",
                 "scheduler.params.warmup_max_lr", "scheduler.params.warmup_min_lr",
                 "fp16.initial_scale_power", "fp16.loss_scale", "fp16.loss_scale_window",
                 "fp16.hysteresis", "fp16.min_loss_scale")


def numbers_as_strings(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Numeric settings written as strings ("8"): crashes or silent mismatches."""
    doc = lintable(ctx)
    if doc is None:
        return
    # a string pydantic cannot parse ("5e8" for an int) is refused: DS319 says so
    refused = {bad.path for bad in dskeys.table_for(ctx.ds_version).check_values(doc.data)}
    for key in _NUMERIC_KEYS:
        v = doc.get(key)
        if not isinstance(v, str) or v == "auto" or as_numlike(v) is None or key in refused:
            continue
        new = strip_strings(v)
        if key in _BATCH:
            effect = ("DeepSpeed computes with it and crashes at deepspeed.initialize with a "
                      "TypeError (e.g. 'unsupported operand type(s) for //: 'str' and 'int'')")
            sev = "error"
        elif key == "zero_optimization.stage":
            effect = ("DeepSpeed's config model converts it, but Transformers' and Accelerate's "
                      "HfDeepSpeedConfig compare the stage with the number (is_zero3: "
                      "self._stage == 3), so they do not see ZeRO-3 and from_pretrained does not "
                      "load the model under deepspeed.zero.Init") if as_numlike(v) == 3 else (
                "DeepSpeed's config model converts it, but Transformers' and Accelerate's "
                "HfDeepSpeedConfig keep the string and compare the stage with numbers")
            sev = "error" if as_numlike(v) == 3 else "warning"
        elif key.startswith(("optimizer.", "scheduler.")) or key == "gradient_clipping":
            effect = "DeepSpeed passes the string on, and the optimizer/engine fails when it computes with it"
            sev = "error"
        else:
            effect = ("DeepSpeed's config model converts it, but the Trainer's check compares it "
                      "with a number and reports a mismatch")
            sev = "warning"
        yield finding(
            f"{key} is the string {show_json(v)}, not the number {show_json(new)}: {effect}.",
            path=key, severity=sev, fix=f"write {key}: {show_json(new)} (no quotes)",
            change={"op": "set", "path": key, "old": v, "new": new})


# ------------------------------------------------------------ DS320 --config vs the log's config

def _leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data


def config_differs_from_log(ctx: Context, rule: Any) -> Iterator[Finding]:
    """The config given with --config is not the one the logged run used."""
    if ctx.ds is None or ctx.ds_source not in ("config", "accelerate") or not ctx.ds_from_log:
        return
    lf = ctx.log_facts
    ev_map = getattr(lf, "evidence", None) or {}
    evidence = tuple(e for e in (ev_map.get("ds-config-json") or ev_map.get("engine-config"),) if e)
    where = ("the user config the engine printed (json = {...})"
             if getattr(lf, "ds_config_source", None) == "json"
             else "the engine's printed configuration")
    diffs: list[tuple[str, Any, Any]] = []
    missing = object()
    for path, mine in _leaves(ctx.ds.data):
        if mine == "auto" or isinstance(mine, (dict, list)) and not mine:
            continue
        theirs = lookup(ctx.ds_from_log, path, missing)
        if theirs is missing or theirs == "auto":
            continue
        # Accelerate (so the Trainer too) always overwrites steps_per_print with inf
        # (accelerate/utils/dataclasses.py): not a sign of another config.
        if path == "steps_per_print" and isinstance(theirs, float) and math.isinf(theirs):
            continue
        a, b = as_numlike(mine), as_numlike(theirs)
        if same_value(mine, theirs) or (a is not None and b is not None and math.isclose(a, b)):
            continue
        # DeepSpeed normalizes names it prints ("AdamW" -> "adamw", enums as their value).
        if isinstance(mine, str) and isinstance(theirs, str) and \
                mine.strip().lower() == theirs.strip().lower().rpartition(".")[2]:
            continue
        diffs.append((path, mine, theirs))
    for path, mine, theirs in diffs[:10]:
        yield finding(
            f"{path} is {show_json(mine)} in {ctx.ds.path}, but the run in the log used "
            f"{show_json(theirs)} ({where}): the log was not produced with this config, or the config "
            f"changed since. Findings that combine the two may not apply.",
            path=path, evidence=evidence,
            fix=f"give the config the logged run really used, or rerun with this one "
                f"({path}: {show_json(theirs)} in the log)")
