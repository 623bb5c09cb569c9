"""Find the ranks of a running job: the processes of its tree and the rank each one is.

The rank comes from RANK (else LOCAL_RANK) in the process's environment (psutil ``environ()``; may
be denied for another user's process), else from its command line (``--local_rank=N``, as the
DeepSpeed launcher passes it). Only reads /proc through psutil; nothing is signalled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psutil

from dsdoctor.errors import UsageError

_CMDLINE_RANK = re.compile(r"^--local[_-]rank(?:=(\d+))?$")


@dataclass(frozen=True)
class RankProcess:
    """One training process and its rank (None when neither its environment nor argv says)."""

    pid: int
    rank: int | None
    source: str  # "RANK", "LOCAL_RANK", "cmdline" or "" (unknown)
    cmdline: str


def rank_from_cmdline(argv: list[str]) -> int | None:
    """``--local_rank=N`` / ``--local-rank N`` (DeepSpeed's launcher appends the first)."""
    for i, arg in enumerate(argv):
        m = _CMDLINE_RANK.match(arg)
        if not m:
            continue
        value = m.group(1) if m.group(1) is not None else (argv[i + 1] if i + 1 < len(argv) else "")
        if value.isdigit():
            return int(value)
    return None


def rank_from_environ(env: dict[str, str]) -> tuple[int | None, str]:
    for key in ("RANK", "LOCAL_RANK"):
        value = env.get(key, "")
        if value.isdigit():
            return int(value), key
    return None, ""


def _describe(proc: psutil.Process) -> RankProcess | None:
    try:
        argv = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        argv = []
    rank, source = None, ""
    try:
        rank, source = rank_from_environ(proc.environ())
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
        pass  # another user's process: its environment is private, the command line may do
    if rank is None:
        rank = rank_from_cmdline(argv)
        source = "cmdline" if rank is not None else ""
    return RankProcess(proc.pid, rank, source, " ".join(argv)[:300])


def find_ranks(root_pid: int) -> list[RankProcess]:
    """The processes of ``root_pid``'s tree that carry a rank, by rank.

    A launcher's own process and the helpers it starts (compile workers, data loader workers that
    inherit RANK) are told apart: per rank, the process nearest the root is the rank's main process.
    When no process says its rank, the leaves of the tree that run Python are returned unranked.
    """
    try:
        root = psutil.Process(root_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess as exc:
        raise UsageError(f"--pid {root_pid}: no such process; give the PID of the launcher "
                         "(deepspeed, torchrun, accelerate) or of one rank") from exc
    except psutil.AccessDenied as exc:
        raise UsageError(f"--pid {root_pid}: permission denied reading its process tree; "
                         "run dsdoctor as the job's user") from exc
    found: dict[int, RankProcess] = {}
    unranked: list[RankProcess] = []
    for proc in sorted(tree, key=lambda p: _depth(p, root_pid)):  # parents before children
        info = _describe(proc)
        if info is None:
            continue
        if info.rank is None:
            unranked.append(info)
        elif info.rank not in found:
            found[info.rank] = info
    if found:
        return [found[r] for r in sorted(found)]
    return [p for p in unranked if "python" in p.cmdline.split(" ")[0].rsplit("/", 1)[-1]
            and not _has_children(p.pid)]


def _depth(proc: psutil.Process, root_pid: int) -> int:
    depth = 0
    try:
        while proc.pid != root_pid and depth < 64:
            parent = proc.parent()
            if parent is None:
                break
            proc, depth = parent, depth + 1
    except psutil.Error:
        pass
    return depth


def _has_children(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).children())
    except psutil.Error:
        return False
