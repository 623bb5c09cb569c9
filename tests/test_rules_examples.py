"""Every rule's examples, through the real pipeline: scanner -> context -> engine.

Each example of each rule (``rules/*.yaml``, part A's DS3xx and part B's DS1xx/DS2xx alike) is
written to temporary files exactly as a user would give them (log, --config, --model, --env,
--script) and analyzed; a ``fire`` example must produce a finding of that rule (matching its
``expect``), a ``silent`` one must not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsdoctor.diagnose import engine
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.model import Finding

RULES = engine.load_rules()
CASES = [
    pytest.param(rule, kind, i, ex, id=f"{rule.code}-{kind}-{i}")
    for rule in RULES
    for kind in ("fire", "silent")
    for i, ex in enumerate(rule.examples[kind])
]


def run_example(example: dict[str, Any], tmp: Path) -> list[Finding]:
    """Write an example's inputs to files and analyze them like ``dsdoctor analyze`` does."""
    from dsdoctor.logs.scan import ScanResult, scan_files

    configs: list[str] = []
    if "accelerate" in example:
        acc = example["accelerate"]
        path = tmp / "accelerate_config.yaml"
        path.write_text(acc if isinstance(acc, str) else yaml.safe_dump(acc), encoding="utf-8")
        configs.append(str(path))
    if "config" in example:
        cfg = example["config"]
        text = cfg if isinstance(cfg, str) else json.dumps(cfg, indent=2)
        path = tmp / "ds_config.json"
        path.write_text(text, encoding="utf-8")
        configs.append(str(path))
    model = None
    if "model" in example:
        mdir = tmp / "model"
        mdir.mkdir()
        (mdir / "config.json").write_text(json.dumps(example["model"], indent=2), encoding="utf-8")
        model = str(mdir)
    env = None
    if "env" in example:
        env = str(tmp / "env.json")
        Path(env).write_text(json.dumps(example["env"]), encoding="utf-8")
    envs = []
    for i, snap in enumerate(example.get("envs") or []):  # one snapshot per node
        envs.append(str(tmp / f"env-node{i}.json"))
        Path(envs[-1]).write_text(json.dumps(snap), encoding="utf-8")
    scripts = []
    if "script" in example:
        (tmp / "train.py").write_text(example["script"], encoding="utf-8")
        scripts.append(str(tmp / "train.py"))
    if "launch" in example:  # a shell launch script, as `--script run.sh`
        (tmp / "run.sh").write_text(example["launch"], encoding="utf-8")
        scripts.append(str(tmp / "run.sh"))
    logs = []
    if "log" in example:
        (tmp / "train.log").write_text(example["log"], encoding="utf-8")
        logs.append(str(tmp / "train.log"))
    scan = scan_files(logs) if logs else ScanResult()
    inputs = AnalysisInputs.of(logs=logs, configs=configs, model=model, env=env, envs=envs,
                               scripts=scripts,
                               ds_version=example.get("ds_version"),
                               trainer_args=example.get("args"),
                               world_size=example.get("world_size"))
    ctx = build_context(inputs, scan)
    return engine.evaluate(ctx, strict=True)


def _matches(f: Finding, expect: dict[str, Any]) -> bool:
    """``expect`` keys are Finding fields (equal), or ``message_contains``/``fix_contains``
    (a text or a list of texts that must all appear), or ``fix_lacks`` (a text that must not)."""
    for key, want in expect.items():
        if key == "fix_lacks":
            if want in f.fix:
                return False
        elif key in ("message_contains", "fix_contains"):
            text = f.message if key == "message_contains" else f.fix
            if not all(w in text for w in ([want] if isinstance(want, str) else want)):
                return False
        elif getattr(f, key) != want:
            return False
    return True


@pytest.mark.parametrize("rule,kind,index,example", CASES)
def test_rule_example(rule: engine.Rule, kind: str, index: int, example: dict[str, Any],
                      tmp_path: Path) -> None:
    findings = run_example(example, tmp_path)
    mine = [f for f in findings if f.rule == rule.code]
    if kind == "silent":
        assert not mine, f"{rule.code} must stay silent, got: {[f.message for f in mine]}"
        return
    assert mine, f"{rule.code} must fire; findings: {[(f.rule, f.message) for f in findings]}"
    for f in mine:
        assert f.name == rule.name and f.severity in ("error", "warning", "info")
        assert f.message and f.fix and f.title
    expect = example.get("expect") or {}
    if expect:
        assert any(_matches(f, expect) for f in mine), (
            f"no {rule.code} finding matches {expect}: "
            f"{[(f.config_path, f.config_line, f.severity) for f in mine]}")


def test_every_rule_has_examples() -> None:
    assert RULES, "no rules loaded"
    for rule in RULES:
        assert rule.examples["fire"] and rule.examples["silent"]


def test_config_rules_point_at_the_config_line(tmp_path: Path) -> None:
    """A config finding names the file and the line of the key, not just the key."""
    cfg = {"train_micro_batch_size_per_gpu": 4,
           "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}
    findings = run_example({"config": cfg}, tmp_path)
    f = next(f for f in findings if f.rule == "DS304")
    assert f.config_file == str(tmp_path / "ds_config.json")
    lines = (tmp_path / "ds_config.json").read_text().splitlines()
    assert '"offload_param"' in lines[f.config_line - 1]
