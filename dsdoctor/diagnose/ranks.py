"""The per-rank table and the hang's culprit, from the logs alone.

A collective timeout names the ranks that waited, not the rank that made them wait. The rank
that did is the one that differs: it failed first (an exception before the others' timeouts),
its watchdog counted fewer enqueued collectives (it never entered the one the others wait in),
its last frame is in no collective while the others wait in one, or it waits in another
collective (a desync: ``all_reduce`` under ``if rank == 0``). Only when every rank waits in the
same collective does no rank stand out, and only then is "a slow step: raise the timeout" the
advice. Like ``watch``'s py-spy grouping (watch/stacks.py), ranks in the same state are told
once, so 256 ranks read in a few lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dsdoctor.logs.rankfacts import Frame, RankFacts, Where

if TYPE_CHECKING:
    from dsdoctor.diagnose.frmatch import TraceAnalysis

#: Groups printed in the text table; the rest are counted on one line (the JSON has them all).
MAX_GROUPS = 12
#: A rank that printed no timeout while all the others timed out in one collective is named only
#: when such ranks are this small a share (a log that lost most ranks' lines proves nothing).
SILENT_SHARE = 0.125

#: torch.distributed / DeepSpeed comm functions that are a collective (the frame that waits).
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "_all_gather_base",
    "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "reduce_scatter_fn", "allgather_fn", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "all_to_all", "all_to_all_single", "reduce", "gather", "gather_object",
    "scatter", "scatter_object_list", "send", "recv", "isend", "irecv", "inference_all_reduce"})
#: DeepSpeed ZeRO-3 waits for a parameter all-gather in these frames (no torch frame shows it).
ZERO3_FETCH = frozenset({"fetch_sub_module", "_fetch_sub_module_impl", "_all_gather",
                         "_all_gather_params"})
#: NCCL's OpType names as the collective's Python name.
NCCL_OPS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather",
            "ALLGATHER_COALESCED": "all_gather", "REDUCE_SCATTER": "reduce_scatter",
            "_REDUCE_SCATTER_BASE": "reduce_scatter", "REDUCESCATTER": "reduce_scatter",
            "BROADCAST": "broadcast", "BARRIER": "barrier", "ALLTOALL": "all_to_all",
            "ALLTOALL_BASE": "all_to_all", "REDUCE": "reduce", "GATHER": "gather",
            "SCATTER": "scatter", "SEND": "send", "RECV": "recv", "COALESCED": "coalesced ops"}
#: Frames of installed packages and the interpreter: not the user's code.
_LIBRARY = re.compile(r"site-packages/|dist-packages/|/lib/python\d[\d.]*/|^<frozen |/torch/|"
                      r"/deepspeed/|/transformers/|/accelerate/")
#: Decorators and module plumbing between a call site and the function it called.
_PLUMBING = frozenset({"wrapper", "wrapped_fn", "decorate_context", "_fn", "inner", "_call_impl",
                       "_wrapped_call_impl", "log_wrapper", "forward_call", "_no_grad_wrapper"})
#: Exceptions that say the rank was stopped (by the launcher, a person), not that it failed.
STOPPED = re.compile(r"SignalException|KeyboardInterrupt|SystemExit|got signal: ")
_TIME = re.compile(r"\d{4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?|"
                   r"\b[EWIF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?")

#: States, most telling first (the order of the table's groups after the culprit's).
#: "silent": the launcher spawned it into this log and it printed nothing of its own after that.
STATES = ("failed", "timed-out", "waiting", "exited", "silent", "running")


@dataclass(frozen=True)
class RankState:
    """One rank's row: where it was when the run ended, and the line that says so."""

    rank: int
    state: str  # one of STATES
    collective: str | None = None  # all_reduce, barrier, "ZeRO-3 all-gather", from frames/OpType
    seq: int | None = None  # the watchdog's SeqNum / work id
    last_enqueued: int | None = None
    last_completed: int | None = None
    pg: int | None = None  # the process group the watchdog numbers count in
    step: int | None = None
    last_line: Where | None = None
    time: str | None = None  # the timestamp of its decisive (or last) line, as printed
    exception: str | None = None
    frame: Frame | None = None  # the innermost frame of its last traceback
    call_site: Frame | None = None  # the innermost frame of the user's code
    entered: str | None = None  # the library function the call site entered (generate, backward)
    exit_code: int | None = None
    lost_peer: bool = False  # a peer went away while it waited (another rank's exit)
    trace: str | None = None  # what its Flight Recorder dump says (diagnose/frmatch.py)
    host: str | None = None  # its node (the launcher's global_rank_mapping), when several
    launched: Where | None = None  # the launcher's line that spawned it into the log
    from_stack: bool = False  # where it was comes from its live stack (watch), not its lines

    @property
    def signature(self) -> tuple[Any, ...]:
        """What makes two ranks' states the same (their group): what the phrase says."""
        site = self.call_site.short if self.call_site else None
        if self.state == "failed":
            return (self.state, (self.exception or "")[:60], site)
        if self.state in ("timed-out", "waiting"):
            return (self.state, self.collective, site, self.entered, self.seq,
                    self.last_enqueued, self.lost_peer, self.trace, self.from_stack)
        if self.state == "exited":
            return (self.state, self.exit_code, self.trace)
        return (self.state, self.trace, site, self.entered, self.frame.short if self.frame else None,
                self.from_stack)

    def phrase(self) -> str:
        """``timed out in all_reduce (SeqNum 956300) at train.py:56 in mean_loss``."""
        told = self._phrase()
        if self.from_stack:
            told += ", by its stack on the stall"
        if self.trace is None:
            return told
        if self.last_line is None and self.frame is None and self.last_enqueued is None:
            return f"trace: {self.trace}"  # no log line of it: its dump says it all
        return f"{told}; trace: {self.trace}"

    def _phrase(self) -> str:
        site = f" at {self.call_site.short}" if self.call_site else (
            f" at {self.frame.short}" if self.frame and not self.collective else "")
        inside = f" inside {self.entered}" if self.entered and self.entered != self.collective \
            else ""
        coll = self.collective or ("a collective" if self.seq is not None
                                   or self.last_enqueued is not None else "")
        if self.seq is not None:
            coll += f" SeqNum={self.seq}"
        if self.last_enqueued is not None:
            coll += f" (enqueued {self.last_enqueued}, completed {self.last_completed})"
        if self.state == "failed":
            return f"failed: {_cut(self.exception or 'an exception', 60)}{site}"
        if self.state == "timed-out":
            return f"timed out in {coll.strip() or 'a collective'}{inside}{site}"
        if self.state == "waiting":
            where = f"waiting in {coll.strip()}" if coll else "waiting"
            tail = "; lost its peer" if self.lost_peer else ""
            return f"{where}{inside}{site}{tail}"
        if self.state == "exited":
            return f"exited with code {self.exit_code}"
        if self.state == "silent":
            return "printed nothing after its launch: no timeout, exception or lost peer"
        if self.from_stack and self.frame is not None:
            return f"in {self.entered}{site}" if self.entered else f"in its own code{site}"
        if self.frame is not None:  # a traceback that is no failure (an interrupt, a warning)
            return f"last frame in {self.entered}{site}" if self.entered else (
                f"last frame{site}")
        if self.last_enqueued is not None:
            return (f"no collective pending (enqueued {self.last_enqueued}, completed "
                    f"{self.last_completed})")
        return "running: no timeout, exception or exit in its lines"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "state": self.state, "collective": self.collective,
                "seq": self.seq, "last_enqueued": self.last_enqueued,
                "last_completed": self.last_completed, "pg": self.pg, "step": self.step,
                "last_line": _where_dict(self.last_line), "time": self.time,
                "exception": self.exception,
                "frame": self.frame.to_dict() if self.frame else None,
                "call_site": self.call_site.to_dict() if self.call_site else None,
                "entered": self.entered, "exit_code": self.exit_code, "lost_peer": self.lost_peer,
                "host": self.host, "launched": _where_dict(self.launched),
                "from_stack": self.from_stack,
                "summary": self.phrase()} | ({"trace": self.trace} if self.trace else {})


