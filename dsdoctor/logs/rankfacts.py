"""What each rank's lines say, gathered while the scan reads them, in constant memory per rank.

A hang's culprit is the rank that differs from the others: the one in another collective, in no
collective, with a lower watchdog count, or the one that failed first (diagnose/ranks.py judges
that). The judgement needs, per rank, the *last* things it printed: its last traceback's frames,
its exception, its watchdog numbers, its step. The symptom aggregator keeps the first lines of a
few ranks and the fact collector the first few hundred facts, so neither can tell 256 ranks'
last frames; this collector keeps exactly that, bounded per rank (MAX_FRAMES) and in ranks
(MAX_RANKS), fed by the scanner for every matched line that carries a rank (a ``[rank3]:``-style
prefix, a ``rank`` field, or a file named per rank).
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

#: Ranks tracked (a 4096-GPU job's every rank); lines of further ranks are not tracked.
MAX_RANKS = 4096
#: A traceback's innermost frames kept per rank: a ZeRO-3 stack is 60 frames deep, and its
#: collective and the user's call site are both near the inner end.
MAX_FRAMES = 48
#: Text kept of a rank's last line and exception (the evidence cut is 500; a table cell is less).
TEXT_CHARS = 300

_PY_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+), in (?P<func>\S+)')
_RICH_FRAME = re.compile(r'│ (?P<file>[\w./~-]+\.py):(?P<line>\d+) in (?P<func>[\w<>.]+)')
#: ``'--local_rank=1'`` in the argv of DeepSpeed's ``process N spawned with command: [...]``.
#: Not read from its ``[...] exits with return code = N`` line: launch.py prints there the
#: ``cmd`` its spawn loop built last (the highest local rank), whichever rank failed
#: (deepspeed/launcher/launch.py:259 at v0.19.8, ``cmd`` rebuilt for each rank in the loop at
#: 210-240).
_LOCAL_RANK_ARG = re.compile(r"--local_rank[= ](\d+)")
#: ``'host': [0, 1]`` in the launcher's ``global_rank_mapping=defaultdict(<class 'list'>, {...})``.
_HOST_RANKS = re.compile(r"'(?P<host>[^']+)':\s*\[(?P<ranks>[\d,\s]*)\]")
#: Rank-less launcher lines the collector reads: a rank's launch (its local rank in the argv),
#: the node's place (node_rank, num_local_procs) and every host's global ranks.
RANKLESS_EMITS = frozenset({"launcher-nonzero-exit", "fact:launch-argv", "fact:launcher-nodes",
                            "fact:rank-mapping", "fact:elastic-ranks", "fact:elastic-failure-rank"})
#: ``[0, 1]`` in torch elastic's ``local_ranks=[0, 1]`` / ``global_ranks=[8, 9]``.
_INT_LIST = re.compile(r"\d+")
#: A peer that went away while this rank waited: the consequence of another rank's exit.
LOST_PEER = re.compile(r"closed by peer|Connection reset by peer|remote worker crash|"
                       r"NCCL communicator was aborted|Observed flight recorder dump signal from "
                       r"another rank", re.I)
#: Hang patterns that say this rank's own collective timed out (not that a peer was lost).
TIMEOUT_PATTERNS = frozenset({
    "nccl-watchdog-timeout", "nccl-watchdog-exception", "nccl-pg-status", "nccl-dump-signal",
    "gloo-timeout", "gloo-monitored-barrier", "dist-backend-error", "nccl-heartbeat-monitor",
    "nccl-watchdog-line-cut"})
#: A cut watchdog line that began the dump-signal message: it may be another rank's timeout
#: signalled to this one ("... from rank N"), so it does not say that this rank timed out.
CUT_DUMP_SIGNAL = "Received a d"
#: Watchdog values kept per rank (the last line that states each wins).
WATCHDOG_FIELDS = ("op", "seq", "timeout_ms", "last_enqueued", "last_completed", "pg")


@dataclass(frozen=True)
class Frame:
    """One traceback frame: ``train.py:56 in mean_loss``."""

    file: str
    line: int
    function: str

    @property
    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} in {self.function}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True)
class Where:
    """A log line: file, line number and its (cut) text."""

    file: str
    line: int
    text: str


@dataclass(frozen=True)
class RankFacts:
    """What one rank's lines said, the last of each kind (see :class:`RankCollector`)."""

    rank: int
    last: Where | None = None  # the last line read for this rank (any pattern)
    step: int | None = None  # the last step it printed
    exception: str | None = None  # "RuntimeError: ..." of its last exception line
    exception_at: Where | None = None
    frames: tuple[Frame, ...] = ()  # its last traceback's innermost frames, outermost first
    timed_out: Where | None = None  # its own collective timed out (gloo, the NCCL watchdog)
    lost_peer: Where | None = None  # the first line that says a peer went away while it waited
    watchdog: dict[str, Any] = field(default_factory=dict)  # op, seq, last_enqueued, ... as read
    exit_code: int | None = None
    exit_at: Where | None = None
    launched: Where | None = None  # the launcher's line that spawned it (its output is this log)
    host: str | None = None  # its node's name in the launcher's global_rank_mapping
    # its Python stack as py-spy read it on a stall (``watch``), outermost first; () from a log
    stack: tuple[Frame, ...] = ()


