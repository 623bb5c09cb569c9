"""``watch LOG`` without ``--pid``: the ranks' processes from the DeepSpeed launcher's own lines.

The launcher prints ``process N spawned with command: [...]`` for every rank it starts (the fact
``launch-argv`` of ``fact-ds-spawned-argv``, with ``pid``). When such a pid runs on this host with
that command line, watch attaches to it as ``--pid`` would; a pid that runs something else (the
pid was reused, or the log is another node's) is no rank of this run.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from dsdoctor.model import Fact
from dsdoctor.watch.ranks import RankProcess, find_ranks


@dataclass(frozen=True)
class SpawnedRank:
    """One rank the launcher said it started: its pid and command line, and where it said so."""

    pid: int
    argv: tuple[str, ...]
    where: str  # file:line of the launcher's line


def spawned_ranks(facts: Sequence[Fact]) -> list[SpawnedRank]:
    """The launcher's ``spawned with command`` lines, in log order, the last line per pid."""
    out: dict[int, SpawnedRank] = {}
    for f in facts:
        pid = f.values.get("pid")
        if f.name != "launch-argv" or not isinstance(pid, int):
            continue
        try:
            argv = ast.literal_eval(str(f.values.get("argv", "")))
        except (ValueError, SyntaxError):
            continue
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            out[pid] = SpawnedRank(pid, tuple(argv), f.evidence.location)
    return list(out.values())


def _cmdline(pid: int) -> list[str] | None:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return None


@dataclass(frozen=True)
class Attach:
    """What the log's launcher lines give: the live ranks (empty when none runs here) and one
    line to say at start."""

    procs: tuple[RankProcess, ...]
    note: str


def attach(spawned: Sequence[SpawnedRank],
           cmdline: Callable[[int], list[str] | None] = _cmdline,
           ranks: Callable[[int], list[RankProcess]] = find_ranks) -> Attach:
    """The spawned ranks that run here with the command the launcher gave them (the interpreter's
    path may differ: a venv's python is a link)."""
    if not spawned:
        # the advice first: a narrow pane shows the start of the line
        return Attach((), "no rank pid known: give --pid PID to see the ranks' stacks on a stall "
                          "(the log has no DeepSpeed 'process N spawned with command' line)")
    live: dict[int, RankProcess] = {}
    for s in spawned:
        argv = cmdline(s.pid)
        if argv is None or list(argv[1:]) != list(s.argv[1:]):
            continue
        try:
            found = ranks(s.pid)
        except Exception:  # noqa: BLE001 - it may end meanwhile: then it is no rank to attach to
            continue
        for p in found[:1]:  # the spawned process is the rank (its helpers are not)
            live[p.pid] = p
    pids = ",".join(str(s.pid) for s in spawned)
    if not live:
        return Attach((), f"no rank pid here: give --pid PID, or watch on the ranks' node (the "
                          f"log's launcher spawned pid {pids}, not running here with its command)")
    procs = tuple(sorted(live.values(), key=lambda p: (p.rank is None, p.rank or 0, p.pid)))
    return Attach(procs, "attached to the ranks, as --pid would: pid "
                         + ",".join(str(p.pid) for p in procs)
                         + " (from the log's launcher lines)")
