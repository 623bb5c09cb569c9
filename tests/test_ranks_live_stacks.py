"""A rank whose lines do not say where it was: the log alone says so, and ``watch``'s live stacks
(py-spy on the stall, passed to the analysis as ``rank_stacks``) say where.

The case comes from CI: under ``watch``, the real hang_desync_allreduce run (rank 0 alone in the
``all_reduce`` under ``if rank == 0:``) ended with rank 0's gloo timeout, and the launcher killed
rank 1 before its own, later, timeout fired, so rank 1 printed nothing. The log then reads like
dataloader_stall's (rank 1 reading data); only the stack tells them apart: rank 1 waited in the
next step's gradient all-reduce. The log here is sample_logs/hang_desync_allreduce with rank 1's
``[rank1]:`` lines removed (what that CI run printed); rank 1's stack is a py-spy 0.4 dump in its
own format (tests/data/pyspy/) holding the frames of rank 1's traceback in the same sample.
"""

from __future__ import annotations

import re
from pathlib import Path

from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.rankfacts import Frame
from dsdoctor.watch import stacks

REPO = Path(__file__).resolve().parents[1]
DESYNC = REPO / "sample_logs" / "hang_desync_allreduce" / "train.log"
STALL = REPO / "sample_logs" / "dataloader_stall" / "train.log"
VENV = "/home/user/venv/lib/python3.11/site-packages"
SCENARIOS = "/home/user/dsdoctor/scripts/scenarios"

# rank 1 of hang_desync_allreduce, innermost first: its traceback's frames in the sample (the
# paths are a user's, as py-spy prints them)
RANK1_IN_ALL_REDUCE = f"""\
Process 3183: /home/user/venv/bin/python -u {SCENARIOS}/hang_desync_allreduce.py --local_rank=1 --worker --deepspeed_config ds_config.json --timeout 20
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 3183 (idle): "MainThread"
    all_reduce ({VENV}/torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper ({VENV}/torch/distributed/c10d_logger.py:83)
    all_reduce ({VENV}/deepspeed/comm/torch.py:220)
    all_reduce ({VENV}/deepspeed/comm/comm.py:580)
    allreduce_bucket ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:1560)
    allreduce_and_scatter ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:1582)
    average_tensor ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:1708)
    reduce_ipg_grads ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:2229)
    independent_gradient_partition_epilogue ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:1018)
    overlapping_partition_gradients_reduce_epilogue ({VENV}/deepspeed/runtime/zero/stage_1_and_2.py:1212)
    allreduce_gradients ({VENV}/deepspeed/runtime/engine.py:3086)
    wrapped_fn ({VENV}/deepspeed/utils/nvtx.py:33)
    _backward_epilogue ({VENV}/deepspeed/runtime/engine.py:3165)
    backward ({VENV}/deepspeed/runtime/engine.py:3431)
    wrapped_fn ({VENV}/deepspeed/utils/nvtx.py:33)
    train_loop ({SCENARIOS}/_lm.py:62)
    worker ({SCENARIOS}/hang_desync_allreduce.py:61)
    driver_main ({SCENARIOS}/_common.py:395)
    <module> ({SCENARIOS}/hang_desync_allreduce.py:119)
"""

# rank 1 of dataloader_stall, in the sleep its Dataset's __getitem__ stands for a slow read
RANK1_IN_DATASET = f"""\
Process 27695: /home/user/venv/bin/python -u {SCENARIOS}/dataloader_stall.py --local_rank=1 --worker --deepspeed_config ds_config.json --timeout 20
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 27695 (idle): "MainThread"
    worker.<locals>.TokenShard.__getitem__ ({SCENARIOS}/dataloader_stall.py:58)
    fetch.<locals>.<listcomp> ({VENV}/torch/utils/data/_utils/fetch.py:52)
    fetch ({VENV}/torch/utils/data/_utils/fetch.py:52)
    _next_data ({VENV}/torch/utils/data/dataloader.py:789)
    __next__ ({VENV}/torch/utils/data/dataloader.py:733)
    worker ({SCENARIOS}/dataloader_stall.py:65)
    driver_main ({SCENARIOS}/_common.py:395)
    <module> ({SCENARIOS}/dataloader_stall.py:144)
"""


def _rank1_silent(tmp_path: Path) -> str:
    """The desync sample as the CI run printed it: no line of rank 1's own."""
    lines = DESYNC.read_text(encoding="utf-8").splitlines(keepends=True)
    log = tmp_path / "train.log"
    log.write_text("".join(line for line in lines if not line.startswith("[rank1]:")),
                   encoding="utf-8")
    return str(log)


def _stack_of(rank: int, dump: str) -> tuple[int, tuple[Frame, ...]]:
    frames = stacks.main_stack(stacks.parse_dump(dump))
    return rank, stacks.log_frames(stacks.RankStack(rank, 1000 + rank, frames))


def _mean_loss_line() -> int:
    text = DESYNC.read_text(encoding="utf-8")
    m = re.search(r'\[rank0\]:   File "[^"]*hang_desync_allreduce\.py", line (\d+), in mean_loss',
                  text)
    assert m is not None
    return int(m.group(1))


def test_log_frames_are_a_tracebacks_order_and_names() -> None:
    rank, frames = _stack_of(1, RANK1_IN_ALL_REDUCE)
    assert rank == 1
    assert frames[0].function == "<module>" and frames[-1].function == "all_reduce"
    assert frames[-2] == Frame(f"{VENV}/torch/distributed/c10d_logger.py", 83, "wrapper")


