"""Rank stacks (dsdoctor/watch/stacks.py) on real py-spy 0.4.3 output.

tests/data/pyspy/zero3_generate_rank{0,1}.txt: ``py-spy dump --pid N --full-filenames`` of the two
ranks of scripts/scenarios/zero3_generate_hang.py (DeepSpeed 0.19.8, torch 2.13 CPU, gloo) while
rank 0 waited in ZeRO-3's all-gather inside generate() and rank 1 in the barrier after it.
sleeper_threads.txt: a Python 3.11 process with a helper thread; ptrace_denied.txt: what py-spy
prints when it runs as another user (nobody) than the target's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from dsdoctor.watch import stacks
from dsdoctor.watch.ranks import RankProcess

DATA = Path(__file__).parent / "data" / "pyspy"


def dump(name: str) -> str:
    return (DATA / name).read_text()


def rank_stack(rank: int, name: str) -> stacks.RankStack:
    return stacks.RankStack(rank, 100 + rank, stacks.main_stack(stacks.parse_dump(dump(name))))


def test_parse_threads_and_frames():
    threads = stacks.parse_dump(dump("sleeper_threads.txt"))
    assert [t.name for t in threads] == ["MainThread", "helper"]
    main = stacks.main_stack(threads)
    assert [f.function for f in main] == ["wait_in_barrier", "generate", "main", "<module>"]
    assert main[0] == stacks.Frame("wait_in_barrier", "/tmp/watchspy/sleeper.py", 4)
    assert threads[1].frames[0].function == "Thread.run"
    assert threads[1].frames[0].is_library  # .../lib/python3.11/threading.py


def test_real_zero3_generate_hang_names_the_rank_in_generate():
    rank0 = rank_stack(0, "zero3_generate_rank0.txt")
    rank1 = rank_stack(1, "zero3_generate_rank1.txt")
    assert len(rank0.frames) == 33 and rank0.frames[-1].function == "<module>"
    lines = stacks.explain([rank0, rank1]).lines
    text = "\n".join(lines)
    r0 = next(line for line in lines if line.startswith("rank 0 "))
    assert "waits in AllGatherHandle.wait (deepspeed/runtime/zero/partition_parameters.py:720)" in r0
    assert "inside generate (transformers/generation/utils.py:3007)" in r0
    assert "zero3_generate_hang.py:83" in r0
    r1 = next(line for line in lines if line.startswith("rank 1 "))
    assert "waits in barrier (torch/distributed/distributed_c10d.py:5356)" in r1
    assert "zero3_generate_hang.py:87" in r1
    assert "no majority" in text
    assert "what to do (rank 0 in generate)" in text and "synced_gpus=True" in text
    assert "rank 1 in" not in text  # no advice for the rank that merely waits


def test_majority_and_odd_one_out():
    waiting = [rank_stack(r, "zero3_generate_rank1.txt") for r in (1, 2, 3)]
    waiting = [stacks.RankStack(r, 100 + r, w.frames) for r, w in zip((1, 2, 3), waiting)]
    lines = stacks.explain([rank_stack(0, "zero3_generate_rank0.txt"), *waiting]).lines
    assert lines[0].startswith("ranks 1-3 wait in barrier")
    assert lines[1].startswith("odd one out: rank 0 waits in AllGatherHandle.wait")
    assert not any("no majority" in line for line in lines)


def test_all_in_one_place():
    same = [stacks.RankStack(r, 100 + r, rank_stack(1, "zero3_generate_rank1.txt").frames)
            for r in (0, 1)]
    lines = stacks.explain(same).lines
    assert lines == ("all in one place: ranks 0,1 wait in barrier (torch/distributed/"
                     "distributed_c10d.py:5356), called from worker ("
                     + same[0].frames[2].where + ")",)


def test_ptrace_denied_is_said_clearly():
    def denied(argv):
        return subprocess.CompletedProcess(argv, 1, "", dump("ptrace_denied.txt"))

    procs = [RankProcess(4242, 0, "RANK", "python train.py")]
    got = stacks.dump_ranks(procs, py_spy="py-spy", run=denied)
    assert got == [stacks.RankStack(0, 4242, error="ptrace permission denied")]
    lines = stacks.explain(got).lines
    assert lines == (stacks.PTRACE_HINT,)
    assert "ptrace_scope" in lines[0]


def test_dump_uses_full_filenames_and_main_thread():
    seen = []

    def fake(argv):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, dump("sleeper_threads.txt"), "")

    got = stacks.dump_ranks([RankProcess(7, None, "", "python sleeper.py")], py_spy="/x/py-spy",
                            run=fake)
    assert seen == [["/x/py-spy", "dump", "--pid", "7", "--full-filenames"]]
    assert got[0].frames[0].function == "wait_in_barrier"
    assert stacks.explain(got).lines[0].startswith("pid 7 is in wait_in_barrier")


def test_without_py_spy_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    got = stacks.dump_ranks([RankProcess(7, 0, "RANK", "python t.py")])
    assert got == []
    assert "pip install py-spy" in stacks.explain(got).lines[0]
