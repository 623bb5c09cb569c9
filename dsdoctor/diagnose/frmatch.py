"""Collectives matched across ranks' Flight Recorder dumps: the first one that does not match.

The rules are torch's ``fr_trace`` (torch/distributed/flight_recorder/components/builder.py
``build_collectives``, utils.py ``check_current_entry_match`` / ``error_analysis``, types.py
``Op.match``), read in torch 2.13.0:

* the ranks' buffers are first cut to a common start: entries before the largest first
  ``record_id`` are dropped (utils.py ``align_trace_from_beginning``);
* a collective is identified by its process group (name, description, members) and its
  ``collective_seq_id``; ranks are compared only within a group;
* a member that has a dump but no entry with that sequence id never joined it ("Not all ranks
  joining collective"); a member with no dump makes the collective undecidable;
* entries with one sequence id must agree on the op (COLLECTIVE_TYPE_MISMATCH), the input and
  output sizes (SIZE_OR_SYNTAX_MISMATCH, with all_to_all/scatter/gather exceptions; an
  all_reduce's output equals its input), the dtypes (COLLECTIVE_DTYPE_MISMATCH) and the state
  (COLLECTIVE_STATE_MISMATCH);
* after the first mismatch in a group, later collectives of that group are not paired.

Where torch names "the other rank" as the culprit (its own TODO says the first rank may be the
one at fault), the culprit here is the minority: the ranks that did not join, or those whose entry
differs from what most members entered. Two ranks that disagree are a tie that the dump breaks
only with stack frames: the rank whose call site made no earlier collective of that group left
the common path (the ``all_reduce`` under ``if rank == 0``).

Coalesced collectives (utils.py ``find_coalesced_group_with_non_p2p``): the entries of one rank
that share a process group and a ``collective_seq_id`` are one collective (the ops inside a
``_coalescing_manager``, ended by a ``*_coalesced``/``coalesced`` entry); the ranks must agree
op by op, as torch checks each collective inside a coalesced one.

Point-to-point ops (utils.py ``match_coalesced_groups``, types.py ``Op.match``): a send is
paired with a recv by its peers, not by a sequence id: ``send s->d`` (group ranks, made global
through the group's sorted members) matches a ``recv d<-s`` whose output sizes equal the send's
input sizes; sends to one peer and recvs from one peer keep their order (torch's Rule 3), so the
i-th send from s to d pairs with the i-th recv on d from s. A send without its recv names the
receiver as the rank that never entered it (and a recv without its send, the sender); a size
difference is a mismatch whose side the dump does not decide.

gloo in torch 2.13.0 records neither: its send/recv and its coalesced ops leave no entry (a
coalesced all_reduce is one ``all_reduce`` entry with several input sizes), so only NCCL-like
dumps carry them.
gloo records its default group's ``pg_config`` under the name "" while its entries name the
group "0" (torch 2.13's own fr_trace stops there with KeyError); a group that a dump's pg_config
does not name takes the members of that dump's only group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dsdoctor.logs.frdump import FRDump, FREntry
from dsdoctor.logs.rankfacts import Frame

#: torch's types.py ``P2P``: the point-to-point ops, paired by their peers.
P2P = frozenset({"send", "recv"})

#: torch's Op.match exceptions: ops whose input (output) sizes may differ across ranks.
_INPUTS_MAY_DIFFER = frozenset({"all_to_all", "scatter"})
_OUTPUTS_MAY_DIFFER = frozenset({"all_to_all", "gather"})
#: ops whose input dtypes may differ from their output dtypes / from other ranks'.
_NO_DTYPE_CHECK = frozenset({"scatter", "gather", "broadcast"})


@dataclass(frozen=True)
class Mismatch:
    """The first collective of one process group that the ranks did not agree on."""

    pg: str  # "0 (default_pg)"
    pg_name: str  # "0"
    seq: int
    kind: str  # missing-rank | type | size | dtype | state | undecidable
    culprits: tuple[int, ...]  # empty when the dumps cannot tell (a tie without frames)
    others: tuple[int, ...]  # the members that entered it as most did
    entries: Mapping[int, FREntry]  # by rank, the ranks that entered it
    detail: str  # torch's words: "Expected input sizes ... does not match ..."
    sentence: str
    decided_by: str = ""  # missing | majority | call-site | ""
    last_of: Mapping[int, FREntry | None] = field(default_factory=dict)  # culprits' last entry
    p2p: str = ""  # a send/recv mismatch: "rank 0 sent 2 to rank 1, rank 1 received 1"; "" else


@dataclass(frozen=True)
class TraceAnalysis:
    """What the dumps say, rank by rank, and the first mismatch of each process group."""

    dumps: tuple[FRDump, ...]
    matched: int  # collectives every member entered alike
    mismatches: tuple[Mismatch, ...]
    last: Mapping[int, FREntry | None]  # each rank's last recorded collective
    notes: tuple[str, ...] = ()

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(d.rank for d in self.dumps)

    @property
    def lead(self) -> Mismatch | None:
        """The mismatch to lead with: one that names a culprit, the earliest recorded first."""
        crossed = [m for m in self.mismatches if m.kind == "desync"]
        if crossed:
            return crossed[0]
        named = [m for m in self.mismatches if m.culprits] or list(self.mismatches)
        if not named:
            return None
        return min(named, key=lambda m: min((e.time_created_ns or 0 for e in m.entries.values()),
                                            default=0))

    def sentence(self) -> str:
        lead = self.lead
        if lead is not None:
            return lead.sentence
        last = {e.seq for e in self.last.values() if e is not None}
        tail = f" (the last, {max(last)}, entered by all)" if len(last) == 1 else ""
        return (f"Flight Recorder dumps of {len(self.dumps)} ranks: all {self.matched} recorded "
                f"collectives matched{tail}; the dumps show no desync")


def _label(e: FREntry) -> str:
    return f"{e.pg_name} ({e.pg_desc})" if e.pg_desc and e.pg_desc != "undefined" else e.pg_name


def _ranks(rs: Sequence[int]) -> str:
    from dsdoctor.diagnose.ranks import rank_ranges  # noqa: PLC0415 - ranks imports this module

    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rank_ranges(rs)}"


def _site(e: FREntry) -> Frame | None:
    from dsdoctor.diagnose.ranks import call_site  # noqa: PLC0415

    return call_site(e.frames)[0] if e.frames else None


def _at(e: FREntry) -> str:
    s = _site(e)
    return f" at {s.short}" if s else ""


def compare(a: FREntry, b: FREntry, pg_size: int) -> tuple[str, str] | None:
    """torch's ``Op.match`` for two collectives: (kind, detail), or None when they match."""
    if a.op != b.op:
        return "type", f"Expected collective type: '{a.op}' does not match found: '{b.op}'"
    if a.op not in _INPUTS_MAY_DIFFER and a.input_sizes != b.input_sizes:
        return "size", (f"Expected input sizes: '{_l(a.input_sizes)}' does not match found: "
                        f"'{_l(b.input_sizes)}'")
    if a.op not in _OUTPUTS_MAY_DIFFER and a.output_sizes != b.output_sizes:
        return "size", (f"Expected output sizes: '{_l(a.output_sizes)}' does not match found: "
                        f"'{_l(b.output_sizes)}'")
    if a.op in ("all_reduce", "allreduce_coalesced") and a.input_sizes != b.output_sizes:
        return "size", (f"Expected input sizes: '{_l(a.input_sizes)}' does not match found "
                        f"output sizes: '{_l(b.output_sizes)}'")
    if a.op in ("all_gather", "all_gather_base", "all_gather_into_tensor_coalesced") and \
            a.input_sizes and b.output_sizes and \
            math.prod(b.output_sizes[0]) != math.prod(a.input_sizes[0]) * pg_size:
        return "size", "output numel is not input numel x group size"
    if a.op in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced") and \
            a.output_sizes and b.input_sizes and \
            math.prod(b.input_sizes[0]) != math.prod(a.output_sizes[0]) * pg_size:
        return "size", "input numel is not output numel x group size"
    if _dtypes_differ(a, b):
        return "dtype", (f"Expected dtypes: '{sorted(set(a.input_dtypes))}' does not match found: "
                         f"'{sorted(set(b.input_dtypes))}/{sorted(set(b.output_dtypes))}'")
    if a.state != b.state:
        return "state", f"Expected state: '{a.state}' does not match found state: '{b.state}'"
    return None


