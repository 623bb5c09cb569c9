"""Which DeepSpeed config keys each release knows, and what it does with the ones it does not.

The tables are data (``dsdoctor/data/ds_keys_<release>.json``), generated from DeepSpeed's own
config models and sources by ``scripts/gen_ds_keys.py``; nothing here imports DeepSpeed.

What a release does with an unknown key decides the severity: sections parsed by a pydantic model
with ``extra="forbid"`` (``zero_optimization``, ``fp16``, ``bf16``, the offload sections, ...)
refuse to start (an error), and so do ``optimizer.params`` and ``scheduler.params``, whose keys
DeepSpeed passes to the optimizer's or scheduler's constructor (a TypeError), while misspelled
top-level keys and sections read key by key (``aio``...) are silently ignored and their defaults
used (a warning: the setting has no effect). A value of ``"auto"`` is dropped before validation
in releases that have pydantic sections, so an unknown key set to ``"auto"`` is ignored, not
refused.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dsdoctor.facts.configfile import lookup

#: Sections whose every key DeepSpeed passes as a keyword to a constructor: a key the class does
#: not take raises a TypeError at deepspeed.initialize (engine.py _configure_basic_optimizer,
#: ``torch.optim.AdamW(model_parameters, **optimizer_parameters)``, and _scheduler_from_config,
#: ``scheduler(optimizer, **scheduler_params)``, 0.9.5 to 0.19.5).
CONSTRUCTOR_SECTIONS = {"optimizer.params": "optimizer", "scheduler.params": "LR scheduler"}

_FILE = re.compile(r"^ds_keys_(\d+(?:\.\d+)*)\.json$")


def parse_version(v: str) -> tuple[int, ...]:
    """``"0.19.8"`` -> ``(0, 19, 8)`` (non-numeric tails ignored)."""
    parts = []
    for p in v.strip().lstrip("v").split("."):
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


@dataclass(frozen=True)
class UnknownKey:
    """A key the release does not know."""

    path: str  # dotted path of the unknown key
    key: str
    section: str  # "" for top level
    suggestion: str | None  # dotted path of the key probably meant
    rejected: bool  # True: this release refuses to start; False: silently ignored
    reason: str  # why (DeepSpeed's own message for removed features)


@dataclass(frozen=True)
class KeyTable:
    """The known keys of one release."""

    release: str
    top_level: frozenset[str]
    sections: dict[str, dict[str, Any]]  # parents before children; "keys" as a frozenset
    removed_top_level: dict[str, str]
    removed_zero: dict[str, str]

    def section_keys(self, section: str) -> frozenset[str]:
        """Keys a section accepts (empty for an unknown section)."""
        return self.sections.get(section, {}).get("keys", frozenset())

    def is_strict(self, section: str) -> bool:
        """True when the release refuses unknown keys in this section."""
        return bool(self.sections.get(section, {}).get("strict"))

    def is_known(self, path: str) -> bool:
        """True when a dotted path names a key this release reads."""
        section, _, key = path.rpartition(".")
        if not section:
            return key in self.top_level
        return key in self.section_keys(section)

    def suggest(self, key: str, section: str) -> str | None:
        """The closest known key (difflib), as a dotted path, or None."""
        known = sorted(self.section_keys(section) if section else self.top_level)
        low = key.lower().replace("-", "_")
        for k in known:  # case or dash slip: certain
            if k.lower() == low:
                return f"{section}.{k}" if section else k
        match = difflib.get_close_matches(low, known, n=1, cutoff=0.75)
        if match:
            return f"{section}.{match[0]}" if section else match[0]
        if not section:  # a section key written at the top level ("stage": 3)
            for sec, info in sorted(self.sections.items()):
                if key in info.get("keys", ()) and "." not in sec and sec not in ("optimizer", "scheduler"):
                    return f"{sec}.{key}"
        return None

    def check(self, data: dict[str, Any], suggest: bool = True) -> list[UnknownKey]:
        """Unknown and removed keys of a DeepSpeed config, in the order they are written.
        ``suggest=False``: no suggestion (a caller that shows only the first few asks
        ``suggest()`` for those: difflib per key is the cost of a 10,000-key config)."""
        out: list[UnknownKey] = []
        for key in data:
            if key in self.removed_top_level:
                out.append(UnknownKey(key, key, "", None, True, self.removed_top_level[key]))
            elif key not in self.top_level and not is_comment_key(key):
                out.append(UnknownKey(key, key, "", self.suggest(key, "") if suggest else None, False,
                                      f"DeepSpeed {self.release} ignores unknown top-level keys"))
        for section in self.sections:
            value = lookup(data, section)
            if not isinstance(value, dict):
                continue
            strict = self.is_strict(section)
            for key, item in value.items():
                path = f"{section}.{key}"
                if section == "zero_optimization" and key in self.removed_zero:
                    out.append(UnknownKey(path, key, section, None, True, self.removed_zero[key]))
                    continue
                if key in self.section_keys(section):
                    continue
                # pydantic sections drop "auto" before validating: an unknown "auto" key is ignored
                rejected = (strict and item != "auto") or section in CONSTRUCTOR_SECTIONS
                if not rejected and is_comment_key(key):
                    continue  # "_comment": a note for people, harmless where it is ignored
                if section in CONSTRUCTOR_SECTIONS:  # whatever the value: the keyword is unknown
                    reason = (f"DeepSpeed {self.release} passes every key of '{section}' to the "
                              f"{CONSTRUCTOR_SECTIONS[section]}'s constructor, which raises a "
                              f"TypeError (unexpected keyword argument '{key}')")
                elif rejected:
                    reason = (f"DeepSpeed {self.release} refuses unknown keys in '{section}' "
                              "(Extra inputs are not permitted)")
                else:
                    reason = f"DeepSpeed {self.release} ignores unknown keys in '{section}'"
                out.append(UnknownKey(path, key, section,
                                      self.suggest(key, section) if suggest else None, rejected,
                                      reason))
        return out

    def check_values(self, data: dict[str, Any]) -> list[BadValue]:
        """Values the release's pydantic sections refuse, in section order."""
        out: list[BadValue] = []
        for section in self.sections:
            cons = self.sections[section].get("constraints")
            value = lookup(data, section)
            if not cons or not isinstance(value, dict):
                continue
            for key, item in value.items():
                rule = cons.get(key)
                if rule is None:
                    continue
                why = value_problem(item, rule)
                if why:
                    out.append(BadValue(f"{section}.{key}", item, why))
        return out