@dataclass(frozen=True)
class RankGroup:
    """Ranks in the same state, told once."""

    ranks: tuple[int, ...]
    summary: str  # the state's phrase (RankState.phrase of its first rank)
    culprit: bool = False
    hosts: tuple[str, ...] = ()  # the nodes its ranks ran on, when the log names several

    @property
    def label(self) -> str:
        where = (f" [{self.hosts[0]}]" if len(self.hosts) == 1 else
                 f" [{len(self.hosts)} hosts]" if self.hosts else "")
        return f"{'rank' if len(self.ranks) == 1 else 'ranks'} {rank_ranges(self.ranks)}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "label": self.label, "summary": self.summary,
                "culprit": self.culprit, "hosts": list(self.hosts)}


@dataclass(frozen=True)
class Culprit:
    """The rank(s) that made the others wait, and why the log says so."""

    ranks: tuple[int, ...]
    # failed-first | behind | outside | vanished | desync | trace-missing | trace-mismatch
    kind: str
    sentence: str  # "rank 0 ... ; rank 1 only waited"
    waited: tuple[int, ...] = ()  # the ranks that only waited for it
    frame: Frame | None = None  # the culprit's call site (or last frame)
    evidence: Where | None = None  # the line that shows it

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "kind": self.kind, "sentence": self.sentence,
                "waited": list(self.waited),
                "frame": self.frame.to_dict() if self.frame else None,
                "evidence": _where_dict(self.evidence)}


