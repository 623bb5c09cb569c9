"""Retry or not (issue 22): whether running the failed job again can help, and what it would cost.

A failure is *transient* when the next run need not meet it (a network or NCCL transport error, a
GPU that fell off the bus, a node that went away, a preemption, a time limit with a checkpoint to
resume from) and *deterministic* when the same inputs meet it again (a config error, an op that
does not build, an out-of-memory at the same step, a bug in the code). The answers are data: each
rule that explains a failure says it in its YAML (``retriable: {value, reason, cases,
needs_checkpoint}``, validated by the rule loader, diagnose/engine.py); a cause no rule explains
takes :data:`BY_CAUSE`; a config lint its category's answer. Where the lead rule does not know
(``unknown``), a joining rule that knows the cause recurs (``no``: DS202's generate() without
synced_gpus joining DS107's timeout) answers. A hang that no rule answers takes its culprit's
(diagnose/ranks.py): ranks on different code paths desync again; a rank that failed first, its
failure's answer. The verdict takes the answer of the problem that decided it, except where the
fate itself answers (killed, stopped, a run that did not fail).

Where the log shows a checkpoint save, the verdict also says the step it saved and how many steps
were done since: what a retry that resumes from it would lose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dsdoctor.diagnose.verdict import UNEXPLAINED_KILL
from dsdoctor.model import Fact, Problem, Verdict

if TYPE_CHECKING:
    from dsdoctor.diagnose.ranks import RankTable

YES, NO, UNKNOWN = "yes", "no", "unknown"


@dataclass(frozen=True)
class Retry:
    """One answer: yes | no | unknown, and why."""

    value: str
    reason: str


#: Causes that no rule explains, by the cause's name (diagnose/problems.py) or the fate of a
#: verdict-only problem.
BY_CAUSE: dict[str, Retry] = {
    "stopped": Retry(YES, "a signal stopped the run (a person, a scheduler's cancel or a "
                     "preemption) before anything failed: a retry or a resume carries on"),
    "error-line": Retry(UNKNOWN, "the failure is not recognized: whether it recurs on a retry is "
                        "not known"),
    "exit": Retry(UNKNOWN, "a rank died and nothing says why: a code or data error recurs, a lost "
                  "node does not"),
    "killed": Retry(UNKNOWN, "a rank was killed by SIGKILL and nothing says why: the OOM killer "
                    "kills it again at the same point, a scheduler's cancel or a preemption does "
                    "not"),
    "not-learning": Retry(NO, "the run does not learn with this setup: a retry with the same data, "
                          "config and seed does the same"),
    "failed": Retry(UNKNOWN, "the log does not say what failed"),
}

#: Lines that answer for a cause no rule explains (an unrecognized failure, a bare exit): a code
#: error recurs, a lost connection need not.
CAUSE_CASES: tuple[dict[str, str], ...] = (
    {"text": r"\b(?:AttributeError|TypeError|(?:UnboundLocal|Name)Error|KeyError|IndexError|"
             r"ImportError|ModuleNotFoundError|SyntaxError|AssertionError|NotImplementedError|"
             r"ValueError|FileNotFoundError|ZeroDivisionError)\b|Assertion failed",
     "value": NO, "reason": "the rank died on an error of the code or its inputs (a bug): it "
                            "recurs on a retry"},
    {"text": r"Connection(?:Reset|Refused)?Error|Connection (?:reset|refused|closed)|"
             r"DistNetworkError|Destination is unreachable|network (?:error|is unreachable)",
     "value": YES, "reason": "a rank lost its connection to the others (the network, a node that "
                             "went away): transient, a retry can pass"},
    # bitsandbytes without a native library for this CUDA (formats/bitsandbytes.yaml): not built
    # or not shipped for it, so every start meets it again
    {"text": r"Could not load bitsandbytes native library|bitsandbytes library load error|"
             r"CUDA SETUP: CUDA detection failed",
     "value": NO, "reason": "bitsandbytes has no native library it can load for this CUDA: "
                            "every run meets it until a matching build is installed"},
    # sbatch refusing what the job asks (formats/scheduler.yaml, sbatch-submission-failed);
    # "Socket timed out" (slurmctld busy) is not among them: it passes later
    {"text": r"Batch job submission failed: (?:Requested time limit is invalid|"
             r"Invalid job array specification)",
     "value": NO, "reason": "sbatch refused the job for what it requests: the same request is "
                            "refused again until the script's #SBATCH lines change"},
)

#: Rules without an answer of their own, by category: they judge the inputs, which a retry keeps.
BY_CATEGORY: dict[str, Retry] = {
    "config": Retry(NO, "a config error: the same config fails the same way on a retry"),
    "cross-check": Retry(NO, "the inputs disagree with each other or with the machine: a retry "
                         "with the same inputs meets the same problem"),
    "script": Retry(NO, "the training script does this on every run: a retry repeats it"),
}

#: The verdict's answer when the fate answers by itself.
BY_FATE: dict[str, Retry] = {
    "killed": BY_CAUSE["killed"],
    "stopped": BY_CAUSE["stopped"],
    "healthy": Retry(NO, "the run did not fail: nothing to retry"),
    "recovered": Retry(NO, "the run did not fail (the loss scaler recovered): nothing to retry"),
    "ended-mid-run": Retry(UNKNOWN, "the log stops with no exit and no error: the run may still be "
                           "going, or it hung or was killed without a word"),
    "unknown": Retry(UNKNOWN, "the log does not show how the run ended"),
}

NO_CHECKPOINT = ("; no checkpoint save in the log: a retry starts over and may meet the limit "
                 "again")

#: A checkpoint's step in the path it was saved to: the Trainer's ``checkpoint-500``,
#: DeepSpeed's ``global_step500``, Lightning's ``step=500``.
_STEP_IN_PATH = re.compile(r"(?:checkpoint-|global_step|step=)(\d+)(?!.*(?:checkpoint-|global_step"
                           r"|step=)\d)")


def checkpoint_step(facts: Iterable[Fact]) -> int | None:
    """The step of the latest checkpoint save the log shows (``fact:checkpoint-save``), or None."""
    steps = []
    for f in facts:
        if f.name != "checkpoint-save":
            continue
        m = _STEP_IN_PATH.search(str(f.values.get("path", "")))
        if m:
            steps.append(int(m.group(1)))
    return max(steps) if steps else None


def saved_at_all(facts: Iterable[Fact]) -> bool:
    return any(f.name == "checkpoint-save" for f in facts)


def rule_answer(spec: Mapping[str, Any], lines: Sequence[str], saved: bool) -> Retry:
    """A rule's ``retriable`` applied to a problem's lines: the first case whose regex matches
    one of them, else its value; a yes that needs a checkpoint is unknown without a save."""
    for case in spec.get("cases") or ():
        pattern = re.compile(case["text"], re.IGNORECASE)
        if any(pattern.search(text) for text in lines):
            return Retry(case["value"], case["reason"])
    answer = Retry(spec["value"], spec["reason"])
    if answer.value == YES and spec.get("needs_checkpoint") and not saved:
        return Retry(UNKNOWN, answer.reason + NO_CHECKPOINT)
    return answer


@dataclass(frozen=True)
class RuleInfo:
    """What retry needs of a rule: its answer (or None) and its category."""

    retriable: Mapping[str, Any] | None
    category: str


def problem_answer(p: Problem, rules: Mapping[str, RuleInfo], names: Mapping[str, str],
                   lines: Sequence[str], saved: bool) -> Retry:
    """The answer for one problem: its rules' (the lead first), else its cause's rule's, else
    :data:`BY_CAUSE`, else its lint's category, else unknown."""
    codes = list(p.rules)
    cause_rule = names.get(p.cause)
    if cause_rule is not None and cause_rule not in codes:
        codes.append(cause_rule)
    answered = [(code, rule_answer(info.retriable, lines, saved)) for code in codes
                if (info := rules.get(code)) is not None and info.retriable is not None]
    if answered:
        lead_code, lead = answered[0]
        if lead.value == UNKNOWN:
            # the lead (a symptom rule: DS107's timeout) does not know; a joining rule that
            # knows the cause recurs (DS202: generate() without synced_gpus) does
            joined = [a for c, a in answered[1:]] + [
                BY_CATEGORY[info.category] for code in codes
                if code != lead_code and (info := rules.get(code)) is not None
                and info.retriable is None and info.category in BY_CATEGORY]
            return next((a for a in joined if a.value == NO), lead)
        return lead
    if p.cause in BY_CAUSE:
        for case in CAUSE_CASES:  # what a line says beats "not recognized"
            if any(re.search(case["text"], text, re.IGNORECASE) for text in lines):
                return Retry(case["value"], case["reason"])
        return BY_CAUSE[p.cause]
    for code in codes:
        info = rules.get(code)
        if info is not None and info.category in BY_CATEGORY:
            return BY_CATEGORY[info.category]
    return Retry(UNKNOWN, "no rule says whether this cause recurs")


