"""The rules engine: loading invariants, declarative conditions, hooks, ordering, docs in sync."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose import engine
from dsdoctor.diagnose.engine import RuleError, condition_holds, evaluate, load_rules
from dsdoctor.facts.configfile import ConfigDoc
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding, Symptom

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
code: DS999
name: test-rule
severity: warning
title: t
summary: s
explanation: e
fix: f
when: {config: {path: zero_optimization.stage, equals: 3}}
examples:
  fire: [{config: {"zero_optimization": {"stage": 3}}}]
  silent: [{config: {"zero_optimization": {"stage": 2}}}]
"""


def _rules_dir(tmp: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    return str(tmp)


def test_shipped_rules_load_and_are_unique() -> None:
    rules = load_rules()
    assert len({r.code for r in rules}) == len(rules)
    assert len({r.name for r in rules}) == len(rules)
    assert [r.code for r in rules] == sorted(r.code for r in rules)
    assert {f"DS3{i:02d}" for i in range(1, 21)} <= {r.code for r in rules}


@pytest.mark.parametrize("mutate,error", [
    (lambda t: t.replace("severity: warning", "severity: fatal"), "severity"),
    (lambda t: t.replace("  silent: [{config: {\"zero_optimization\": {\"stage\": 2}}}]\n", ""), "silent"),
    (lambda t: t.replace("name: test-rule", "name: Test_Rule"), "kebab-case"),
    (lambda t: t.replace("when: {config: {path: zero_optimization.stage, equals: 3}}", "when: {symptom: gpu-oom, fact: x}"), "exactly one key"),
    (lambda t: t.replace("when: {config: {path: zero_optimization.stage, equals: 3}}", "when: {symptom: not-a-kind}"), "unknown symptom"),
    (lambda t: t + "hook: no_such_function\n", "not a registered check"),
    (lambda t: t + "hook: os:system\n", "check name"),
    (lambda t: t.replace("when: {config: {path: zero_optimization.stage, equals: 3}}", "when: {config: {path: a, matches: x}}"), "one test"),
])
def test_invariants_are_checked_at_load(tmp_path: Path, mutate, error: str) -> None:
    d = _rules_dir(tmp_path, {"DS999-test-rule.yaml": mutate(GOOD)})
    with pytest.raises(RuleError, match=error):
        load_rules(d)


def test_file_name_and_uniqueness(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(RuleError, match="must be named"):
        load_rules(_rules_dir(tmp_path / "a", {"DS999-other.yaml": GOOD}))
    (tmp_path / "b").mkdir()
    d = _rules_dir(tmp_path / "b", {"DS999-test-rule.yaml": GOOD,
                                    "DS998-test-rule.yaml": GOOD.replace("DS999", "DS998")})
    with pytest.raises(RuleError, match="already used"):
        load_rules(d)


def _ctx(cfg: dict | None = None, **kw) -> Context:
    ctx = Context(**kw)
    if cfg is not None:
        ctx.ds, ctx.ds_source = ConfigDoc("ds.json", "deepspeed", cfg), "config"
    return ctx


def test_conditions() -> None:
    ctx = _ctx({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                "fp16": {"enabled": True}, "steps": "8"},
               trainer_args={"fp16": True}, env={"gpus": [{"memory_total_bytes": 8 << 30}]})
    assert condition_holds({"config": {"path": "zero_optimization.stage", "ge": 3}}, ctx)
    assert not condition_holds({"config": {"path": "zero_optimization.stage", "lt": 3}}, ctx)
    assert condition_holds({"config": {"path": "zero_optimization.offload_param", "exists": True}}, ctx)
    assert condition_holds({"config": {"path": "bf16.enabled", "exists": False}}, ctx)
    assert condition_holds({"config": {"path": "fp16.enabled", "equals": True}}, ctx)
    # true is not 1, and a numeric string is not a number
    assert not condition_holds({"config": {"path": "fp16.enabled", "equals": 1}}, ctx)
    assert not condition_holds({"config": {"path": "steps", "gt": 1}}, ctx)
    assert condition_holds({"config": {"path": "zero_optimization.offload_param.device", "in": ["cpu", "nvme"]}}, ctx)
    assert condition_holds({"all": [{"args": {"path": "fp16", "truthy": True}},
                                    {"not": {"symptom": "gpu-oom"}}]}, ctx)
    assert condition_holds({"any": [{"symptom": "nan-loss"}, {"env": {"path": "gpus[0].memory_total_bytes", "lt": 16 << 30}}]}, ctx)
    assert not condition_holds({"config": {"path": "zero_optimization.stage", "equals": 3}}, Context())


def test_declarative_rule_builds_a_finding_with_line_and_evidence(tmp_path: Path) -> None:
    rule_text = GOOD.replace("when: {config: {path: zero_optimization.stage, equals: 3}}",
                             "when: {all: [{symptom: gpu-oom}, {config: {path: zero_optimization.stage, equals: 3}}]}")
    rules = load_rules(_rules_dir(tmp_path, {"DS999-test-rule.yaml": rule_text}))
    ev = Evidence("train.log", 12, "torch.OutOfMemoryError: CUDA out of memory.")
    sym = Symptom("gpu-oom", 1, (ev,), ev, ev)
    cfg_path = tmp_path / "ds.json"
    cfg_path.write_text('{\n  "zero_optimization": {\n    "stage": 3\n  }\n}\n')
    from dsdoctor.facts.configfile import load_config
    ctx = Context(symptoms={"gpu-oom": sym}, ds=load_config(str(cfg_path)), ds_source="config")
    (f,) = evaluate(ctx, rules)
    assert (f.rule, f.name, f.severity, f.config_path, f.config_line) == (
        "DS999", "test-rule", "warning", "zero_optimization.stage", 3)
    assert f.config_file == str(cfg_path) and f.evidence == (ev,)
    assert evaluate(Context(ds=ctx.ds, ds_source="config"), rules) == []


def test_hook_findings_get_defaults_and_sort_order() -> None:
    rules = load_rules()
    ctx = _ctx({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True}, "bf16": {"enabled": True},
                "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})
    findings = evaluate(ctx, rules)
    codes = [(f.severity, f.rule) for f in findings]
    assert ("error", "DS308") in codes and ("warning", "DS304") in codes
    assert codes == sorted(codes, key=lambda c: ({"error": 0, "warning": 1, "info": 2}[c[0]], c[1]))
    f = next(f for f in findings if f.rule == "DS308")
    assert f.title and f.references and f.name == "fp16-and-bf16-enabled"


HEALTHY_ZERO2 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": True,
                          "reduce_scatter": True, "reduce_bucket_size": 2e8, "contiguous_gradients": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}
HEALTHY_ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
                          "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                          "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}


@pytest.mark.parametrize("cfg", [HEALTHY_ZERO2, HEALTHY_ZERO3], ids=["zero2", "zero3"])
@pytest.mark.parametrize("extra", [
    {},
    {"trainer_args": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "fp16": True,
                      "learning_rate": 2e-5, "deepspeed": "ds_config.json"}},
    {"script": "from transformers import Trainer, TrainingArguments\nargs = TrainingArguments('out', deepspeed='ds.json')\nTrainer(model=m, args=args).train()\n"},
], ids=["preflight", "trainer-args", "trainer-script"])
def test_healthy_trainer_config_with_auto_gives_no_error(tmp_path: Path, cfg: dict, extra: dict) -> None:
    """The Transformers guide's ZeRO-2/3 templates, full of "auto", are healthy under the Trainer."""
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).parent))
    from test_rules_examples import run_example

    example = {"config": cfg, "env": {"cpu": {"count": 32, "ram_total_bytes": 256 << 30},
                                      "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 80 << 30,
                                                "compute_capability": "8.0"}] * 8,
                                      "packages": {"deepspeed": "0.19.8"}}}
    if "trainer_args" in extra:
        example["args"] = extra["trainer_args"]
    if "script" in extra:
        example["script"] = extra["script"]
    findings = run_example(example, tmp_path)
    assert [f for f in findings if f.severity == "error"] == []
    assert [f.rule for f in findings if f.rule in ("DS302", "DS303")] == []


