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

p2p ops (send/recv) are not matched (their peers pair them, not sequence ids); a note says so.
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
    # (pg name, desc, members) -> rank -> seq -> entry
    groups: dict[tuple[str, str, tuple[int, ...]], dict[int, dict[int, FREntry]]] = {}
    p2p = 0
    for r, es in entries.items():
        for e in es:
            if e.is_p2p or e.op in ("send", "recv"):
                p2p += 1
                continue
            key = (e.pg_name, e.pg_desc, _members(by_rank[r], e, seen, tuple(sorted(by_rank))))
            groups.setdefault(key, {}).setdefault(r, {}).setdefault(e.seq, e)
    notes = []
    if p2p:
        notes.append(f"{p2p} point-to-point op(s) in the dumps were not matched (only "
                     "collectives are)")
    matched = 0
    mismatches = []
    for (_name, _desc, members), per_rank in groups.items():
        n, m = _match_group(members, per_rank, by_rank, entries, notes)
        matched += n
        if m is not None:
            mismatches.append(m)
    last = {r: (es[-1] if es else None) for r, es in entries.items()}
    crossed = _crossed(mismatches, entries)
    if crossed is not None:
        mismatches.insert(0, crossed)
    return TraceAnalysis(tuple(dumps), matched, tuple(mismatches), last, tuple(notes))


def _match_group(members: tuple[int, ...], per_rank: dict[int, dict[int, FREntry]],
                 by_rank: Mapping[int, FRDump], entries: Mapping[int, list[FREntry]],
                 notes: list[str]) -> tuple[int, Mismatch | None]:
    with_dump = [r for r in members if r in by_rank]
    no_dump = [r for r in members if r not in by_rank]
    any_entry = next(e for es in per_rank.values() for e in es.values())
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
    for seq in seqs:
        present = {r: per_rank[r][seq] for r in with_dump if seq in per_rank.get(r, {})}
        missing = tuple(r for r in with_dump if r not in present)
        if missing:
            return matched, _missing(label, seq, present, missing, per_rank)
        m = _disagreement(label, seq, present, len(members), sites)
        if m is not None:
            return matched, m
        matched += 1
        for r, e in present.items():
            s = _site(e)
            if s is not None:
                sites[r].add(s)
    return matched, None


def _new_site(e: FREntry, before: Sequence[FREntry]) -> bool | None:
    """Whether ``e``'s call site made none of the rank's earlier collectives (None: no frames)."""
    site = _site(e)
    if site is None:
        return None
    earlier = {_site(b) for b in before if b.record_id < e.record_id}
    earlier.discard(None)
    return site not in earlier if earlier else None


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
             per_rank: dict[int, dict[int, FREntry]]) -> Mismatch:
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


def _disagreement(label: str, seq: int, present: dict[int, FREntry], pg_size: int,
                  sites: Mapping[int, set[Frame]]) -> Mismatch | None:
    # ranks grouped by what they entered: those that match each other form one group
    clusters: list[list[int]] = []
    for r in sorted(present):
        for c in clusters:
            if compare(present[c[0]], present[r], pg_size) is None:
                c.append(r)
                break
        else:
            clusters.append([r])
    if len(clusters) == 1:
        return None
    clusters.sort(key=len, reverse=True)
    first, second = present[clusters[0][0]], present[clusters[1][0]]
    kind, detail = compare(first, second, pg_size) or ("undecidable", "")
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


__all__ = ["Mismatch", "TraceAnalysis", "analyze", "compare"]