@dataclass(frozen=True)
class RankTable:
    """Every rank the log shows, grouped by state, and the culprit when one stands out.

    ``agreement`` is ``culprit`` (a rank stands out), ``same-collective`` (every rank that says
    where it was waits in the same collective: only then may a slow step be the cause) or
    ``unknown`` (the lines do not tell)."""

    ranks: tuple[RankState, ...]
    groups: tuple[RankGroup, ...]
    culprit: Culprit | None = None
    agreement: str = "unknown"

    def lines(self, limit: int = MAX_GROUPS) -> list[str]:
        """The table as short lines, at most ``limit`` + 1: ``ranks 0-6, 8-63: waiting ...``."""
        width = max((len(g.label) for g in self.groups[:limit]), default=0)
        out = [f"{g.label:<{width}}  {g.summary}{'  ← culprit' if g.culprit else ''}"
               for g in self.groups[:limit]]
        rest = self.groups[limit:]
        if rest:
            n = sum(len(g.ranks) for g in rest)
            out.append(f"{len(rest)} more group(s) of {n} rank(s): see --format json")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"count": len(self.ranks), "agreement": self.agreement,
                "culprit": self.culprit.to_dict() if self.culprit else None,
                "groups": [g.to_dict() for g in self.groups],
                "ranks": [r.to_dict() for r in self.ranks]}


def _where_dict(w: Where | None) -> dict[str, Any] | None:
    return None if w is None else {"file": w.file, "line": w.line, "text": w.text}


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0-6, 8-63`` from sorted rank numbers."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)


def _is_library(f: Frame) -> bool:
    return bool(_LIBRARY.search(f.file))


def _collective(frames: tuple[Frame, ...]) -> str | None:
    """The collective the innermost frames wait in (torch.distributed, DeepSpeed comm, ZeRO-3)."""
    for f in reversed(frames):
        if f.function in COLLECTIVES and ("distributed" in f.file or "comm" in f.file):
            return f.function
        if f.function in ZERO3_FETCH and "zero" in f.file:
            return "ZeRO-3 all-gather"
    return None