@dataclass(frozen=True)
class BadValue:
    """A value the release's config model refuses (wrong type, out of range, not a choice)."""

    path: str
    value: Any
    reason: str


#: A string pydantic parses as an int: digits, maybe a sign and underscores, maybe ".0".
_INT_STRING = re.compile(r"[+-]?\d[\d_]*(?:\.0*)?")
_BOOL_STRINGS = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}


def as_number(v: Any) -> float | None:
    """A number, also when written as a string ("8", "2e-5"); None for bools and the rest."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:  # an int past float's range (10^400): infinite as a size
            return math.inf if v > 0 else -math.inf
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def as_real(v: Any) -> float | None:
    """A finite number as written (not bool, not a string), or None: ``Infinity``, ``NaN``,
    ``1e400`` (inf once parsed) and an int past float's range are no size to compute with."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def value_problem(value: Any, rule: dict[str, Any]) -> str | None:
    """Why pydantic (lax mode, as DeepSpeed uses it) would refuse ``value``, or None."""
    if value == "auto" or value is None:
        return None  # "auto" is dropped before validation; null means "default" for Optionals
    if "choices" in rule:
        choices = rule["choices"]
        v = value
        if isinstance(value, str) and all(isinstance(c, int) for c in choices):
            n = as_number(value)
            v = int(n) if n is not None and n.is_integer() else value
        if isinstance(v, bool) or v not in choices:
            return f"must be one of {', '.join(json.dumps(c) for c in choices)}"
        return None
    typ = rule.get("type")
    if typ == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        if isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS:
            return None
        return "must be true or false"
    n = as_number(value)
    if typ in ("int", "float"):
        if n is None:
            return f"must be a number ({typ})"
        if typ == "int" and math.isfinite(n) and not n.is_integer():
            return "must be a whole number"
        if typ == "int" and isinstance(value, str) and not _INT_STRING.fullmatch(value.strip()):
            # pydantic parses "500000000" (and v2 "5.0") as an int, never "5e8": int_parsing
            return "must be an integer: pydantic cannot parse this string as one"
    if n is not None:
        for bound, word in (("gt", "greater than"), ("ge", "at least"),
                            ("lt", "less than"), ("le", "at most")):
            if bound not in rule:
                continue
            b = rule[bound]
            ok = {"gt": n > b, "ge": n >= b, "lt": n < b, "le": n <= b}[bound]
            if not ok:
                return f"must be {word} {b}"
    return None