def _l(sizes: tuple[tuple[int, ...], ...]) -> str:
    return str([list(s) for s in sizes])


def _dtypes_differ(a: FREntry, b: FREntry) -> bool:
    """types.py ``Op.dtype_mismatch``."""
    ai, ao = a.input_sizes[0] if a.input_sizes else (), a.output_sizes[0] if a.output_sizes else ()
    bi, bo = b.input_sizes[0] if b.input_sizes else (), b.output_sizes[0] if b.output_sizes else ()
    return bool(
        (a.op not in _NO_DTYPE_CHECK and set(a.input_dtypes) != set(a.output_dtypes) and ai and ao)
        or (a.op not in ("scatter", "broadcast") and set(a.input_dtypes) != set(b.input_dtypes)
            and ai and bi)
        or (a.op != "gather" and set(a.output_dtypes) != set(b.output_dtypes) and ao and bo))


def _align(dumps: Sequence[FRDump]) -> dict[int, list[FREntry]]:
    """utils.py ``align_trace_from_beginning``: drop what not every rank's buffer still holds."""
    start = max((d.entries[0].record_id for d in dumps if d.entries), default=0)
    return {d.rank: [e for e in d.entries if e.record_id >= start] for d in dumps}


def _members(dump: FRDump, e: FREntry, seen: Mapping[str, set[int]],
             world: tuple[int, ...]) -> tuple[int, ...]:
    g = dump.groups.get(e.pg_name)
    if g is not None and g.ranks:
        return g.ranks
    if g is None and len(dump.groups) == 1:  # gloo: pg_config under "" while entries say "0"
        only = next(iter(dump.groups.values())).ranks
        if only:
            return only
    # no members recorded (gloo under DeepSpeed writes ranks "[]"): the default group is the
    # world; another group, the ranks whose dumps used it
    if e.pg_desc == "default_pg":
        return world
    return tuple(sorted(seen.get(e.pg_name, set())))