def call_site(frames: tuple[Frame, ...]) -> tuple[Frame | None, str | None]:
    """The innermost frame of the user's code, and the library function it entered."""
    for i in range(len(frames) - 1, -1, -1):
        if not _is_library(frames[i]):
            entered = next((f.function for f in frames[i + 1:] if f.function not in _PLUMBING),
                           None)
            return frames[i], entered
    return None, None


def _time(*lines: Where | None) -> str | None:
    for w in lines:
        if w is not None:
            m = _TIME.search(w.text)
            if m:
                return m.group(0)
    return None


def _says_where(f: RankFacts) -> bool:
    """The rank's own lines say where it was: a traceback, a timeout, an exception, the
    watchdog's collective or counts. A lost peer alone says it waited, not in which collective."""
    return bool(f.frames or f.timed_out or f.exception_at
                or f.watchdog.get("op") or f.watchdog.get("last_enqueued") is not None)


def state_of(f: RankFacts) -> RankState:
    """One rank's row from its facts. Where its lines do not say where it was, its live stack
    (``watch``'s py-spy dump on the stall) does: a rank killed before its own timeout fired
    prints nothing, whether it waited in another collective or was reading data."""
    from_stack = bool(f.stack) and not _says_where(f)
    frames = f.stack if from_stack else f.frames
    collective = _collective(frames)
    op = f.watchdog.get("op")
    if collective is None and isinstance(op, str) and op.upper() in NCCL_OPS:
        collective = NCCL_OPS[op.upper()]
    site, entered = call_site(frames)
    lost = f.lost_peer is not None
    # An exception line that is the timeout or the lost peer itself is not a failure of its own,
    # nor is the signal the launcher sent once another rank failed (SIGTERM, Ctrl-C).
    own_failure = (f.exception is not None and f.exception_at is not None
                   and f.exception_at != f.timed_out and f.exception_at != f.lost_peer
                   and not _mentions_timeout(f.exception) and not STOPPED.search(f.exception))
    enq, done = _int_or_none(f.watchdog.get("last_enqueued")), _int_or_none(
        f.watchdog.get("last_completed"))
    pending = enq is not None and done is not None and done < enq
    if own_failure and f.timed_out is None and not lost:
        state = "failed"
    elif f.timed_out is not None:
        state = "timed-out"
    elif lost or collective is not None or pending:
        state = "waiting"
    elif f.exit_code is not None:
        state = "exited"
    elif f.last is None and f.launched is not None and not from_stack:
        state = "silent"
    else:
        state = "running"
    decisive = f.timed_out or f.lost_peer or f.exception_at or f.exit_at
    num = _int_or_none
    return RankState(
        rank=f.rank, state=state, collective=collective, seq=num(f.watchdog.get("seq")),
        last_enqueued=num(f.watchdog.get("last_enqueued")),
        last_completed=num(f.watchdog.get("last_completed")), pg=num(f.watchdog.get("pg")),
        step=f.step, last_line=f.last, time=_time(decisive, f.last), exception=f.exception,
        frame=frames[-1] if frames else None, call_site=site, entered=entered,
        exit_code=f.exit_code, lost_peer=lost, host=f.host, launched=f.launched,
        from_stack=from_stack)


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _mentions_timeout(text: str) -> bool:
    return bool(re.search(r"[Tt]imed out|[Tt]imeout|Watchdog caught", text))


def _names(ranks: Iterable[int], states: Iterable[RankState] = ()) -> str:
    """``rank 1``, ``ranks 0-6, 8-63``; ``rank 1 (on node-b)`` when the log names its host."""
    rs = sorted(ranks)
    text = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rank_ranges(rs)}"
    hosts = sorted({s.host for s in states if s.rank in rs and s.host})
    return f"{text} (on {hosts[0]})" if len(hosts) == 1 else text


def _verb(ranks: Iterable[int], one: str, many: str) -> str:
    return one if len(list(ranks)) == 1 else many


