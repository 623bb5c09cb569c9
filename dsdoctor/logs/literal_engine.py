"""The pure-Python prefilter engine: rare-byte anchors in one regex pass, then exact confirmation.

For platforms without a Hyperscan wheel. Searching each prefilter's required literal with
``bytes.find`` costs one pass over the chunk per literal (about 160 passes). Instead:

1. Each prefilter gets a set of literals one of which every match contains; branches and small
   character classes are expanded (``NCCL ([Ee]rror|failure)`` gives ``NCCL Error``, ``NCCL
   error``, ``NCCL failure``, not just ``NCCL ``), so few lines are candidates.
2. Each literal is anchored at one of its bytes, chosen so that the set of anchor bytes is rare
   in this log (a greedy weighted set cover over byte frequencies measured on the first chunk the
   engine sees). All anchors go into one regex, factored as a trie: ``re`` skips the bytes that
   cannot start an anchor in C, so one pass finds every anchor (a ``bytes.find`` pass costs about
   as much as the whole regex pass). A literal made only of very common bytes is searched with
   ``bytes.find`` on its own.
3. On each anchor hit, the hit's line is checked for the full literals behind that anchor, and
   the prefilter regexes of their patterns confirm the line. Which lines are candidates changes
   with the anchors chosen; what is confirmed never does, so the result is the Hyperscan engine's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dsdoctor.logs.formats import Pattern, required_literals

try:  # Python 3.11+
    from re import _constants as _sre_const  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MAX_EXPANSION = 32  # alternatives one literal set may grow to (branches x character classes)
MIN_LITERAL = 3
SAMPLE_BYTES = 256 << 10  # frequencies are measured on this much of the first chunk
# A byte more frequent than this in the sample (a space, "0") costs the anchor regex more than a
# bytes.find pass over the chunk costs: a literal made only of such bytes is searched with find.
FIND_FRACTION = 0.08
# What an anchor byte occurring in every byte of the chunk would cost the regex pass, in
# bytes.find passes (measured: about 1.4 passes per 1% of the bytes, CPython 3.11, x86_64).
BYTE_COST = 140.0


def _full(items: Any) -> list[bytes] | None:
    """Every string a parsed sequence can match, when it is a small finite set; else None."""
    out = [b""]
    for op, av in items:
        if op is _sre_const.LITERAL:
            if av > 255:
                return None
            alts = [bytes((av,))]
        elif op is _sre_const.IN:
            chars = [v for o, v in av if o is _sre_const.LITERAL]
            if len(chars) != len(av) or not chars or max(chars) > 255:
                return None
            alts = [bytes((c,)) for c in chars]
        elif op is _sre_const.SUBPATTERN:
            got = _full(av[-1])
            if got is None:
                return None
            alts = got
        elif op is _sre_const.BRANCH:
            alts = []
            for branch in av[1]:
                got = _full(branch)
                if got is None:
                    return None
                alts.extend(got)
        elif op in (_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT) and av[0] == 0 and av[1] == 1:
            got = _full(av[2])
            if got is None:
                return None
            alts = [b""] + got
        else:
            return None
        out = [s + a for s in out for a in alts]
        if len(out) > MAX_EXPANSION:
            return None
    return out


def _best(items: Any) -> list[bytes] | None:
    """A set of literals one of which occurs in every match of the parsed sequence: the longest
    run of expandable items (scored by its shortest alternative), or the best inside a group."""
    best: list[bytes] | None = None

    def consider(opt: list[bytes] | None) -> None:
        nonlocal best
        if not opt or any(len(x) < MIN_LITERAL for x in opt):
            return
        if best is None or (min(map(len, opt)), -len(opt)) > (min(map(len, best)), -len(best)):
            best = opt

    run: list[bytes] = [b""]
    for item in items:
        got = _full([item])
        if got is not None and len(run) * len(got) <= MAX_EXPANSION:
            run = [s + g for s in run for g in got]
            continue
        consider(run)
        run = [b""]
        op, av = item
        if got is not None:  # expandable but too many: start a new run with it
            run = got if len(got) <= MAX_EXPANSION else [b""]
        elif op is _sre_const.SUBPATTERN:
            consider(_best(av[-1]))
        elif op is _sre_const.BRANCH:
            opts: list[bytes] = []
            for branch in av[1]:
                alt = _best(branch)
                if not alt:
                    opts = []
                    break
                opts.extend(alt)
            consider(opts or None)
        elif op in (_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT) and av[0] >= 1:
            consider(_best(av[2]))
    consider(run)
    return best


def expanded_literals(prefilter: str, caseless: bool) -> tuple[bytes, ...] | None:
    """Literals (lower-cased when caseless) at least one of which every match contains, with
    branches and small classes expanded; falls back to :func:`required_literals`."""
    try:
        parsed = _sre_parse.parse(prefilter.encode("utf-8").decode("latin-1"))
        lits = _best(list(parsed))
    except Exception:  # noqa: BLE001 - any parse trouble: the plain extractor decides
        lits = None
    if not lits:
        return required_literals(prefilter, caseless)
    if caseless:
        lits = [x.lower() for x in lits]
    return tuple(dict.fromkeys(lits))


def _trie(words: list[bytes]) -> bytes:
    """One regex matching any of ``words`` (none a prefix of another), factored by prefix."""
    groups: dict[bytes, list[bytes]] = {}
    for w in words:
        groups.setdefault(w[:1], []).append(w[1:])
    alts = []
    for head, tails in sorted(groups.items()):
        tails = [t for t in tails if t]
        alts.append(re.escape(head) + (_trie(tails) if tails else b""))
    return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"


def _minimal(table: dict[bytes, set[int]]) -> dict[bytes, set[int]]:
    """Literals with no shorter literal inside them; a longer one's patterns move to a shorter
    one it contains (every occurrence of the longer is one of the shorter)."""
    keys = sorted(table, key=len)
    out: dict[bytes, set[int]] = {}
    for lit in keys:
        inner = next((k for k in out if k in lit), None)
        if inner is None:
            out[lit] = set(table[lit])
        else:
            out[inner] |= table[lit]
    return out


class _Plan:
    """How one haystack case (exact or lower-cased) is searched: anchors in one regex, and
    ``bytes.find`` for a literal made only of very common bytes."""

    def __init__(self, table: dict[bytes, set[int]], sample: bytes):
        lits = _minimal(table)
        counted = {b: sample.count(b) for b in set(b"".join(lits))}
        common = len(sample) * FIND_FRACTION
        # where an anchor may start: MIN_LITERAL bytes before the end (a short tail such as
        # the "F" of "INF" matches everywhere), not at a byte too common to skip
        spots = {lit: {lit[j] for j in range(max(1, len(lit) - MIN_LITERAL + 1))
                       if counted[lit[j]] <= common} for lit in lits}
        # the anchor bytes: a greedy set cover that weighs what each byte costs the regex pass
        # (re tries the trie at every occurrence of an anchor's first byte) against the
        # bytes.find passes it saves, so the first-byte set stays rare in this log
        chosen: set[int] = set()
        todo = {lit for lit, bs in spots.items() if bs}
        per_byte = BYTE_COST / max(1, len(sample))
        while todo:
            gain: dict[int, int] = {}
            for lit in todo:
                for b in spots[lit]:
                    gain[b] = gain.get(b, 0) + 1
            best = max(gain, key=lambda b: (gain[b] - counted[b] * per_byte, -b))
            if gain[best] - counted[best] * per_byte <= 0:
                break  # the rest are cheaper as finds
            chosen.add(best)
            todo = {lit for lit in todo if best not in spots[lit]}
        self.anchors: dict[bytes, list[tuple[bytes, tuple[int, ...]]]] = {}
        self.finds: list[tuple[bytes, tuple[int, ...]]] = []
        for lit, idxs in lits.items():
            entry = (lit, tuple(sorted(idxs)))
            starts = [j for j in range(max(1, len(lit) - MIN_LITERAL + 1)) if lit[j] in chosen]
            if not starts:
                self.finds.append(entry)
                continue
            j = min(starts, key=lambda j: (counted[lit[j]], j))
            self.anchors.setdefault(lit[j:], []).append(entry)
        # anchors must not overlap as prefixes: the regex reports one anchor per start offset
        for a in sorted(self.anchors, key=len, reverse=True):
            shorter = next((b for b in self.anchors if b != a and a.startswith(b)), None)
            if shorter is not None:
                self.anchors[shorter].extend(self.anchors.pop(a))
        self.regex = re.compile(_trie(list(self.anchors))) if self.anchors else None


class PythonEngine:
    """Anchor regex + literal finds + per-line regex confirmation. Pure Python, identical
    results to the Hyperscan engine."""

    name = "python"

    def __init__(self, patterns: Sequence[Pattern]):
        self.patterns = list(patterns)
        self._regexes = [
            re.compile(p.prefilter.encode("utf-8"), re.IGNORECASE if p.caseless else 0)
            for p in self.patterns
        ]
        self._exact: dict[bytes, set[int]] = {}
        self._folded: dict[bytes, set[int]] = {}
        self._no_literal: list[int] = []
        for i, p in enumerate(self.patterns):
            lits = expanded_literals(p.prefilter, p.caseless)
            if not lits:
                self._no_literal.append(i)
                continue
            table = self._folded if p.caseless else self._exact
            for lit in lits:
                table.setdefault(lit, set()).add(i)
        self._plans: tuple[_Plan | None, _Plan | None] | None = None

    def _plan(self, data, limit: int, folded: bytes) -> tuple[_Plan | None, _Plan | None]:
        if self._plans is None:  # measured once, on the first chunk this engine sees
            sample = bytes(memoryview(data)[:min(limit, SAMPLE_BYTES)])
            self._plans = (_Plan(self._exact, sample) if self._exact else None,
                           _Plan(self._folded, folded[:SAMPLE_BYTES]) if self._folded else None)
        return self._plans

    def candidates(self, data, limit: int) -> list[tuple[int, int]]:
        """(offset inside a match, pattern index) pairs in ``data[:limit]``, sorted by offset."""
        out: list[tuple[int, int]] = []
        if not limit:
            return out
        # one lower-cased copy (bytes.lower keeps every offset); searches stop at limit
        folded = bytes(data).lower() if self._folded and isinstance(data, memoryview) \
            else data.lower() if self._folded else b""
        done: set[tuple[int, int]] = set()  # (line start, pattern) already confirmed
        for plan, hay in zip(self._plan(data, limit, folded), (data, folded)):
            if plan is None:
                continue
            if plan.regex is not None:
                search = plan.regex.search
                m = search(hay, 0, limit)
                while m is not None:
                    pos = m.start()
                    self._line(data, hay, pos, limit, plan.anchors[m.group()], done, out)
                    m = search(hay, pos + 1, limit)  # anchors may overlap
            for lit, idxs in plan.finds:
                find = hay.find
                pos = find(lit, 0, limit)
                while pos != -1:
                    end = self._line(data, hay, pos, limit, ((lit, idxs),), done, out)
                    pos = find(lit, end, limit)
        for i in self._no_literal:
            for m in self._regexes[i].finditer(data, 0, limit):
                out.append((m.end() - 1 if m.end() > m.start() else m.start(), i))
        out.sort()
        return out

    def _line(self, data, hay, pos: int, limit: int, entries, done: set, out: list) -> int:
        """Confirm the line holding ``pos`` for the patterns of the literals it contains; return
        the line's end."""
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos, limit)
        if end == -1:
            end = limit
        for lit, idxs in entries:
            if hay.find(lit, start, end) == -1:
                continue
            for i in idxs:
                if (start, i) in done:
                    continue
                done.add((start, i))
                for m in self._regexes[i].finditer(data, start, end):
                    out.append((m.end() - 1 if m.end() > m.start() else m.start(), i))
        return end