def analyze(dumps: Sequence[FRDump]) -> TraceAnalysis:
    """Match every process group's collectives across the ranks' dumps."""
    entries = _align(dumps)
    by_rank = {d.rank: d for d in dumps}
    seen: dict[str, set[int]] = {}
    for r, es in entries.items():
        for e in es:
            seen.setdefault(e.pg_name, set()).add(r)
    # (pg name, desc, members) -> rank -> seq -> the collective's entries (several: coalesced)
    groups: dict[tuple[str, str, tuple[int, ...]], dict[int, dict[int, tuple[FREntry, ...]]]] = {}
    # (pg name, desc, members) -> rank -> its send/recv entries in record order
    p2p: dict[tuple[str, str, tuple[int, ...]], dict[int, list[FREntry]]] = {}
    world = tuple(sorted(by_rank))
    for r, es in entries.items():
        for e in es:
            key = (e.pg_name, e.pg_desc, _members(by_rank[r], e, seen, world))
            if e.is_p2p or e.op in P2P:
                if e.op in P2P:  # a coalesced p2p group's end marker pairs nothing
                    p2p.setdefault(key, {}).setdefault(r, []).append(e)
                continue
            ops = groups.setdefault(key, {}).setdefault(r, {})
            ops[e.seq] = (*ops.get(e.seq, ()), e)
    notes: list[str] = []
    matched = 0
    mismatches = []
    for (_name, _desc, members), per_rank in groups.items():
        n, m = _match_group(members, per_rank, by_rank, entries, notes)
        matched += n
        if m is not None:
            mismatches.append(m)
    pairs = 0
    for (_name, _desc, members), sent in p2p.items():
        n, m = _match_p2p(members, sent, by_rank)
        pairs += n
        if m is not None:
            mismatches.append(m)
    if pairs:
        notes.append(f"{pairs} point-to-point send/recv pair(s) in the dumps matched")
    last = {r: (es[-1] if es else None) for r, es in entries.items()}
    crossed = _crossed_p2p(mismatches) or _crossed(mismatches, entries)
    if crossed is not None:
        mismatches.insert(0, crossed)
    return TraceAnalysis(tuple(dumps), matched, tuple(mismatches), last, tuple(notes))