#: Culprits (diagnose/ranks.py) that took another code path than the ranks that waited: a
#: collective only some ranks call, a rank in its own code, dumps whose collectives differ.
DESYNC_KINDS = frozenset({"desync", "outside", "trace-missing", "trace-mismatch"})
#: A rank stuck here was reading data: a stalled read (a network filesystem) need not recur.
_DATA_FRAME = re.compile(r"torch/utils/data/|__getitem__|__iter__|__next__")


def culprit_answer(table: RankTable | None, problems: Sequence[Problem],
                   answers: Sequence[Retry], problem_lines: Sequence[Sequence[str]]
                   ) -> Retry | None:
    """A hang's answer from the rank that made the others wait, or None where its kind does not
    tell (a rank that fell behind in the watchdog's counts: slow or stuck, the counts say not)."""
    culprit = table.culprit if table is not None else None
    if culprit is None:
        return None
    who = f"rank{'s' if len(culprit.ranks) > 1 else ''} {', '.join(map(str, culprit.ranks))}"
    if culprit.kind in DESYNC_KINDS:
        frame = culprit.frame
        if culprit.kind == "outside" and (frame is None or _DATA_FRAME.search(
                f"{frame.file} {frame.function}")):
            return Retry(UNKNOWN, "a code path that skips the collective recurs, a stalled read "
                         f"(a network filesystem) or a slow node need not: {who} was in no "
                         "collective and the log does not say where")
        at = f" at {frame.short}" if frame is not None else ""
        return Retry(NO, f"the same code desyncs again on a retry: {who} took another path than "
                     f"the ranks that waited{at} (a desync)")
    if culprit.kind == "failed-first":
        state = next((s for s in table.ranks if s.rank in culprit.ranks), None) if table else None
        said = [t for t in (state.exception if state else None,
                            culprit.evidence.text if culprit.evidence else None) if t]
        for p, answer, lines in zip(problems, answers, problem_lines):
            if p.cause != "hang" and any(t in line for t in said for line in lines):
                return Retry(answer.value, f"{answer.reason} ({who} failed first; the others "
                             "only waited)")
        for case in CAUSE_CASES:
            if any(re.search(case["text"], t, re.IGNORECASE) for t in said):
                return Retry(case["value"], f"{case['reason']} ({who} failed first)")
        return Retry(UNKNOWN, f"nothing says whether the failure of {who}, which failed first, "
                     "recurs")
    if culprit.kind == "vanished":
        return Retry(UNKNOWN, "the OOM killer kills again at the same point, a lost node or a "
                     f"cancel does not: {who} went away without a word (SIGKILL, nothing says why)")
    return None