def test_a_silent_rank_is_not_said_to_be_outside_every_collective(tmp_path: Path) -> None:
    rep = analyze(AnalysisInputs.of(logs=[_rank1_silent(tmp_path)]))
    assert rep.ranks is not None and rep.ranks.culprit is not None and rep.verdict is not None
    by_rank = {r.rank: r for r in rep.ranks.ranks}
    assert by_rank[1].state == "silent" and not by_rank[1].from_stack
    culprit = rep.ranks.culprit
    assert culprit.ranks == (1,) and culprit.kind == "outside"
    # it never joined rank 0's all_reduce: true whether it read data or waited in another one
    assert culprit.sentence.startswith("rank 1 never entered all_reduce: it printed no timeout")
    assert "so it was not waiting" not in culprit.sentence
    assert "(reading data, its own code, another collective) only its stack says" in \
        culprit.sentence
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "If its stack is in another collective" in ds107.fix


def test_the_live_stack_names_the_desync_the_log_could_not(tmp_path: Path) -> None:
    inputs = AnalysisInputs.of(logs=[_rank1_silent(tmp_path)])
    rep = analyze(AnalysisInputs(**{**inputs.__dict__,
                                    "rank_stacks": (_stack_of(1, RANK1_IN_ALL_REDUCE),)}))
    assert rep.ranks is not None and rep.ranks.culprit is not None and rep.verdict is not None
    by_rank = {r.rank: r for r in rep.ranks.ranks}
    rank1 = by_rank[1]
    assert rank1.from_stack and rank1.state == "waiting" and rank1.collective == "all_reduce"
    assert rank1.call_site is not None and rank1.call_site.short == "_lm.py:62 in train_loop"
    assert rank1.entered == "backward"
    assert rank1.phrase().endswith(", by its stack on the stall")
    culprit = rep.ranks.culprit
    assert culprit.ranks == (0,) and culprit.kind == "desync" and culprit.waited == (1,)
    at = _mean_loss_line()
    assert rep.verdict.sentence.startswith(
        f"hung: rank 0 waited alone in the all_reduce at hang_desync_allreduce.py:{at} in "
        "mean_loss, which rank 1 never entered (a desync); rank 1 only waited (in all_reduce "
        "inside backward at _lm.py:62 in train_loop, by its stack on the stall)")
    # the rule reads the same rank facts: the fix is the desync's, not "dump rank 1's stack"
    ds107 = next(f for f in rep.findings if f.rule == "DS107")
    assert "make every rank run the same collectives" in ds107.fix
    assert "find where rank 1 was" not in ds107.fix
    assert rep.to_dict()["ranks"]["ranks"][1]["from_stack"] is True


def test_the_live_stack_puts_a_silent_rank_in_its_data_loader() -> None:
    rep = analyze(AnalysisInputs(logs=(str(STALL),),
                                 rank_stacks=(_stack_of(1, RANK1_IN_DATASET),)))
    assert rep.ranks is not None and rep.ranks.culprit is not None and rep.verdict is not None
    culprit = rep.ranks.culprit
    assert culprit.ranks == (1,) and culprit.kind == "outside"
    assert culprit.frame is not None and culprit.frame.short == "dataloader_stall.py:58 in __getitem__"
    assert rep.verdict.sentence.startswith(
        "hung: rank 1 never entered all_reduce (in its own code at dataloader_stall.py:58 in "
        "__getitem__, by its stack on the stall); rank 0 only waited for it")


def test_a_rank_whose_lines_say_where_keeps_them_over_its_stack() -> None:
    """The sample's rank 1 printed its own traceback (in backward's all-reduce): a stack of the
    same run read at another moment does not replace what its lines said at the end."""
    rep = analyze(AnalysisInputs(logs=(str(DESYNC),),
                                 rank_stacks=(_stack_of(1, RANK1_IN_DATASET),)))
    assert rep.ranks is not None
    rank1 = next(r for r in rep.ranks.ranks if r.rank == 1)
    assert not rank1.from_stack and rank1.collective == "all_reduce"
    assert rep.ranks.culprit is not None and rep.ranks.culprit.ranks == (0,)


def test_a_lost_peer_alone_does_not_say_which_collective_the_stack_does() -> None:
    """gloo's `Connection closed by peer` says the rank waited, not where: its stack places it."""
    from dsdoctor.diagnose.ranks import state_of
    from dsdoctor.logs.rankfacts import RankFacts, Where

    # the line as sample_logs/cpu_offload_oom_killed/train.log has it (torch 2.13's gloo)
    lost = Where("train.log", 200, "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
                 "gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:8099.")
    _rank, frames = _stack_of(1, RANK1_IN_ALL_REDUCE)
    state = state_of(RankFacts(1, last=lost, lost_peer=lost, stack=frames))
    assert state.from_stack and state.state == "waiting" and state.lost_peer
    assert state.collective == "all_reduce" and state.call_site is not None
    assert state.call_site.short == "_lm.py:62 in train_loop"
    # with its traceback in the log, the log's frames stand
    assert not state_of(RankFacts(1, last=lost, lost_peer=lost, stack=frames,
                                  frames=frames[:3])).from_stack