def _match_group(members: tuple[int, ...], per_rank: dict[int, dict[int, tuple[FREntry, ...]]],
                 by_rank: Mapping[int, FRDump], entries: Mapping[int, list[FREntry]],
                 notes: list[str]) -> tuple[int, Mismatch | None]:
    with_dump = [r for r in members if r in by_rank]
    no_dump = [r for r in members if r not in by_rank]
    any_entry = next(es[0] for ops in per_rank.values() for es in ops.values())
    label = _label(any_entry)
    if no_dump:
        notes.append(f"process group {label}: no dump from {_ranks(no_dump)}, so its "
                     "collectives are matched among the other members only")
    # a rank's buffer may have lost its oldest entries: compare from the latest first seq
    firsts = [min(per_rank[r]) for r in with_dump if per_rank.get(r)]
    start = max(firsts, default=0)
    seqs = sorted({s for r in with_dump for s in per_rank.get(r, {}) if s >= start})
    sites: dict[int, set[Frame]] = {r: set() for r in with_dump}
    matched = 0
    firsts_of = {r: {s: es[0] for s, es in per_rank.get(r, {}).items()} for r in with_dump}
    for seq in seqs:
        present_ops = {r: per_rank[r][seq] for r in with_dump if seq in per_rank.get(r, {})}
        present = {r: ops[0] for r, ops in present_ops.items()}
        missing = tuple(r for r in with_dump if r not in present)
        if missing:
            return matched, _missing(label, seq, present, missing, firsts_of)
        m = _disagreement(label, seq, present_ops, len(members), sites)
        if m is not None:
            return matched, m
        matched += 1
        for r, e in present.items():
            s = _site(e)
            if s is not None:
                sites[r].add(s)
    return matched, None


def _peers(e: FREntry, members: tuple[int, ...]) -> tuple[int, int] | None:
    """(global source, global destination) of a send ``s->d`` or recv ``d<-s`` (group ranks,
    made global through the group's sorted members as types.py ``_init_global_src_dst``)."""
    sep = "->" if e.op == "send" else "<-"
    left, _, right = e.peer.partition(sep)
    if not (left.strip().isdigit() and right.strip().isdigit()):
        return None
    a, b = int(left), int(right)
    src, dst = (a, b) if e.op == "send" else (b, a)
    ranks = sorted(members)
    if ranks and max(src, dst) < len(ranks):
        return ranks[src], ranks[dst]
    return src, dst