def assess(problems: Sequence[Problem], verdict: Verdict, facts: Sequence[Fact],
           problem_lines: Sequence[Sequence[str]], rules: Mapping[str, RuleInfo],
           cause_rules: Mapping[str, str], table: RankTable | None = None
           ) -> tuple[tuple[Problem, ...], Verdict]:
    """Problems and the verdict with their answers; the verdict with the steps a retry loses.

    ``problem_lines[i]`` are the lines of problem ``i``'s symptoms and findings (cases match them);
    ``cause_rules`` maps a cause to the code of the rule that explains it (for a problem whose
    rule did not fire); ``table`` the ranks and a hang's culprit (diagnose/ranks.py)."""
    saved = saved_at_all(facts)
    answers = [problem_answer(p, rules, cause_rules, lines, saved)
               for p, lines in zip(problems, problem_lines)]
    for i, p in enumerate(problems):
        if p.cause == "hang" and answers[i].value == UNKNOWN:
            answers[i] = culprit_answer(table, problems, answers, problem_lines) or answers[i]
    out = [replace(p, retriable=a.value, retriable_reason=a.reason)
           for p, a in zip(problems, answers)]
    if verdict.fate == "killed" and out and UNEXPLAINED_KILL not in verdict.sentence:
        # the host killed it for its RAM (an OOM kill the log names): the OOM's own answer
        decided = Retry(out[0].retriable, out[0].retriable_reason)
    elif verdict.fate in BY_FATE:
        decided = BY_FATE[verdict.fate]
        if out and verdict.fate == "killed" and out[0].cause in ("cpu-oom", "killed") and (
                UNEXPLAINED_KILL in verdict.sentence):
            # the cpu-oom group of a bare SIGKILL: the fate's answer, not the OOM rule's
            out[0] = replace(out[0], retriable=decided.value, retriable_reason=decided.reason)
    elif out:
        decided = Retry(out[0].retriable, out[0].retriable_reason)
    else:
        decided = BY_CAUSE.get(verdict.fate, Retry(UNKNOWN, "the log does not say what failed"))
    step = checkpoint_step(facts)
    lost = None
    if step is not None and verdict.steps_done is not None and verdict.is_error:
        lost = max(0, verdict.steps_done - step)
    return tuple(out), replace(verdict, retriable=decided.value, retriable_reason=decided.reason,
                               checkpoint_step=step, steps_lost=lost)


__all__ = ["BY_CATEGORY", "BY_CAUSE", "BY_FATE", "DESYNC_KINDS", "NO", "UNKNOWN", "YES", "Retry",
           "RuleInfo", "assess", "checkpoint_step", "culprit_answer", "problem_answer",
           "rule_answer"]