def is_comment_key(key: str) -> bool:
    """``_comment``, ``__doc``, ``comment``: a note for people, not a misspelled setting."""
    return key.startswith("_") or key.lower() in ("comment", "comments", "note", "notes", "//")


def available_releases() -> list[str]:
    """Releases with a table, oldest first."""
    return list(_releases())


@lru_cache(maxsize=1)
def _releases() -> tuple[str, ...]:
    # The data directory is listed once: table_for() runs for every config lint.
    from dsdoctor.datacache import package_files  # noqa: PLC0415

    rels = [m.group(1) for n, _ in package_files("dsdoctor.data", lambda n: True)
            if (m := _FILE.match(n))]
    return tuple(sorted(rels, key=parse_version))


@lru_cache(maxsize=8)
def _load(release: str) -> KeyTable:
    from dsdoctor.datacache import package_dir  # noqa: PLC0415

    path = os.path.join(package_dir("dsdoctor.data"), f"ds_keys_{release}.json")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    raw = json.loads(text)
    sections = {name: {**info, "keys": frozenset(info.get("keys", ()))}
                for name, info in sorted(raw["sections"].items(),
                                         key=lambda kv: (kv[0].count("."), kv[0]))}
    return KeyTable(release=raw["release"], top_level=frozenset(raw["top_level"]),
                    sections=sections, removed_top_level=raw.get("removed_top_level", {}),
                    removed_zero=raw.get("removed_zero_optimization", {}))


def table_release_for(release: str | None) -> str:
    """Which table lints a run of ``release``.

    The tables are the last patch of each minor release. A run's own minor release is linted
    with that minor's table (0.16.3 with 0.16.9: keys change between minor releases, seldom
    between patches, and the miss is then a key reported known, never a good key reported
    unknown); otherwise the newest table below the run (0.20.1 with 0.19.8); a run older than
    every table uses the oldest. No release known: the newest table.
    """
    rels = _releases()
    if not rels:
        raise FileNotFoundError("no dsdoctor/data/ds_keys_*.json tables (run scripts/gen_ds_keys.py)")
    want = parse_version(release) if release else ()
    if not want:
        return rels[-1]
    same_minor = [r for r in rels if parse_version(r)[:2] == want[:2]]
    if same_minor and len(want) >= 2:
        return same_minor[-1]
    older = [r for r in rels if parse_version(r)[:len(want)] <= want]
    return older[-1] if older else rels[0]


def table_for(release: str | None) -> KeyTable:
    """The key table that lints a run of ``release`` (see :func:`table_release_for`)."""
    return _load(table_release_for(release))


def table_note(release: str | None, source: str = "") -> str:
    """Which table was used, for a finding's text: the run's release and where it came from."""
    used = table_release_for(release)
    origin = {"env": "from --env", "log": "from the log", "--ds-version": "from --ds-version",
              "default": "no release in --env or the log: the default"}.get(source, source)
    run = f"DeepSpeed {release}" + (f", {origin}" if origin else "") if release else "no DeepSpeed release known"
    if release and parse_version(release) == parse_version(used):
        return f"checked against dsdoctor's key table for DeepSpeed {used} ({run})"
    return (f"checked against dsdoctor's key table for DeepSpeed {used}, the nearest one "
            f"({run}, has no table of its own)")


def release_ranges(releases: list[str]) -> str:
    """``["0.9.5", "0.10.3", "0.11.2", "0.16.9"]`` -> ``"0.9.5-0.11.2, 0.16.9"``: runs of
    consecutive tables, so a key's story over eleven releases stays one short line."""
    order = list(_releases())
    runs: list[list[str]] = []
    for rel in sorted(releases, key=parse_version):
        if runs and rel in order and runs[-1][-1] in order \
                and order.index(rel) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(rel)
        else:
            runs.append([rel])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def releases_rejecting(path: str, value: Any = None) -> list[str]:
    """Releases (with a table) that refuse a config containing this key at this path."""
    out = []
    section, _, key = path.rpartition(".")
    for rel in _releases():
        t = _load(rel)
        if ((not section and key in t.removed_top_level)
                or (section == "zero_optimization" and key in t.removed_zero)
                or (section and t.is_strict(section) and key not in t.section_keys(section)
                    and value != "auto")
                or (section in CONSTRUCTOR_SECTIONS and key not in t.section_keys(section))):
            out.append(rel)
    return out