def test_cli_rules_list_and_explain(capsys) -> None:
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "DS304" in out and "offload-param-without-stage3" in out
    assert main(["rules", "offload-param-without-stage3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("DS304 offload-param-without-stage3 (warning)") and "Fix:" in out
    assert main(["rules", "DS304", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["code"] == "DS304"
    assert main(["rules", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(load_rules())
    assert main(["rules", "DS000"]) == 2
    assert "no rule 'DS000'" in capsys.readouterr().err


def test_docs_rules_are_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_rule_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_fix_out_writes_a_new_file_and_never_the_input(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "ds.json"
    original = textwrap.dedent("""\
        {
          // typo'd section key and an offload that does nothing at stage 2
          "train_micro_batch_size_per_gpu": 4,
          "zero_optimization": {"stage": 2, "overlap_com": true, "offload_param": {"device": "cpu"}},
          "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decy": 0.01}}
        }
        """)
    cfg.write_text(original)
    out = tmp_path / "fixed.json"
    rc = main(["analyze", "--config", str(cfg), "--fix-out", str(out), "--format", "json"])
    assert rc == 1  # errors in the input config
    assert cfg.read_text() == original
    # the copy is the input, edited in place: its comment and layout stay
    assert out.read_text() == original.replace('"overlap_com": true, "offload_param": {"device": '
                                               '"cpu"}', '"overlap_comm": true').replace(
        "weight_decy", "weight_decay")
    from dsdoctor.facts.configfile import parse_json

    fixed = parse_json(out.read_text(), "fixed.json")[0]
    assert fixed == {"train_micro_batch_size_per_gpu": 4,
                     "zero_optimization": {"stage": 2, "overlap_comm": True},
                     "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": 0.01}}}
    capsys.readouterr()
    # the fixed copy is clean
    assert main(["analyze", "--config", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in report["findings"]] == []
    # refusals: same file, existing file without --force
    assert main(["analyze", "--config", str(cfg), "--fix-out", str(cfg)]) == 2
    assert "that is the input config" in capsys.readouterr().err
    assert main(["analyze", "--config", str(cfg), "--fix-out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["analyze", "--config", str(cfg), "--fix-out", str(out), "--force"]) == 1
    assert cfg.read_text() == original


def test_apply_changes_skips_stale_changes() -> None:
    from dsdoctor.diagnose.fixout import apply_changes

    data = {"a": {"b": 1}, "c": "8"}
    new, done = apply_changes(data, [
        {"op": "set", "path": "c", "old": "8", "new": 8},
        {"op": "set", "path": "c", "old": "8", "new": "auto"},  # same path: first wins
        {"op": "delete", "path": "a.b", "old": 2},  # stale: value differs
        {"op": "rename", "path": "a", "new_path": "z"},
    ])
    assert new == {"z": {"b": 1}, "c": 8} and data == {"a": {"b": 1}, "c": "8"}
    assert len(done) == 2


def test_engine_module_has_no_eval() -> None:
    src = Path(engine.__file__).read_text()
    assert "eval(" not in src.replace("evaluate(", "").replace("_eval", "") and "exec(" not in src


def test_unused_finding_type_is_rejected() -> None:
    rule = load_rules()[0]
    with pytest.raises(TypeError):
        engine._complete(42, rule, Context())
    f = engine._complete({"message": "m", "config_path": "x"}, rule, Context())
    assert isinstance(f, Finding) and f.rule == rule.code and f.fix == rule.fix


def test_when_config_paths_must_be_known_keys(tmp_path: Path) -> None:
    bad = GOOD.replace("path: zero_optimization.stage,", "path: zero_optimisation.stage,")
    with pytest.raises(RuleError, match="not a key DeepSpeed"):
        load_rules(_rules_dir(tmp_path, {"DS999-test-rule.yaml": bad}))


def test_findings_on_an_accelerate_config_name_its_keys(tmp_path: Path) -> None:
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).parent))
    from test_rules_examples import run_example

    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
           "  zero3_init_flag: true\n  zero3_save_16bit_model: false\n  zero_stage: 3\n"
           "mixed_precision: bf16\nnum_processes: 2\n")
    # DS314 speaks only for a run that saves a model
    script = "accelerator.save_model(model, 'out')\n"
    findings = run_example({"accelerate": acc, "script": script}, tmp_path)
    f = next(f for f in findings if f.rule == "DS314")
    assert f.config_path == "deepspeed_config.zero3_save_16bit_model"
    assert f.config_file == str(tmp_path / "accelerate_config.yaml") and f.config_line == 5
    assert f.fix_change is None and "Accelerate config" in f.fix


_KEYS = ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
         "gradient_clipping", "zero_optimization", "stage", "offload_param", "offload_optimizer",
         "device", "nvme_path", "fp16", "bf16", "enabled", "optimizer", "type", "params", "lr",
         "betas", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "scheduler",
         "stage3_gather_16bit_weights_on_model_save", "zero_optimisation", "_comment"]


def _config_values():
    from hypothesis import strategies as st

    leaf = (st.none() | st.booleans() | st.integers(-3, 10**10) | st.floats(allow_nan=False)
            | st.sampled_from(["auto", "cpu", "nvme", "none", "8", "Lamb", "AdamW", "x", ""]))
    return st.recursive(leaf, lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.sampled_from(_KEYS), c, max_size=5), max_leaves=25)


def test_rules_never_crash_on_odd_configs(tmp_path_factory) -> None:
    """Any JSON object as a config: the rules report or stay silent, never raise."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    rules = load_rules()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cfg=st.dictionaries(st.sampled_from(_KEYS), _config_values(), max_size=8),
           args=st.dictionaries(st.sampled_from(["fp16", "bf16", "per_device_train_batch_size",
                                                 "gradient_accumulation_steps", "learning_rate",
                                                 "max_steps", "warmup_steps", "use_4bit_quantization"]),
                                st.sampled_from([True, False, "True", "4", 8, 2e-5, "x", None]), max_size=4),
           world=st.none() | st.integers(1, 16))
    def check(cfg, args, world) -> None:
        ctx = Context(trainer_args=dict(args), uses_trainer=bool(args) or None, world_size=world,
                      world_size_source="log" if world else None,
                      env={"gpus": [{"memory_total_bytes": 8 << 30, "compute_capability": "7.5"}]})
        ctx.ds, ctx.ds_source = ConfigDoc("ds.json", "deepspeed", cfg), "config"
        for f in evaluate(ctx, rules, strict=True):
            assert f.rule and f.message and f.severity in ("error", "warning", "info")

    check()


def test_a_crashing_rule_becomes_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsdoctor.diagnose.checks.registry import CHECKS

    def crash(ctx: object, rule: object) -> list[object]:
        raise ZeroDivisionError("a bug in a check")

    monkeypatch.setitem(CHECKS, "crashing_check", crash)
    bad = GOOD.replace("when: {config: {path: zero_optimization.stage, equals: 3}}\n",
                       "hook: crashing_check\n")
    rules = load_rules(_rules_dir(tmp_path, {"DS999-test-rule.yaml": bad}))
    ctx = _ctx({"zero_optimization": {"stage": 3}})
    assert evaluate(ctx, rules) == []
    assert ctx.notes and ctx.notes[-1].startswith("DS999 could not run")
    with pytest.raises(ZeroDivisionError):
        evaluate(ctx, rules, strict=True)


def test_accelerate_offload_param_below_stage3(tmp_path: Path) -> None:
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).parent))
    from test_rules_examples import run_example

    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
           "  offload_optimizer_device: cpu\n  offload_param_device: cpu\n  zero_stage: 2\n"
           "mixed_precision: bf16\nnum_processes: 2\n")
    findings = run_example({"accelerate": acc}, tmp_path)
    f = next(f for f in findings if f.rule == "DS304")
    assert (f.config_path, f.config_line) == ("deepspeed_config.offload_param_device", 5)


def test_every_symptom_and_fact_a_rule_needs_is_produced_by_a_format() -> None:
    """A rule waiting for a symptom no log format emits could never fire on a real log."""
    from dsdoctor.logs.formats import load_patterns

    emitted = {p.emits for p in load_patterns()}

    def facts(cond):
        if isinstance(cond, dict):
            for k, v in cond.items():
                if k == "fact":
                    yield v
                elif k in ("all", "any"):
                    for c in v:
                        yield from facts(c)
                elif k == "not":
                    yield from facts(v)

    for rule in load_rules():
        for kind in rule.symptoms:
            assert kind in emitted, f"{rule.code}: no format emits symptom {kind!r}"
        for name in facts(rule.when):
            assert f"fact:{name}" in emitted, f"{rule.code}: no format emits fact {name!r}"


def test_registry_and_rules_match_both_ways() -> None:
    """Every shipped rule's hook is a registered check, and every registered check has a rule."""
    from dsdoctor.diagnose.checks.registry import CHECKS

    hooks = [r.hook for r in load_rules() if r.hook]
    assert sorted(hooks) == sorted(CHECKS)
    assert len(set(hooks)) == len(hooks)


def test_an_orphan_check_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsdoctor.diagnose import engine
    from dsdoctor.diagnose.checks.registry import CHECKS

    monkeypatch.setitem(CHECKS, "orphan_check", lambda ctx, rule: [])
    with pytest.raises(RuleError, match="orphan_check"):
        engine._check_registry_used(list(load_rules()))