@dataclass
class _State:
    last: tuple[str, int, str] | None = None
    step: int | None = None
    exception: str | None = None
    exception_at: tuple[str, int, str] | None = None
    frames: deque = field(default_factory=lambda: deque(maxlen=MAX_FRAMES))
    # True when this range saw the traceback's start (a parallel range may begin mid-traceback)
    frames_started: bool = False
    timed_out: tuple[str, int, str] | None = None
    lost_peer: tuple[str, int, str] | None = None
    watchdog: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    exit_at: tuple[str, int, str] | None = None
    launched: tuple[str, int, str] | None = None


def _where(t: tuple[str, int, str] | None) -> Where | None:
    return None if t is None else Where(t[0], t[1], " ".join(t[2].split())[:TEXT_CHARS])


class RankCollector:
    """Per rank, the last of each thing its lines said. ``add`` is called for every matched line
    that has a rank; it keeps references and small values only (the text is cut at ``facts``)."""

    def __init__(self) -> None:
        self._ranks: dict[int, _State] = {}
        # per file, the node the launcher that printed it ran on: node_rank, and the global
        # ranks of every host (global_rank_mapping, the same on every node), in node order
        self._node_rank: dict[str, int] = {}
        self._hosts: dict[str, dict[str, tuple[int, ...]]] = {}
        # torchrun: per file, each local rank's global rank (the agent's "Rendezvous complete"
        # block, the failures table's "rank : 9 (local_rank: 1)"), and a failed rank's host
        self._elastic: dict[str, dict[int, int]] = {}
        self._elastic_hosts: dict[int, str] = {}
        # lines that carry only a node's local rank (torchrun's [default3]:, --log-dir's
        # attempt_0/3/stdout.log), by (file, local rank): made global in facts(), once every
        # line of the file (the agent's block among them) has been read
        self._local: dict[tuple[str, int], _State] = {}

    def __bool__(self) -> bool:
        return bool(self._ranks)

    def add(self, emits: str, pattern_id: str, file: str, line: int, text: str, rank: int | None,
            values: dict[str, Any], local: bool = False) -> None:
        """``local``: ``rank`` is the node's local rank (torchrun's ``[default3]:`` prefix)."""
        if emits == "fact:elastic-ranks":
            locals_ = [int(x) for x in _INT_LIST.findall(str(values.get("local_ranks", "")))]
            globals_ = [int(x) for x in _INT_LIST.findall(str(values.get("global_ranks", "")))]
            if locals_ and len(locals_) == len(globals_):
                self._elastic.setdefault(file, {}).update(zip(locals_, globals_))
            return
        if emits == "fact:elastic-failure-rank":
            g, lr = values.get("global_rank"), values.get("local_rank")
            if isinstance(g, int) and isinstance(lr, int):
                self._elastic.setdefault(file, {})[lr] = g
                if values.get("host"):
                    self._elastic_hosts.setdefault(g, str(values["host"]))
                code = values.get("exit_code")
                st = self._ranks.get(g)
                if st is None and len(self._ranks) + len(self._local) < MAX_RANKS:
                    st = self._ranks[g] = _State()
                if isinstance(code, int) and st is not None:
                    # this rank's own exit code (torch elastic's "failed (exitcode: 1)
                    # local_rank: 1" line names only the first failure); the agent's table is
                    # not the rank's own line, so its last line stays its own
                    st.exit_code, st.exit_at = code, (file, line, text)
            return
        if emits == "fact:launcher-nodes":
            if isinstance(values.get("node_rank"), int):
                self._node_rank[file] = values["node_rank"]
            return
        if emits == "fact:rank-mapping":
            hosts = {m["host"]: tuple(int(r) for r in m["ranks"].replace(",", " ").split())
                     for m in _HOST_RANKS.finditer(str(values.get("mapping", "")))}
            if hosts:
                self._hosts[file] = hosts
            return
        if emits == "fact:launch-argv":
            if "exit_code" in values:  # the sigkill_handler's line: see _LOCAL_RANK_ARG
                return
            m = _LOCAL_RANK_ARG.search(str(values.get("argv", "")))
            if m is None or rank is not None:
                return
            rank = self._global_rank(file, int(m.group(1)))
            emits = "launched"
        elif rank is None and emits == "launcher-nonzero-exit":
            # torch elastic names the failed local rank; DeepSpeed's line names no rank
            rank = int(values["local_rank"]) if isinstance(values.get("local_rank"), int) else None
            local = True
        if rank is None or rank < 0:
            return
        table: dict[Any, _State] = self._local if local else self._ranks
        key: Any = (file, rank) if local else rank
        st = table.get(key)
        if st is None:
            if len(self._ranks) + len(self._local) >= MAX_RANKS:
                return
            st = table[key] = _State()
        here = (file, line, text)
        if emits == "launched":
            st.launched = st.launched or here
            return  # the launcher's line, not one of the rank's own
        st.last = here
        if emits == "timeline":
            step = values.get("step")
            if isinstance(step, int) or (isinstance(step, float) and step.is_integer()):
                st.step = int(step)
        elif emits == "fact:traceback-start":
            st.frames.clear()
            st.frames_started = True
        elif emits == "fact:traceback-frame":
            m = _PY_FRAME.search(text) or _RICH_FRAME.search(text)
            if m:
                st.frames.append(Frame(m["file"], int(m["line"]), m["func"]))
        elif emits == "python-exception":
            exc_type, msg = values.get("exc_type"), values.get("message")
            if exc_type:
                st.exception = f"{exc_type}: {msg}" if msg else str(exc_type)
                st.exception_at = here
            if LOST_PEER.search(text):
                st.lost_peer = st.lost_peer or here
        elif emits == "fact:peer-connection-closed":
            st.lost_peer = st.lost_peer or here
        elif emits == "hang":
            for name in WATCHDOG_FIELDS:
                if name in values:
                    st.watchdog[name] = values[name]
            if LOST_PEER.search(text):
                st.lost_peer = st.lost_peer or here
            elif "from_rank" in values or (pattern_id == "nccl-watchdog-line-cut"
                                           and CUT_DUMP_SIGNAL in text):
                pass  # another rank's timeout signalled to this one: its counts, not its timeout
            elif pattern_id in TIMEOUT_PATTERNS and st.timed_out is None:
                st.timed_out = here  # the first: when this rank's wait ran out
        elif emits == "launcher-nonzero-exit":
            code = values.get("exit_code")
            if isinstance(code, int):
                st.exit_code, st.exit_at = code, here

    def _global_rank(self, file: str, local: int) -> int:
        """The global rank of local rank ``local`` on the node whose launcher printed ``file``:
        launch.py gives local process i the i-th rank of its host in global_rank_mapping."""
        hosts, node = self._hosts.get(file), self._node_rank.get(file)
        if hosts and node is not None and node < len(hosts):
            ranks = list(hosts.values())[node]
            if local < len(ranks):
                return ranks[local]
        return local  # one node (or nothing says which): the local rank is the rank

    def merge(self, later: RankCollector, shift: int) -> None:
        """Fold the collector of a later range of the same file (its lines shifted by ``shift``):
        what it saw last wins; a traceback it saw without its start continues this one's."""
        def moved(t: tuple[str, int, str] | None) -> tuple[str, int, str] | None:
            return None if t is None else (t[0], t[1] + shift, t[2])

        pairs: list[tuple[dict[Any, _State], dict[Any, _State]]] = [
            (self._ranks, later._ranks), (self._local, later._local)]  # type: ignore[list-item]
        for table, other in pairs:
            for key, b in other.items():
                a = table.get(key)
                if a is None:
                    if len(self._ranks) + len(self._local) >= MAX_RANKS:
                        continue
                    a = table[key] = _State()
                _fold(a, b, moved)
        for name, node in later._node_rank.items():
            self._node_rank.setdefault(name, node)
        for name, hosts in later._hosts.items():
            self._hosts.setdefault(name, hosts)
        for name, ranks in later._elastic.items():
            self._elastic.setdefault(name, {}).update(ranks)
        for g, host in later._elastic_hosts.items():
            self._elastic_hosts.setdefault(g, host)

    def _elastic_map(self, file: str) -> dict[int, int]:
        """torchrun's local -> global ranks for the lines of ``file``: its own agent block or
        failures table, else those of the launcher's log in the nearest folder above it (a
        --log-dir's attempt_0/3/stdout.log under the node's folder with its console log)."""
        own = self._elastic.get(file)
        if own:
            return own
        best, best_len = {}, -1
        for name, ranks in self._elastic.items():
            folder = os.path.dirname(name)
            if folder and file.startswith(folder + os.sep) and len(folder) > best_len:
                best, best_len = ranks, len(folder)
        return best

    def _resolved(self) -> dict[int, _State]:
        """Every rank's state by global rank: the local-rank lines folded in."""
        if not self._local:
            return self._ranks
        out: dict[int, _State] = {}
        for rank, st in self._ranks.items():
            _fold(out.setdefault(rank, _State()), st)
        for (file, local), st in self._local.items():
            _fold(out.setdefault(self._elastic_map(file).get(local, local), _State()), st)
        return out

    def hosts(self) -> dict[int, str]:
        """Each rank's host as the launchers name it: DeepSpeed's global_rank_mapping, torch
        elastic's failures table (``host : node-b`` over ``rank : 9 (local_rank: 1)``); none
        when every rank is on one host (a name then tells nothing) and no two torchrun nodes'
        rank maps were read."""
        out: dict[int, str] = {}
        for hosts in self._hosts.values():
            for host, ranks in hosts.items():
                for r in ranks:
                    out.setdefault(r, host)
        for r, host in self._elastic_hosts.items():
            out.setdefault(r, host)
        # several torchrun nodes' logs: a host named by one node's failures table tells where
        several_nodes = len({tuple(sorted(m.items())) for m in self._elastic.values()}) > 1
        return out if len(set(out.values())) > 1 or several_nodes else {}

    def facts(self) -> dict[int, RankFacts]:
        """The frozen facts of every rank seen, by rank."""
        out: dict[int, RankFacts] = {}
        host_of = self.hosts()
        states = self._resolved()
        for rank in sorted(states):
            st = states[rank]
            out[rank] = RankFacts(
                rank=rank, last=_where(st.last), step=st.step,
                exception=" ".join(st.exception.split())[:TEXT_CHARS] if st.exception else None,
                exception_at=_where(st.exception_at), frames=tuple(st.frames),
                timed_out=_where(st.timed_out), lost_peer=_where(st.lost_peer),
                watchdog=dict(st.watchdog), exit_code=st.exit_code, exit_at=_where(st.exit_at),
                launched=_where(st.launched), host=host_of.get(rank))
        return out