def _order_key(s: RankState) -> tuple[str, int]:
    w = s.last_line
    return (w.file, w.line) if w is not None else ("", 0)


def _culprit(states: list[RankState]) -> tuple[Culprit | None, str]:
    """The rank(s) that stand out, and the agreement (see RankTable)."""
    stuck = [s for s in states if s.state in ("timed-out", "waiting")]
    if not stuck:
        return None, "unknown"
    # 1. A rank that failed on its own exception: the others' timeouts and lost peers follow it.
    failed = sorted((s for s in states if s.state == "failed"), key=_order_key)
    if failed:
        first = failed[0]
        others = tuple(s.rank for s in stuck)
        where = f" at {first.call_site.short}" if first.call_site else (
            f" at {first.frame.short}" if first.frame else "")
        sentence = (f"{_names([first.rank], states)} failed first ({_cut(first.exception or '', 90)}"
                    f"{where}); {_names(others, states)} only waited for it: "
                    f"{_verb(others, 'its', 'their')} timeout or lost peer is the consequence")
        return Culprit((first.rank,), "failed-first", sentence, others,
                       first.call_site or first.frame, first.last_line), "culprit"
    # 2. Watchdog counts in one process group: a rank that enqueued fewer collectives never
    # entered the one the others wait in.
    by_pg: dict[int | None, list[RankState]] = {}
    for s in states:
        if s.last_enqueued is not None:
            by_pg.setdefault(s.pg, []).append(s)
    for group in by_pg.values():
        top = max(s.last_enqueued or 0 for s in group)
        behind = [s for s in group if (s.last_enqueued or 0) < top]
        if behind and len(behind) < len(group):
            low = min(s.last_enqueued or 0 for s in behind)
            names = tuple(s.rank for s in behind)
            waited = tuple(s.rank for s in group if s.rank not in names)
            first = behind[0]
            last = f" ({first.phrase()})" if first.frame is not None else ""
            sentence = (f"{_names(names, states)} never entered collective {low + 1} "
                        f"(last enqueued {low}, the others {top}): "
                        f"{_verb(names, 'it', 'they')} fell behind{last}, and {_names(waited, states)} "
                        f"only waited for {_verb(names, 'it', 'them')}")
            return Culprit(names, "behind", sentence, waited, first.call_site or first.frame,
                           first.last_line), "culprit"
    # 3. A rank in no collective (its frames say where) while the others wait in one; or, among
    # many ranks, the few that printed no timeout while all the others timed out in one; or a
    # rank the launcher spawned into this very log that printed nothing at all (no timeout, no
    # lost peer, no traceback) while the others waited: it never joined them, but where it was
    # the log cannot say (reading data, its own code, gone without a word, or waiting in another
    # collective and killed by the launcher before its own timeout fired; a live run showed the
    # last: tests/test_watch_live_culprit.py, hang_desync_allreduce, rank 1 silent in CI).
    coll_keys = {(s.collective, s.seq) for s in stuck}
    outside = [s for s in states if s.state in ("running", "exited") and s.frame is not None]
    silent = [s for s in states if s.state in ("running", "silent") and s.frame is None]
    launched = all(s.state == "silent" for s in silent)
    if not outside and silent and len(coll_keys) == 1 and (len(stuck) >= 2 or launched) and (
            len(silent) <= max(1, int(SILENT_SHARE * len(states)))
            and len(stuck) + len(silent) == len(states)):
        outside = silent
    if outside:
        names = tuple(s.rank for s in outside)
        waited = tuple(s.rank for s in stuck)
        first = outside[0]
        coll = next(iter(coll_keys))[0] or "a collective"
        who, whom = _names(names, states), _names(waited, states)
        if first.frame is None and all(s.lost_peer and s.state == "waiting" for s in stuck):
            # nobody timed out: the waiting ranks lost their peer, which went without a word
            sentence = (f"{who} went away without a traceback or timeout (killed: SIGKILL, the "
                        f"OOM killer, the node lost) while {whom} waited in {coll}; {whom} only "
                        f"lost {_verb(names, 'it', 'them')}")
            return Culprit(names, "vanished", sentence, waited, None,
                           first.last_line), "culprit"
        if first.frame is not None:
            where = f" ({first.phrase()})"
        elif first.state == "silent":
            # Killed by the launcher once the first rank died, a rank waiting in a collective
            # it entered later (a desync: under `if rank == 0:` the others run on into the next
            # step's collective) prints no more than one reading data: its stack tells them apart.
            where = (": it printed no timeout, exception or lost peer; where it was instead "
                     "(reading data, its own code, another collective) only its stack says")
        else:
            where = ": it printed no timeout"
        sentence = (f"{who} never entered {coll}{where}; {whom} only "
                    f"waited for {_verb(names, 'it', 'them')}")
        return Culprit(names, "outside", sentence, waited, first.call_site or first.frame,
                       first.last_line), "culprit"
    # 4. Ranks waiting in different collectives (or the same one called from different lines).
    # A rank that does not say where it waits (no frame, OpType or SeqNum) differs from none.
    groups: dict[tuple[Any, ...], list[RankState]] = {}
    for s in stuck:
        if s.collective is None and s.call_site is None and s.seq is None:
            continue
        groups.setdefault((s.collective, s.call_site.short if s.call_site else None,
                           s.entered, s.seq), []).append(s)
    if not groups:
        return None, "unknown"
    if len(groups) == 1:
        return None, "same-collective"
    sizes = sorted(len(g) for g in groups.values())
    odd: list[RankState] | None = None
    if sizes[-1] > sizes[-2]:  # one majority: every other group is odd
        biggest = max(groups.values(), key=len)
        odd = [s for g in groups.values() if g is not biggest for s in g]
    else:  # a tie (two ranks): the rank that timed out waited first, so it left the common
        # path first; a rank that only lost its peer was still waiting when that rank died
        known = [s for g in groups.values() for s in g]
        timed = [s for s in known if s.state == "timed-out"]
        if timed and len(timed) < len(known):
            odd = timed
    if odd is None:
        return None, "unknown"
    names = tuple(s.rank for s in odd)
    waited = tuple(s.rank for s in stuck if s.rank not in names)
    first = odd[0]
    other = next(s for g in groups.values() for s in g if s.rank not in names)
    sentence = (f"{_names(names, states)} waited alone in the {first.collective or 'collective'}"
                f"{' at ' + first.call_site.short if first.call_site else ''}, which "
                f"{_names(waited, states)} never entered (a desync); {_names(waited, states)} only waited "
                f"({other.phrase().replace('; lost its peer', '').replace('waiting ', '')})")
    return Culprit(names, "desync", sentence, waited, first.call_site or first.frame,
                   first.last_line), "culprit"


