"""Retry or not (issue 22, item 1): the answers are rule data the loader checks, a problem takes
its rule's answer (a case matching its lines first), the verdict the deciding problem's or its
fate's, and a retry's cost is the steps done since the last checkpoint save the log shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.diagnose import retry
from dsdoctor.diagnose.engine import RuleError, load_rules
from dsdoctor.diagnose.pipeline import run_analysis
from tests.test_engine import GOOD, _rules_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"


def test_every_rule_that_explains_a_failure_says_whether_a_retry_helps() -> None:
    for rule in load_rules():
        if rule.category in ("symptom", "failure"):
            assert rule.retriable is not None, rule.code
            assert rule.retriable["value"] in ("yes", "no", "unknown") and rule.retriable["reason"]
        else:
            assert rule.retriable is not None or rule.category in retry.BY_CATEGORY, rule.code


@pytest.mark.parametrize("block,error", [
    ("retriable: {value: maybe, reason: r}\n", "not one of"),
    ("retriable: {value: no, reason: r}\n", "must be quoted"),
    ("retriable: {value: 'no'}\n", "needs a reason"),
    ("retriable: {value: 'no', reason: r, cases: [{text: '(', value: 'yes', reason: r}]}\n",
     "not a regex"),
    ("retriable: {value: 'no', reason: r, why: x}\n", "takes value"),
])
def test_retriable_is_checked_at_load(tmp_path: Path, block: str, error: str) -> None:
    d = _rules_dir(tmp_path, {"DS999-test-rule.yaml": GOOD + block})
    with pytest.raises(RuleError, match=error):
        load_rules(d)


def test_a_symptom_rule_without_an_answer_is_refused(tmp_path: Path) -> None:
    d = _rules_dir(tmp_path, {"DS999-test-rule.yaml": GOOD + "category: symptom\n"})
    with pytest.raises(RuleError, match="required for a symptom rule"):
        load_rules(d)


def test_cases_are_tried_before_the_value_and_a_time_limit_needs_a_checkpoint() -> None:
    nccl = next(r for r in load_rules() if r.code == "DS114").retriable
    assert nccl is not None
    # NCCL's own words, as real logs print them (tests/data/real_logs_wild, nccl-error__*)
    assert retry.rule_answer(nccl, ["NCCL WARN NET/IB : Got completion from peer with error"],
                             saved=False).value == "yes"
    assert retry.rule_answer(nccl, ["ncclInvalidUsage: This usually reflects invalid usage"],
                             saved=False).value == "no"
    assert retry.rule_answer(nccl, ["NCCL error"], saved=False).value == "unknown"
    limit = next(r for r in load_rules() if r.code == "DS118").retriable
    assert limit is not None
    assert retry.rule_answer(limit, [], saved=True).value == "yes"
    unsaved = retry.rule_answer(limit, [], saved=False)
    assert unsaved.value == "unknown" and "no checkpoint save" in unsaved.reason


@pytest.mark.parametrize("sample,answer", [
    ("gpu_cuda_oom", "no"),               # the same step needs the same GPU memory
    ("killed_sigkill", "unknown"),        # SIGKILL and no word why
    ("stopped_ctrl_c", "yes"),            # a person stopped it: resume
    ("fp16_loss_scale_collapse", "no"),   # not learning: the same setup collapses again
    ("healthy_zero2_trainer", "no"),      # nothing failed, nothing to retry
])
def test_samples_answer(sample: str, answer: str) -> None:
    log = next((SAMPLES / sample).glob("*.log"))
    v = run_analysis([str(log)], engine="python").verdict
    assert v.retriable == answer, v.retriable_reason


def test_steps_lost_since_the_last_checkpoint_save() -> None:
    """The disk-full sample (a real DeepSpeed 0.19.8 run) saved global_step5 before it failed."""
    rep = run_analysis([str(SAMPLES / "checkpoint_disk_full" / "train.log")], engine="python")
    v = rep.verdict
    assert v.checkpoint_step == 5
    assert v.steps_done is not None and v.steps_lost == v.steps_done - 5
    assert v.retriable == "no" and rep.problems[0].retriable == "no"  # a full disk stays full


def test_checkpoint_step_read_from_the_save_paths() -> None:
    from dsdoctor.model import Evidence, Fact

    ev = Evidence("t.log", 1, "")
    facts = [Fact("checkpoint-save", {"path": p}, ev) for p in (
        "out/checkpoint-10", "/ckpt/global_step30/mp_rank_00_model_states.pt", "out/checkpoint-20")]
    assert retry.checkpoint_step(facts) == 30
    assert retry.checkpoint_step([Fact("checkpoint-save", {"path": "out/final"}, ev)]) is None