def _fold(a: _State, b: _State,
          moved: Callable[[tuple[str, int, str] | None], tuple[str, int, str] | None] = lambda t: t
          ) -> None:
    """Fold ``b`` (a later range of the same file, or the same rank's lines under another
    prefix) into ``a``: what ``b`` saw last wins; a traceback it saw without its start
    continues ``a``'s."""
    a.last = moved(b.last) or a.last
    a.step = b.step if b.step is not None else a.step
    if b.exception_at is not None:
        a.exception, a.exception_at = b.exception, moved(b.exception_at)
    if b.frames_started:
        a.frames = deque(b.frames, maxlen=MAX_FRAMES)
        a.frames_started = True
    else:
        a.frames.extend(b.frames)
    a.timed_out = a.timed_out or moved(b.timed_out)
    a.lost_peer = a.lost_peer or moved(b.lost_peer)
    a.watchdog.update(b.watchdog)
    if b.exit_at is not None:
        a.exit_code, a.exit_at = b.exit_code, moved(b.exit_at)
    a.launched = a.launched or moved(b.launched)


def with_text(facts: RankFacts, fn: Callable[[str], str]) -> RankFacts:
    """``facts`` with every text passed through ``fn`` (the report's redactor: a token printed
    on a rank's last line never reaches the output)."""
    def w(x: Where | None) -> Where | None:
        return None if x is None else replace(x, text=fn(x.text))

    return replace(facts, last=w(facts.last), exception_at=w(facts.exception_at),
                   exception=fn(facts.exception) if facts.exception else facts.exception,
                   timed_out=w(facts.timed_out), lost_peer=w(facts.lost_peer),
                   exit_at=w(facts.exit_at), launched=w(facts.launched),
                   host=fn(facts.host) if facts.host else facts.host)


def with_stacks(ranks: dict[int, RankFacts],
                stacks: tuple[tuple[int, tuple[Frame, ...]], ...]) -> dict[int, RankFacts]:
    """``ranks`` with each rank's live stack (``watch``'s py-spy dump on a stall) added; a rank
    the log never named gets facts of its own (its stack is the evidence that it ran)."""
    out = dict(ranks)
    for rank, frames in stacks:
        if frames and (rank in out or len(out) < MAX_RANKS):
            out[rank] = replace(out.get(rank) or RankFacts(rank), stack=frames)
    return out


__all__ = ["MAX_FRAMES", "MAX_RANKS", "RANKLESS_EMITS", "Frame", "RankCollector", "RankFacts", "Where",
           "with_stacks", "with_text"]