def build(facts: Mapping[int, RankFacts]) -> RankTable | None:
    """The table of the ranks the log shows; None with fewer than two ranks."""
    states = _told([state_of(f) for _r, f in sorted(facts.items())])
    if len(states) < 2:
        return None
    culprit, agreement = _culprit(states)
    return _table(states, culprit, agreement)


def _table(states: list[RankState], culprit: Culprit | None, agreement: str) -> RankTable:
    """Ranks in the same state grouped (the culprit's apart), the culprit's group first."""
    blamed = set(culprit.ranks) if culprit else set()
    by_sig: dict[tuple[Any, ...], list[RankState]] = {}
    for s in states:
        by_sig.setdefault((s.rank in blamed, *s.signature), []).append(s)
    groups = [RankGroup(tuple(s.rank for s in members), members[0].phrase(),
                        culprit=members[0].rank in blamed,
                        # a host only when every member's is known: "ranks 0-2 [node-b]" must
                        # not stand for ranks of which only one was named on node-b
                        hosts=tuple(sorted({s.host for s in members if s.host}))
                        if all(s.host for s in members) else ())
              for members in by_sig.values()]
    groups.sort(key=lambda g: (not g.culprit, STATES.index(_state(states, g.ranks[0])),
                               -len(g.ranks), g.ranks[0]))
    return RankTable(tuple(states), tuple(groups), culprit, agreement)


