"""A stable fingerprint per root cause (issue 22, item 2): the same failure in different jobs,
ranks, threads and releases of the printing library gets the same id; different failures do not.
The pairs are real logs of the same failure from different public threads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdoctor.diagnose.fingerprint import CAUSE_RECIPE, cause_fingerprint, cause_signature
from dsdoctor.diagnose.pipeline import run_analysis

DATA = Path(__file__).resolve().parent / "data"
WILD, EXTRA = DATA / "real_logs_wild", DATA / "real_logs_extra"

#: (cause, rule, logs of the same failure from different threads)
SAME_FAILURE = [
    ("checkpoint-error", "DS119", [  # ZeRO checkpoint saved at another data-parallel world size
        EXTRA / "checkpoint-error__ds2898-zero-world-size-4-vs-6-backticks.log",
        EXTRA / "checkpoint-error__glm136-zero-dp-world-size-256-vs-2.log"]),
    ("hang", "DS107", [  # ALLREDUCE watchdog timeout, torch 2.5 and 2.6 glog prefixes
        EXTRA / "hang__basicsr737-torch26-watchdog-pg-guid.log",
        EXTRA / "hang__llamafactory7396-torch25-watchdog-allreduce-viewer-line-numbers.log",
        WILD / "hang__llm-training7-slurm-allreduce-watchdog-frames.log"]),
    ("disk-full", "DS117", [  # quota exceeded (errno 122)
        EXTRA / "disk-full__cyclegan1456-errno-122-quota-pil-save.log",
        EXTRA / "disk-full__eagle121-triton-cache-errno-122-caret-markers.log"]),
    ("cuda-error", "DS115", [  # the same device-side assert in index_select
        EXTRA / "cuda-error__kg-one2set2-device-assert-after-logger-lines.log",
        EXTRA / "cuda-error__trl2996-interleaved-device-asserts.log"]),
    ("nccl-error", "DS114", [  # NCCL "unhandled cuda error"
        EXTRA / "nccl-error__nccl1410-distbackenderror-unhandled-cuda-error.log",
        EXTRA / "nccl-error__verl2044-barrier-unhandled-cuda-error-last-error.log"]),
]


def _first(log: Path):
    return run_analysis([str(log)], engine="python").problems[0]


@pytest.mark.parametrize("cause,rule,logs", SAME_FAILURE, ids=[c for c, _r, _l in SAME_FAILURE])
def test_the_same_failure_in_different_threads_has_one_fingerprint(cause, rule, logs) -> None:
    firsts = [_first(log) for log in logs]
    assert {p.cause for p in firsts} == {cause}
    assert {p.rules[0] for p in firsts} == {rule}
    assert len({p.fingerprint for p in firsts}) == 1, [p.signature for p in firsts]


def test_different_failures_have_different_fingerprints() -> None:
    ids = {_first(logs[0]).fingerprint for _c, _r, logs in SAME_FAILURE}
    assert len(ids) == len(SAME_FAILURE)
    allgather = _first(WILD / "hang__simplerl25-make-experience-bar-then-allgather-watchdog-ray-prefix.log")
    assert allgather.fingerprint != _first(SAME_FAILURE[1][2][0]).fingerprint  # another collective


def test_ranks_hosts_times_and_logger_prefixes_are_not_part_of_it() -> None:
    # real watchdog lines (DS107's examples; verl#5750) on two ranks of two releases
    a = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=775693, OpType=_ALLGATHER_BASE, NumelIn=262668288, NumelOut=1050673152, "
         "Timeout(ms)=1800000) ran for 1800042 milliseconds before timing out.")
    b = ("(WorkerDict pid=7591) [rank0]:[E325 10:11:12.123456 7591 ProcessGroupNCCL.cpp:632] [Rank 0] "
         "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=310463, OpType=_ALLGATHER_BASE, "
         "NumelIn=8, NumelOut=64, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.")
    assert cause_signature(a) == cause_signature(b)
    assert cause_fingerprint("DS107", cause_signature(a)) == cause_fingerprint("DS107", cause_signature(b))
    assert cause_fingerprint("DS114", cause_signature(a)) != cause_fingerprint("DS107", cause_signature(a))


def test_the_recipe_is_pinned() -> None:
    """An id must mean the same in every release: changing the recipe changes this value, and
    then CAUSE_RECIPE must change too (docs/fingerprints.md)."""
    assert CAUSE_RECIPE == "cause-1"
    assert cause_fingerprint("DS105", "CUDA out of memory.") == cause_fingerprint("DS105", "CUDA out of memory.")
    assert len(cause_fingerprint("DS105", "CUDA out of memory.")) == 12


def test_a_config_lint_is_fingerprinted_by_its_key(tmp_path: Path) -> None:
    """A finding without log lines: its rule code and config key (DS304: offload_param below
    ZeRO-3), the same in every job that has the lint."""
    ids = []
    for n, bucket in enumerate((5e8, 2e8)):
        cfg = tmp_path / f"ds{n}.json"
        cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
            "stage": 2, "reduce_bucket_size": bucket, "offload_param": {"device": "cpu"}}}))
        rep = run_analysis([], configs=[str(cfg)], engine="python")
        lint = next(p for p in rep.problems if p.rules and p.rules[0] == "DS304")
        assert lint.signature.startswith("zero_optimization.offload_param")
        assert lint.fingerprint == cause_fingerprint("DS304", lint.signature)
        ids.append(lint.fingerprint)
    assert ids[0] == ids[1]