def _match_p2p(members: tuple[int, ...], ops: dict[int, list[FREntry]],
               by_rank: Mapping[int, FRDump]) -> tuple[int, Mismatch | None]:
    """Pair each send with its recv (utils.py ``match_coalesced_groups``, types.py
    ``Op.match``): the i-th send from s to d with the i-th recv on d from s, input sizes equal
    to output sizes. Returns (pairs matched, the earliest mismatch)."""
    sends: dict[tuple[int, int], list[FREntry]] = {}
    recvs: dict[tuple[int, int], list[FREntry]] = {}
    for r, es in ops.items():
        for e in es:
            pair = _peers(e, members)
            if pair is None:
                continue
            # a rank's own side of the pair only (torch asserts a send's source is its rank)
            if e.op == "send" and pair[0] == r:
                sends.setdefault(pair, []).append(e)
            elif e.op == "recv" and pair[1] == r:
                recvs.setdefault(pair, []).append(e)
    any_entry = next(e for es in ops.values() for e in es)
    label = _label(any_entry)
    matched = 0
    found: list[Mismatch] = []
    for pair in sorted(set(sends) | set(recvs)):
        src, dst = pair
        ss, rs = sends.get(pair, []), recvs.get(pair, [])
        for i in range(max(len(ss), len(rs))):
            send = ss[i] if i < len(ss) else None
            recv = rs[i] if i < len(rs) else None
            if send is not None and recv is not None:
                if send.input_sizes == recv.output_sizes:
                    matched += 1
                    continue
                detail = (f"Expected input sizes: '{_l(send.input_sizes)}' of the send does not "
                          f"match the recv's output sizes: '{_l(recv.output_sizes)}'")
                sentence = (f"rank {src}'s {send.describe()}{_at(send)} and rank {dst}'s "
                            f"{recv.describe()}{_at(recv)} disagree on the size (a size mismatch "
                            f"of point-to-point #{i + 1} from rank {src} to rank {dst} in process "
                            f"group {label}, Flight Recorder); the dumps alone do not tell which "
                            "side is wrong")
                found.append(Mismatch(label, send.pg_name, send.seq, "size", (), (src, dst),
                                      {src: send, dst: recv}, detail, sentence))
                break
            waiter, posted = (src, send) if send is not None else (dst, recv)
            absent = dst if send is not None else src
            if posted is None or absent not in by_rank:
                break  # no dump from the peer: nothing to say it never posted its side
            verb = "posted the recv" if send is not None else "sent"
            peer_ops = ops.get(absent, [])
            last = peer_ops[-1] if peer_ops else None
            before = (f"; its last point-to-point op there is {last.describe()}{_at(last)}"
                      if last is not None else "; it recorded no point-to-point op in that group")
            sentence = (f"rank {absent} never {verb} that rank {waiter}'s {posted.describe()}"
                        f"{_at(posted)} "
                        f"waits for (point-to-point #{i + 1} from rank {src} to rank {dst} in "
                        f"process group {label}, Flight Recorder{before})")
            what = "a send without its recv" if send is not None else "a recv without its send"
            counts = f"rank {src} sent {len(ss)} to rank {dst}, rank {dst} received {len(rs)}"
            found.append(Mismatch(label, posted.pg_name, posted.seq, "missing-rank", (absent,),
                                  (waiter,), {waiter: posted}, f"Not all ranks joining: {what}",
                                  sentence[:-1] + f"; {counts})", "missing", {absent: last},
                                  p2p=counts))
            break
    if not found:
        return matched, None
    return matched, min(found, key=lambda m: min(
        (e.time_created_ns or 0 for e in m.entries.values()), default=0))


def _new_site(e: FREntry, before: Sequence[FREntry]) -> bool | None:
    """Whether ``e``'s call site made none of the rank's earlier collectives (None: no frames)."""
    site = _site(e)
    if site is None:
        return None
    earlier = {_site(b) for b in before if b.record_id < e.record_id}
    earlier.discard(None)
    return site not in earlier if earlier else None


