"""A fix never asks for what the run already has, and applying it moves the run on (issue 8).

For every ``fire`` example of every rule (rules/*.yaml, run through the real pipeline):

(a) no finding's fix text or ``fix_change`` names a key with the value the example's config already
    gives it, no "from X to X", and no "lower"/"raise" that points the wrong way;
(b) where a finding carries a machine-applicable ``fix_change``, the change is applied to the
    example's config and the example analyzed again: the same finding (same key, same fix) must
    not come back (the rule is silent, or it moved to the next rung).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_rules_examples import RULES, run_example  # noqa: E402

from dsdoctor.diagnose.fixout import apply_changes, apply_to_text  # noqa: E402
from dsdoctor.facts.configfile import lookup  # noqa: E402
from dsdoctor.model import Finding  # noqa: E402

FIRE = [pytest.param(rule, i, ex, id=f"{rule.code}-fire-{i}")
        for rule in RULES for i, ex in enumerate(rule.examples["fire"])]

_KEY = r"(?P<key>[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)"
_VAL = r"(?P<new>[^\s,;)]+?)"
_END = r"(?=[\s,;)]|\.?$|\.\s)"
# The ways the rules word a change of one key (see dsdoctor/diagnose/checks/*.py).
_CHANGES = (
    re.compile(rf"\b{_KEY} from (?P<old>[^\s,;]+?) to {_VAL}{_END}"),
    re.compile(rf"\bset {_KEY} to {_VAL}{_END}"),
    re.compile(rf"\b{_KEY} (?P<old>[^\s,;]+) -> {_VAL}{_END}"),
    re.compile(rf"\b(?P<verb>lower|raise) {_KEY} (?:\((?P<old>[^)]*)\) )?to {_VAL}{_END}"),
)
_MISSING = object()


def _norm(v: Any) -> Any:
    """A value as text or JSON gives it, comparable: numbers as float, booleans, bare strings."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip().strip("'\"`").rstrip(".")
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    try:
        return float(s)
    except ValueError:
        return s.replace("torch.", "").lower()


def _config_data(example: dict[str, Any]) -> dict[str, Any] | None:
    cfg = example.get("config")
    if isinstance(cfg, dict):
        return cfg
    if isinstance(cfg, str):
        try:
            data = json.loads(cfg)
        except ValueError:
            return None  # comments or duplicate keys: the lints' own business
        return data if isinstance(data, dict) else None
    return None


def _leaves(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        out: list[tuple[str, Any]] = []
        for k, v in data.items():
            out += _leaves(v, f"{prefix}{k}.")
        return out
    return [(prefix[:-1], data)]


def _current(data: dict[str, Any], key: str) -> Any:
    """The config's value of a dotted key, or of the one leaf whose path ends with it."""
    v = lookup(data, key, _MISSING)
    if v is not _MISSING:
        return v
    hits = [val for path, val in _leaves(data) if path.endswith("." + key)]
    return hits[0] if len(hits) == 1 else _MISSING


def _text_violations(f: Finding, data: dict[str, Any] | None) -> list[str]:
    bad = []
    for pat in _CHANGES:
        for m in pat.finditer(f.fix):
            key, new = m.group("key"), _norm(m.group("new"))
            old = m.groupdict().get("old")
            if old is not None and _norm(old) == new:
                bad.append(f"'{m.group(0)}' changes nothing")
            verb = m.groupdict().get("verb")
            if (verb and old is not None and isinstance(_norm(old), float) and isinstance(new, float)
                    and (verb == "lower") != (new < _norm(old))):
                bad.append(f"'{m.group(0)}' points backwards")
            if data is not None:
                cur = _current(data, key)
                if cur is not _MISSING and _norm(cur) == new:
                    bad.append(f"'{m.group(0)}' asks for what {key} already is ({cur!r})")
    return bad


def _change_violations(f: Finding, data: dict[str, Any] | None) -> list[str]:
    ch = f.fix_change
    if not ch or data is None or ch.get("op", "set") != "set":
        return []
    cur = lookup(data, ch["path"], _MISSING)
    if cur is not _MISSING and _norm(cur) == _norm(ch.get("new")) and type(cur) is type(ch.get("new")):
        return [f"fix_change sets {ch['path']} to the value it has ({cur!r})"]
    return []


@pytest.mark.parametrize("rule,i,example", FIRE)
def test_fix_never_asks_for_what_the_run_has(rule: Any, i: int, example: dict[str, Any],
                                             tmp_path: Path) -> None:
    data = _config_data(example)
    bad: list[str] = []
    for f in run_example(example, tmp_path):
        bad += [f"{f.rule}: {b}" for b in _text_violations(f, data) + _change_violations(f, data)]
    assert not bad, bad


@pytest.mark.parametrize("rule,i,example", FIRE)
def test_applying_the_fix_moves_the_run_on(rule: Any, i: int, example: dict[str, Any],
                                           tmp_path: Path) -> None:
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    before = [f for f in run_example(example, tmp_path / "before") if f.rule == rule.code]
    changes = [f.fix_change for f in before if f.fix_change]
    if "config" not in example or not changes:
        return  # nothing machine-applicable: (a) still holds for this example
    # the copy --fix-out writes: the example's config file as run_example writes it, edited in place
    text = (tmp_path / "before" / "ds_config.json").read_text(encoding="utf-8")
    fixed, done = apply_to_text(text, changes)
    assert done, f"{rule.code}: no fix_change applied to the example's config: {changes}"
    data = _config_data(example)
    if data is not None:
        assert json.loads(fixed) == apply_changes(data, changes)[0]
    after = [f for f in run_example({**example, "config": fixed}, tmp_path / "after")
             if f.rule == rule.code]
    again = {(f.config_path, f.fix) for f in after} & {(f.config_path, f.fix) for f in before
                                                      if f.fix_change}
    assert not again, f"{rule.code}: the same fix comes back after applying it: {again}"


def test_the_property_catches_a_fix_that_asks_for_the_current_value() -> None:
    """The checker itself: a made-up finding that asks for the value already set is caught."""
    f = Finding(rule="DS999", name="x", severity="error", title="t", message="m",
                fix="raise fp16.initial_scale_power from 32 to 32; set "
                    "zero_optimization.overlap_comm to false; lower x.y (1e8) to 1e9",
                fix_change={"op": "set", "path": "zero_optimization.stage", "old": 3, "new": 3})
    data = {"fp16": {"initial_scale_power": 32}, "zero_optimization": {"stage": 3,
                                                                        "overlap_comm": False}}
    bad = _text_violations(f, data) + _change_violations(f, data)
    assert any("changes nothing" in b for b in bad)
    assert any("overlap_comm already is" in b for b in bad)
    assert any("points backwards" in b for b in bad)
    assert any("fix_change sets zero_optimization.stage" in b for b in bad)
