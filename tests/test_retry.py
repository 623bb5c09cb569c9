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


def _sample_json(sample: str) -> dict:
    """``dsdoctor analyze`` of a committed sample with its config, script and dumps, as JSON."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import sample_check  # noqa: PLC0415

    code, out, err = sample_check.run_analyze(SAMPLES / sample)
    assert code == 1, err
    return json.loads(out)


@pytest.mark.parametrize("sample,answer,said", [
    # rank 0 alone ran an all_reduce (a desync): the same code path desyncs again
    ("hang_desync_allreduce", "no", "rank 0 took another path"),
    # the Flight Recorder dumps name the same desync
    ("hang_desync_fr_trace", "no", "rank 0 took another path"),
    # generate() under ZeRO-3 without synced_gpus: DS202 (joining DS107's timeout) says it recurs
    ("zero3_generate_hang", "no", "without synced_gpus"),
    # rank 1 was silent, in no collective: a code path or a stalled read, the log does not say
    ("dataloader_stall", "unknown", "stalled read"),
    # rank 1 died on its own ValueError first: that failure's answer (a bug recurs)
    ("rank_failed_first", "no", "recurs on a retry"),
    # rank 1 vanished (SIGKILL): the OOM killer or a lost node, nothing says which
    ("killed_sigkill", "unknown", "SIGKILL"),
])
def test_a_hang_takes_its_culprits_answer(sample: str, answer: str, said: str) -> None:
    v = _sample_json(sample)["verdict"]
    assert (v["retriable"], said in v["retriable_reason"]) == (answer, True), v["retriable_reason"]


def test_a_culprit_that_failed_first_gives_its_failures_answer() -> None:
    """The real run where rank 1 raised a ValueError and rank 0 timed out waiting for it: asked
    for a hang, the culprit answers with the failing rank's problem's answer."""
    from dsdoctor.diagnose.pipeline import _lines

    rep = run_analysis([str(SAMPLES / "rank_failed_first" / "train.log")], engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None
    assert rep.ranks.culprit.kind == "failed-first"
    answers = [retry.Retry(p.retriable, p.retriable_reason) for p in rep.problems]
    got = retry.culprit_answer(rep.ranks, rep.problems, answers,
                               [_lines(p, rep) for p in rep.problems])
    assert got is not None and got.value == "no"
    assert "(rank 1 failed first; the others only waited)" in got.reason, got.reason


def test_a_culprit_that_vanished_stays_unknown() -> None:
    rep = run_analysis([str(SAMPLES / "killed_sigkill" / "train.log")], engine="python")
    assert rep.ranks is not None and rep.ranks.culprit is not None
    assert rep.ranks.culprit.kind == "vanished"
    got = retry.culprit_answer(rep.ranks, rep.problems, [], [])
    assert got is not None and got.value == "unknown" and "rank 1 went away" in got.reason


def test_a_joining_rules_no_beats_the_leads_unknown() -> None:
    """DS107 (a timeout: unknown until the culprit says) leading a hang that DS202 (generate()
    without synced_gpus: deterministic) joins: the joiner's no answers; DS107 alone does not."""
    from dsdoctor.model import Problem

    infos = {r.code: retry.RuleInfo(r.retriable, r.category) for r in load_rules()}
    alone = Problem("hang", "error", "timeout", rules=("DS107",), symptoms=("hang",))
    joined = Problem("hang", "error", "timeout", rules=("DS107", "DS202"), symptoms=("hang",))
    line = ["[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=775693, OpType=_ALLGATHER_BASE, NumelIn=262668288, "
            "NumelOut=1050673152, Timeout(ms)=1800000) ran for 1800042 milliseconds before timing "
            "out."]  # DS107's example (rules/DS107-collective-timeout.yaml)
    assert retry.problem_answer(alone, infos, {}, line, saved=False).value == "unknown"
    got = retry.problem_answer(joined, infos, {}, line, saved=False)
    assert got.value == "no" and "synced_gpus" in got.reason
    # a joiner's yes does not override: only a deterministic answer is sure enough
    yes_rule = retry.RuleInfo({"value": "yes", "reason": "transient"}, "cross-check")
    maybe = Problem("hang", "error", "timeout", rules=("DS107", "DS999"), symptoms=("hang",))
    assert retry.problem_answer(maybe, {**infos, "DS999": yes_rule}, {}, line,
                                saved=False).value == "unknown"


def test_text_and_markdown_say_the_answer_under_the_verdict() -> None:
    """The answer (and, where a retry may help, the steps a resume loses) is the line after the
    verdict in text (one line, cut at the width) and Markdown; a healthy run has none."""
    from dataclasses import replace

    from dsdoctor.render.analysis import render, retry_line

    rep = run_analysis([str(SAMPLES / "checkpoint_disk_full" / "train.log")], engine="python")
    text = render(rep, "text", color=False).splitlines()
    assert text[1].startswith("Retry: no — the disk or quota stays full"), text[:3]
    assert text[2].startswith("log: "), text[:3]  # one line: cut, never wrapped
    assert "loses" not in retry_line(rep)  # no retry helps: no cost to quote
    md = render(rep, "markdown").splitlines()
    assert md[4].startswith("**Retry**: no — the disk"), md[:6]
    # were it transient: the steps done since global_step5 are what a resume loses
    assert rep.verdict is not None and rep.verdict.steps_lost is not None
    maybe = replace(rep, verdict=replace(rep.verdict, retriable="unknown", steps_lost=3))
    assert retry_line(maybe).startswith("unknown (a resume from the checkpoint of step 5 loses 3 "
                                        "steps) — the disk")
    healthy = run_analysis([str(SAMPLES / "healthy_zero2_trainer" / "train.log")],
                           engine="python")
    assert retry_line(healthy) is None
    assert not any(line.startswith("Retry") for line in render(healthy, "text").splitlines())