def _crossed_p2p(mismatches: Sequence[Mismatch]) -> Mismatch | None:
    """A rank waiting in a send (or recv) its peer never posted, while that peer waits in a
    collective the first never entered: each side's "missing rank" is only the other's waiter.
    The dumps show the ranks' point-to-point ops disagree (counts), not which side is wrong."""
    for p in mismatches:
        if not p.p2p or p.kind != "missing-rank":
            continue
        (waiter,), (absent,) = p.others, p.culprits
        for c in mismatches:
            if c.p2p or c.kind != "missing-rank" or c.culprits != (waiter,) or \
                    absent not in c.others:
                continue
            e, u = p.entries[waiter], c.entries[absent]
            sentence = (f"rank {waiter} waits in {e.describe()}{_at(e)}, which rank {absent} "
                        f"never posted; rank {absent} waits instead in collective {c.seq} of "
                        f"process group {c.pg}, {u.describe()}{_at(u)}, which rank {waiter} never "
                        f"entered: the ranks' point-to-point ops disagree ({p.p2p}; a desync, "
                        "Flight Recorder)")
            return Mismatch(p.pg, p.pg_name, p.seq, "desync", (), (waiter, absent),
                            {waiter: e, absent: u}, "a send/recv count mismatch", sentence,
                            "", p2p=p.p2p)
    return None


def _crossed(mismatches: Sequence[Mismatch], entries: Mapping[int, list[FREntry]]
             ) -> Mismatch | None:
    """Two groups each waiting for a rank that waits in the other (rank 0 in group 0's
    collective 1, rank 1 in group 1's collective 44): each "missing rank" is only the other's
    waiter. The rank that left the common path is the one whose collective comes from a call
    site that made none of its earlier collectives."""
    missing = [m for m in mismatches if m.kind == "missing-rank"]
    for i, a in enumerate(missing):
        for b in missing[i + 1:]:
            if not (set(a.culprits) & set(b.others) and set(b.culprits) & set(a.others)):
                continue
            # a's waiters (a.others) entered a's collective; b's waiters entered b's
            new_a = {r: _new_site(a.entries[r], entries[r]) for r in a.others}
            new_b = {r: _new_site(b.entries[r], entries[r]) for r in b.others}
            if all(new_a.values()) and not any(v for v in new_b.values()) and \
                    all(v is False for v in new_b.values()):
                odd, usual = a, b
            elif all(new_b.values()) and all(v is False for v in new_a.values()):
                odd, usual = b, a
            else:
                continue
            left, stayed = odd.others, usual.others
            e, u = odd.entries[left[0]], usual.entries[stayed[0]]
            sentence = (f"{_ranks(left)} entered {e.describe()}{_at(e)} (a call site that made "
                        f"no earlier collective) as collective {odd.seq} of process group "
                        f"{odd.pg}, which {_ranks(stayed)} never entered; {_ranks(stayed)} "
                        f"{'waits' if len(stayed) == 1 else 'wait'} instead in collective "
                        f"{usual.seq} of process group {usual.pg}, {u.describe()}{_at(u)}, which "
                        f"{_ranks(left)} never entered (a desync across process groups, "
                        "Flight Recorder)")
            present = {**odd.entries, **usual.entries}
            return Mismatch(odd.pg, odd.pg_name, odd.seq, "desync", tuple(left), tuple(stayed),
                            present, "each side waits in a collective the other never entered",
                            sentence, "call-site")
    return None


def _missing(label: str, seq: int, present: dict[int, FREntry], missing: tuple[int, ...],
             per_rank: Mapping[int, Mapping[int, FREntry]]) -> Mismatch:
    e = next(iter(present.values()))
    last_of = {r: (per_rank[r][max(per_rank[r])] if per_rank.get(r) else None) for r in missing}
    lasts = sorted({le.seq for le in last_of.values() if le is not None})
    before = (f"; {'its' if len(missing) == 1 else 'their'} last collective in that group is "
              f"{', '.join(map(str, lasts))}" if lasts else
              "; it recorded no collective in that group")
    last_e = next((le for le in last_of.values() if le is not None), None)
    if last_e is not None and len(lasts) == 1:
        before += f" ({last_e.describe()}{_at(last_e)})"
    sentence = (f"{_ranks(missing)} never entered collective {seq} of process group {label}, "
                f"{e.describe()}{_at(e)}, which {_ranks(list(present))} "
                f"{'waits' if len(present) == 1 else 'wait'} in (Flight Recorder{before})")
    return Mismatch(label, e.pg_name, seq, "missing-rank", missing, tuple(present), present,
                    "Not all ranks joining collective", sentence, "missing", last_of)


