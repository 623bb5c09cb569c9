"""Finding the ranks of a running job (dsdoctor/watch/ranks.py) on a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from dsdoctor.errors import UsageError
from dsdoctor.watch.ranks import find_ranks, rank_from_cmdline, rank_from_environ

# A launcher-like parent: rank 0 from its environment (torchrun style), rank 1 only from its
# command line (the DeepSpeed launcher appends --local_rank=N), and one helper without a rank.
LAUNCHER = r"""
import os, subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
env0 = dict(os.environ, RANK="0", LOCAL_RANK="0")
env1 = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
kids = [subprocess.Popen(sleep, env=env0),
        subprocess.Popen(sleep + ["--local_rank=1"], env=env1),
        subprocess.Popen(sleep, env=env1)]
print("ready", flush=True)
time.sleep(60)
"""


def test_rank_from_cmdline_and_environ():
    assert rank_from_cmdline(["python", "-u", "train.py", "--local_rank=3", "--x"]) == 3
    assert rank_from_cmdline(["python", "train.py", "--local-rank", "2"]) == 2
    assert rank_from_cmdline(["python", "train.py", "--local_rank_x=2"]) is None
    assert rank_from_environ({"RANK": "5", "LOCAL_RANK": "1"}) == (5, "RANK")
    assert rank_from_environ({"LOCAL_RANK": "1"}) == (1, "LOCAL_RANK")
    assert rank_from_environ({"RANK": ""}) == (None, "")


def test_find_ranks_in_a_real_process_tree():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    parent = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # a safety net: two Python children on a loaded machine
        while True:
            ranks = find_ranks(parent.pid)
            if len(ranks) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(r.rank, r.source) for r in ranks] == [(0, "RANK"), (1, "cmdline")]
        children = {c.pid for c in psutil.Process(parent.pid).children()}
        assert {r.pid for r in ranks} <= children
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()


def test_unknown_pid_is_a_usage_error():
    with pytest.raises(UsageError, match="no such process"):
        find_ranks(2**22 + 12345)
