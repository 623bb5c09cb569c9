"""``watch LOG`` without --pid (dsdoctor/watch/spawned.py): the ranks' pids from the DeepSpeed
launcher's ``process N spawned with command: [...]`` lines, attached to when they run here with
that command, else the way to give them (--pid). The stall comes from a hand-moved clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.plain import PlainWatch
from dsdoctor.watch.spawned import attach, spawned_ranks
from dsdoctor.watch.stacks import find_py_spy

# the launcher's line as DeepSpeed 0.19 prints it (sample_logs/fp16_loss_scale_collapse/train.log)
SPAWNED = "[2026-11-21 11:40:11,508] [INFO] [launch.py:245:main] process {pid} spawned with " \
          "command: {argv!r}\n"
STEP = ("[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] step={n}, skipped=0, "
        "lr=[0.05], mom=[(0.9, 0.999)]\n")
RANK = """
import time

def wait_in_the_collective():
    time.sleep(120)

print("ready", flush=True)
wait_in_the_collective()
"""


class Clock:
    now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rank(tmp_path):
    """A real process started as the launcher starts a rank: python -u script --local_rank=0."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    argv = [sys.executable, "-u", str(script), "--local_rank=0", "--deepspeed_config", "ds.json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc, argv
    finally:
        proc.kill()
        proc.wait()


def followed(path: Path, **kw) -> Follower:  # type: ignore[no-untyped-def]
    follower = Follower([str(path)], AnalysisInputs(), **kw)
    while follower.poll():
        pass
    follower.flush(final=True)
    follower.snapshot()
    return follower


def test_attaches_to_the_ranks_the_log_names(tmp_path, rank):
    proc, argv = rank
    log = tmp_path / "train.log"
    log.write_text(SPAWNED.format(pid=proc.pid, argv=argv))
    spawned = spawned_ranks(followed(log).launch_facts)
    assert [(s.pid, s.argv, s.where) for s in spawned] == [(proc.pid, tuple(argv), f"{log}:1")]
    found = attach(spawned)
    assert [(p.pid, p.rank) for p in found.procs] == [(proc.pid, 0)]
    assert found.note == (f"attached to the ranks, as --pid would: pid {proc.pid} (from the log's "
                          "launcher lines)")


def test_a_pid_running_something_else_is_no_rank(tmp_path, rank):
    proc, argv = rank
    log = tmp_path / "train.log"
    # the same pid with another command: a reused pid, or another node's log
    log.write_text(SPAWNED.format(pid=proc.pid, argv=[*argv[:3], "--local_rank=1"]) +
                   SPAWNED.format(pid=2 ** 22 + 7, argv=argv))  # over pid_max: no such process
    found = attach(spawned_ranks(followed(log).launch_facts))
    assert found.procs == ()
    assert found.note.startswith("no rank pid here: give --pid PID, or watch on the ranks' node")
    assert f"spawned pid {proc.pid},{2 ** 22 + 7}," in found.note


def test_without_launcher_lines_it_says_to_give_the_pid(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(STEP.format(n=1))
    found = attach(spawned_ranks(followed(log).launch_facts))
    assert found.procs == ()
    assert found.note.startswith("no rank pid known: give --pid PID")


def test_plain_watch_of_a_log_dumps_the_spawned_rank_on_a_stall(tmp_path, rank, capsys):
    proc, argv = rank
    log = tmp_path / "train.log"
    log.write_text(SPAWNED.format(pid=proc.pid, argv=argv) + STEP.format(n=1) + STEP.format(n=2))
    clock = Clock()
    said: list[str] = []
    follower = Follower([str(log)], AnalysisInputs(), stall_after=30, clock=clock)
    watch = PlainWatch(follower, out=said.append)  # no --pid, no command
    calls = iter(range(100))
    real_poll = follower.poll

    def poll() -> bool:
        n = next(calls)
        if n < 3:
            return real_poll()  # the backlog, then the end of the log: the pids are looked for
        if n == 3:
            clock.now += 31
            return False
        raise KeyboardInterrupt

    follower.poll = poll  # type: ignore[method-assign]
    code = watch.run()
    err = capsys.readouterr().err
    assert f"dsdoctor: attached to the ranks, as --pid would: pid {proc.pid}" in err
    stack = [line for line in said if line.startswith("rank stacks:")]
    if find_py_spy():
        assert any("is in wait_in_the_collective (" in line for line in stack), stack
    else:
        assert "pip install py-spy" in stack[0]
    assert code == 1 and any(line.startswith("  error: WATCH-HANG run-hung") for line in said)