def with_trace(table: RankTable | None, trace: TraceAnalysis,
               redact: Callable[[str], str] = str) -> RankTable | None:
    """The table with what the ranks' Flight Recorder dumps say, and their culprit when they name
    one: sequence ids recorded by every rank outrank what the log lines let us infer.

    A rank only the dumps show gets a row of its own (state ``waiting`` in the collective it was
    last recorded in, or ``running`` when it never entered the one the others wait in)."""
    lead = trace.lead
    rows = {s.rank: s for s in (table.ranks if table is not None else ())}
    for rank in trace.ranks:
        said = redact(_trace_phrase(rank, trace))
        old = rows.get(rank)
        if old is not None:
            rows[rank] = replace(old, trace=said)
            continue
        last = trace.last.get(rank)
        blamed = lead is not None and rank in lead.culprits and lead.kind == "missing-rank"
        entry = lead.entries.get(rank) if lead is not None else None
        shown = entry or last
        rows[rank] = RankState(
            rank=rank, state="running" if blamed or shown is None else "waiting",
            collective=None if blamed or shown is None else shown.op,
            seq=None if blamed or shown is None else shown.seq, trace=said,
            call_site=None)
    states = [rows[r] for r in sorted(rows)]
    if len(states) < 2:
        return None
    if lead is not None and lead.culprits:
        first = lead.entries.get(lead.culprits[0])
        frame = None
        if first is not None and first.frames:
            frame = call_site(first.frames)[0]
        kind = "trace-missing" if lead.kind == "missing-rank" else "trace-mismatch"
        culprit: Culprit | None = Culprit(lead.culprits, kind, redact(lead.sentence), lead.others,
                                          frame)
        agreement = "culprit"
    elif table is not None and table.culprit is not None:
        culprit, agreement = table.culprit, table.agreement
    else:
        culprit = None
        agreement = "unknown" if lead is not None else (
            table.agreement if table is not None else "same-collective")
    return _table(states, culprit, agreement)


def _trace_phrase(rank: int, trace: TraceAnalysis) -> str:
    """``last recorded collective 4 of pg 0 (default_pg): broadcast [[4]] Float``, or the
    rank's part in the first mismatch."""
    lead = trace.lead
    if lead is not None:
        if rank in lead.entries:
            e = lead.entries[rank]
            return f"in collective {e.seq} of pg {e.pg_name}: {e.describe()}"
        if lead.kind == "missing-rank" and rank in lead.culprits:
            last = lead.last_of.get(rank)
            tail = f" (last: {last.seq}, {last.describe()})" if last is not None else ""
            return f"never entered collective {lead.seq} of pg {lead.pg_name}{tail}"
    last = trace.last.get(rank)
    if last is None:
        return "no collective recorded"
    return f"last collective {last.seq} of pg {last.pg_name}: {last.describe()}"


def _told(states: list[RankState]) -> list[RankState]:
    """The rows worth a line. A rank the launcher spawned that printed nothing of its own says
    something only beside a rank that failed or waits, in the same log (its output went there)
    or on a multi-node job's other node; in a healthy run, or a log of another run of the job
    (a resume's), its silence is no news."""
    trouble = {s.last_line.file for s in states
               if s.state in ("failed", "timed-out", "waiting") and s.last_line is not None}
    return [s for s in states if s.state != "silent" or (
        trouble and (s.host is not None or (s.launched is not None
                                            and s.launched.file in trouble)))]


def _state(states: list[RankState], rank: int) -> str:
    return next(s.state for s in states if s.rank == rank)


__all__ = ["STOPPED", "Culprit", "RankGroup", "RankState", "RankTable", "build", "call_site", "rank_ranges",
           "state_of", "with_trace"]