def compare_ops(a: Sequence[FREntry], b: Sequence[FREntry], pg_size: int
                ) -> tuple[str, str, int] | None:
    """Two ranks' entries of one collective (several when coalesced), op by op: (kind, detail,
    the index of the first op that differs), or None when they match."""
    for i, (x, y) in enumerate(zip(a, b)):
        got = compare(x, y, pg_size)
        if got is not None:
            return (*got, i)
    if len(a) != len(b):
        return "type", (f"Expected a coalesced collective of {len(a)} op(s) "
                        f"({', '.join(e.op for e in a)}) does not match found: {len(b)} op(s) "
                        f"({', '.join(e.op for e in b)})"), min(len(a), len(b))
    return None


def _disagreement(label: str, seq: int, present_ops: dict[int, tuple[FREntry, ...]],
                  pg_size: int, sites: Mapping[int, set[Frame]]) -> Mismatch | None:
    # ranks grouped by what they entered: those that match each other form one group
    clusters: list[list[int]] = []
    for r in sorted(present_ops):
        for c in clusters:
            if compare_ops(present_ops[c[0]], present_ops[r], pg_size) is None:
                c.append(r)
                break
        else:
            clusters.append([r])
    if len(clusters) == 1:
        return None
    clusters.sort(key=len, reverse=True)
    got = compare_ops(present_ops[clusters[0][0]], present_ops[clusters[1][0]], pg_size)
    kind, detail, at = got or ("undecidable", "", 0)
    # the op that differs stands for each rank's collective (the first, when not coalesced)
    present = {r: ops[min(at, len(ops) - 1)] for r, ops in present_ops.items()}
    first = present[clusters[0][0]]
    what = {"type": "a type mismatch", "size": "a size mismatch", "dtype": "a dtype mismatch",
            "state": "a state mismatch"}.get(kind, "a mismatch")
    culprits: tuple[int, ...] = ()
    decided = ""
    if len(clusters[0]) > len(clusters[1]):
        culprits = tuple(sorted(r for c in clusters[1:] for r in c))
        decided = "majority"
    elif len(clusters) == 2:
        # a tie: the side whose call site made no earlier collective of this group left the path
        new = [c for c in clusters if all(
            (s := _site(present[r])) is not None and s not in sites.get(r, set())
            and sites.get(r) for r in c)]
        if len(new) == 1:
            culprits = tuple(new[0])
            decided = "call-site"
    others = tuple(sorted(r for r in present if r not in culprits))
    if culprits:
        c0 = present[culprits[0]]
        o0 = present[others[0]]
        why = (" (a call site that made no earlier collective of this group)"
               if decided == "call-site" else "")
        sentence = (f"{_ranks(culprits)} entered {c0.describe()}{_at(c0)}{why} as collective "
                    f"{seq} of process group {label}, where {_ranks(others)} entered "
                    f"{o0.describe()}{_at(o0)} ({what}, Flight Recorder)")
    else:
        sides = "; ".join(f"{_ranks(c)}: {present[c[0]].describe()}{_at(present[c[0]])}"
                          for c in clusters)
        sentence = (f"the ranks disagree on collective {seq} of process group {label} ({what}, "
                    f"Flight Recorder: {sides}); the dumps alone do not tell which side left "
                    "the common path")
    return Mismatch(label, first.pg_name, seq, kind, culprits, others, present, detail, sentence, decided)


__all__ = ["P2P", "Mismatch", "TraceAnalysis", "analyze", "compare", "compare_ops"]
