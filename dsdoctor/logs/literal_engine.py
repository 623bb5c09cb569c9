"""The pure-Python prefilter engine: a few regex passes find every literal, then exact confirmation.

For platforms without a Hyperscan wheel. Searching each prefilter's required literal with
``bytes.find`` costs one pass over the chunk per literal (about 300 passes). Instead:

1. Each prefilter gets a set of literals one of which every match contains; branches and small
   character classes are expanded (``NCCL ([Ee]rror|failure)`` gives ``NCCL Error``, ``NCCL
   error``, ``NCCL failure``, not just ``NCCL ``), so few lines are candidates.
2. Each literal is anchored at one of its bytes, anywhere in it, chosen so that few bytes,
   rare in this log, anchor every literal (a greedy weighted set cover over byte frequencies
   measured on a sample of the log's first chunk, with measured costs). Each anchor byte gets one regex that
   starts with it, which sre searches in a tight C loop (a regex starting with a set of bytes
   costs several times more), and tries the literals anchored there only at its occurrences:
   the bytes after the anchor as a trie, the bytes before it as a lookbehind. A byte too rare to
   be worth a pass is found with ``bytes.find`` (memchr) and its regex matched there; an exact
   literal made only of common bytes gets a pass of its own. A caseless literal is anchored at
   a byte in both cases and matched with ``[xX]`` classes in the same passes (no lower-cased
   copy of the chunk, no second pass).
3. Each match is an occurrence of a whole literal; the prefilter regexes of its patterns confirm
   its line, unless the prefilter is a finite set of strings the literal is one of (then the
   occurrence is a match: 115 of 172 patterns need no regex). Which bytes anchor the literals
   changes with the log; what is confirmed never does, so the result is the Hyperscan engine's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsdoctor.logs.formats import Pattern

try:  # Python 3.11+
    from re import _constants as _sre_const  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MAX_EXPANSION = 32  # alternatives one literal set may grow to (branches x character classes)
MIN_LITERAL = 3
SAMPLE_BYTES = 256 << 10  # byte frequencies are measured on up to this much of the log
SAMPLE_SLICES = 16  # in this many slices spread over a chunk
# What the search costs, in nanoseconds per byte of the chunk or per occurrence (measured on a
# training log, CPython 3.11, x86_64; only their ratios matter). A regex that starts with a
# literal byte is searched by sre in a tight C loop (about 0.27 ns a byte, less than a
# bytes.find of a short literal), then tries the literals anchored there at each occurrence of
# that byte. A byte too rare for that is found with bytes.find (memchr) instead, then its
# literals are tried at each occurrence from Python. An exact literal whose bytes are all
# common gets a pass of its own. (One regex for all anchor bytes costs more: sre tests a set
# of first bytes at about 2 ns a byte and skips each branch alternative at each attempt.)
PASS_NS = 0.27  # per byte of the chunk: one regex pass that starts with a literal
ATTEMPT_NS = 35.0  # per occurrence of its first byte: trying the literals anchored there
MEMCHR_NS = 0.05  # per byte of the chunk: one memchr pass for a rare anchor byte
MEMCHR_HIT_NS = 600.0  # per occurrence of a rare anchor byte (a Python loop step, a regex match)
LOOKBEHIND_NS = 8.0  # per occurrence of an anchor byte, for each literal that ends there
# A rare anchor byte found this often in a chunk (four times the frequency above which a regex
# pass costs less) means the log changed from its first bytes: they are measured again.
RARE_HITS = 4 * (PASS_NS - MEMCHR_NS) / (MEMCHR_HIT_NS - ATTEMPT_NS)
RARE_MIN_HITS = 256


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
    branches and small classes expanded; None when there is none (the chunk is regex-scanned)."""
    try:
        parsed = _sre_parse.parse(prefilter.encode("utf-8").decode("latin-1"))
        lits = _best(list(parsed))
    except Exception:  # noqa: BLE001 - any parse trouble means "no literal": scan with the regex
        return None
    if not lits:
        return None
    if caseless:
        lits = [x.lower() for x in lits]
    return tuple(dict.fromkeys(lits))


def whole_language(prefilter: str, caseless: bool) -> frozenset[bytes] | None:
    """Every string the prefilter matches (lower-cased when caseless), when that is a small
    finite set with no anchor or lookaround (then an occurrence of one is a match); else None."""
    try:
        got = _full(list(_sre_parse.parse(prefilter.encode("utf-8").decode("latin-1"))))
    except Exception:  # noqa: BLE001 - any parse trouble: confirm with the regex
        return None
    if not got or b"" in got:
        return None
    return frozenset(x.lower() for x in got) if caseless else frozenset(got)


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


@dataclass(frozen=True)
class _Literal:
    """A literal one of whose occurrences every match of ``patterns`` contains (lower-cased
    and matched in any case when ``caseless``)."""

    text: bytes
    caseless: bool
    patterns: tuple[int, ...]  # confirmed on the literal's line by their prefilter regex
    whole: tuple[int, ...] = ()  # the literal is a whole match of these: no regex to run

    def cases(self, byte: int) -> frozenset[int]:
        """The bytes of a chunk that are this literal's byte ``byte``."""
        if self.caseless and 97 <= byte <= 122:
            return frozenset((byte, byte - 32))
        return frozenset((byte,))

    def at(self, data, pos: int, limit: int) -> bool:
        """Whether this literal occurs at ``pos`` of ``data[:limit]``."""
        if pos < 0:
            return False
        if not self.caseless:
            return data.startswith(self.text, pos, limit)
        end = pos + len(self.text)
        return end <= limit and data[pos:end].lower() == self.text

    def regex(self, text: bytes) -> bytes:
        """``text`` (a part of this literal) as a regex, caseless letters as classes (which
        sre's branches skip as fast as plain bytes, unlike an ``(?i:...)`` group)."""
        if not self.caseless:
            return re.escape(text)
        return b"".join(b"[" + bytes((c, c - 32)) + b"]" if 97 <= c <= 122
                        else re.escape(bytes((c,))) for c in text)


def _pass_ns(freq: float) -> float:
    return PASS_NS + freq * ATTEMPT_NS


def _memchr_ns(freq: float) -> float:
    return MEMCHR_NS + freq * MEMCHR_HIT_NS


def _cover(lits: list[_Literal], cost: dict[int, float]) -> set[int]:
    """The anchor bytes: a greedy weighted set cover, then redundant bytes dropped. ``cost`` is
    what searching for a byte costs (ns per byte of the chunk); an exact literal no chosen byte
    covers costs a pass of its own. The bytes with the least cost per literal they newly cover
    are added while that is cheaper than such a pass. A caseless literal's letter covers it
    only in both cases, and it has no find: one left over gets its cheapest byte."""
    by_need: dict[frozenset[int], set[int]] = {}  # bytes that together cover literals
    for k, lit in enumerate(lits):
        for b in set(lit.text):
            by_need.setdefault(lit.cases(b), set()).add(k)
    needs_with: dict[int, list[frozenset[int]]] = {}
    for need in by_need:
        for b in need:
            needs_with.setdefault(b, []).append(need)
    todo = set(range(len(lits)))
    chosen: set[int] = set()
    while todo:
        best: tuple[float, int, list[int]] | None = None
        best_covered: set[int] = set()
        for need in by_need:
            new = need - chosen
            if not new:
                continue  # its literals are covered already
            grown = chosen | new
            covered = {k for b in new for n in needs_with[b] if n <= grown
                       for k in by_need[n]} & todo
            if covered:
                key = (sum(cost[b] for b in new) / len(covered), -len(covered), sorted(need))
                if best is None or key < best:
                    best, best_covered = key, covered
        if best is None or best[0] >= PASS_NS:
            break  # the rest are cheaper searched on their own
        chosen.update(best[2])
        todo -= best_covered
    for k in sorted(todo):
        lit = lits[k]
        if lit.caseless and not any(lit.cases(b) <= chosen for b in lit.text):
            chosen |= min((lit.cases(b) for b in set(lit.text)),
                          key=lambda n: (sum(cost[b] for b in n - chosen), sorted(n)))
    # a byte chosen early may have become redundant: drop the costliest that are
    kept = [lit for lit in lits if any(lit.cases(b) <= chosen for b in lit.text)]
    for b in sorted(chosen, key=lambda b: (-cost[b], b)):
        rest = chosen - {b}
        if all(any(lit.cases(c) <= rest for c in lit.text) for lit in kept):
            chosen = rest
    return chosen


_Groups = dict[int, list[tuple[int, "_Literal"]]]


def _layout(lits: list[_Literal], sample: bytes) -> tuple[dict[int, float], _Groups,
                                                           list[_Literal]]:
    """Where each literal is anchored, for a log whose bytes are like ``sample``: (each byte's
    frequency, the literals anchored at each byte as (offset of the anchor in the literal,
    literal), the literals searched on their own)."""
    size = max(1, len(sample))
    wanted = set(b"".join(lit.text + lit.text.upper() for lit in lits))
    freq = {b: sample.count(bytes((b,))) / size for b in wanted}
    cost = {b: min(_pass_ns(f), _memchr_ns(f)) for b, f in freq.items()}
    chosen = _cover(lits, cost)
    # A literal anchored at its last byte ends in a lookbehind that sre evaluates at each
    # occurrence of that byte (about 8 ns, where a branch alternative starting with a byte is
    # skipped in 1 or 2): another of its bytes is chosen too when that costs less.
    for lit in lits:
        spots = [j for j, b in enumerate(lit.text) if lit.cases(b) <= chosen]
        if not spots or spots[0] != len(lit.text) - 1:
            continue
        last = sum(freq[b] for b in lit.cases(lit.text[-1])) * LOOKBEHIND_NS
        need = min((lit.cases(b) for b in set(lit.text[:-1])),
                   key=lambda n: (sum(cost[b] for b in n - chosen), sorted(n)), default=None)
        if need is not None and sum(cost[b] for b in need - chosen) < last:
            chosen |= need
    groups: _Groups = {}
    alone: list[_Literal] = []
    for lit in lits:
        spots = [j for j, b in enumerate(lit.text) if lit.cases(b) <= chosen]
        if not spots:
            alone.append(lit)
            continue
        j = min(spots, key=lambda j: (sum(freq[b] for b in lit.cases(lit.text[j])), j))
        for b in lit.cases(lit.text[j]):
            groups.setdefault(b, []).append((j, lit))
    return freq, groups, alone


class _Plan:
    """How a chunk is searched: a regex pass for each common anchor byte, a ``bytes.find``
    (memchr) loop for each rare one, and a pass of its own for an exact literal made only of
    common bytes.

    A literal is anchored at any one of its bytes: the regex matches the rest of the literal
    after that byte and checks the bytes before it with a lookbehind, so every match is an
    occurrence of a whole literal. A caseless literal's anchor is a byte in both cases and the
    rest matches in any case, so exact and caseless literals share the passes.
    """

    def __init__(self, groups: _Groups, alone: list[_Literal], rare: set[int]):
        self.key = _plan_key(groups, alone, rare)
        # a regex whose every match is an occurrence of one of its literals: searched for, or
        # matched at each occurrence of a rare first byte found by memchr
        self.passes: list[tuple[re.Pattern[bytes], _Anchored]] = []
        self.rare: list[tuple[bytes, re.Pattern[bytes], _Anchored]] = []
        for b, entries in sorted(groups.items()):
            ends: list[tuple[int, _Literal]] = []
            regex = re.compile(re.escape(bytes((b,))) + _after(entries, ends))
            if b in rare:
                self.rare.append((bytes((b,)), regex, _Anchored(ends)))
            else:
                self.passes.append((regex, _Anchored(ends)))
        self.passes += [(re.compile(re.escape(lit.text) + b"()"), _Anchored([(0, lit)]))
                        for lit in alone]


def _plan_key(groups: _Groups, alone: list[_Literal], rare: set[int]) -> tuple:
    """What a plan's regexes are compiled from: a new measure that gives the same needs no
    new compilation."""
    return (tuple((b, tuple((j, lit.text, lit.caseless) for j, lit in entries))
                  for b, entries in sorted(groups.items())),
            tuple((lit.text, lit.caseless) for lit in alone), tuple(sorted(rare)))


class _Anchored:
    """The literals one regex finds. Each alternative of the regex ends in an empty group that
    names its literal (sre reports one alternative: the first that matches, and it tries longer
    parts of literals first, exact ones before caseless ones)."""

    def __init__(self, ends: list[tuple[int, _Literal]]):
        # for each group, in order: its literal (whole where the regex matched), and the
        # others that may be there too, as (offset of the match in the literal, literal): an
        # exact literal whose part from the anchor on is a shorter prefix of this one's (two
        # with the same part end at the same byte: one would hold the other, and _minimal
        # kept only the shorter), and for an exact match any caseless literal along the same
        # bytes. A caseless match means no exact literal was there.
        self.found: list[tuple[tuple[int, _Literal], list[tuple[int, _Literal]]]] = []
        for j, lit in ends:
            part = lit.text[j:]
            maybe = []
            for j2, other in ends:
                other_part = other.text[j2:]
                if other.caseless == lit.caseless:
                    if len(other_part) < len(part) and part.startswith(other_part):
                        maybe.append((j2, other))
                elif other.caseless:
                    n = min(len(part), len(other_part))
                    if part[:n].lower() == other_part[:n]:
                        maybe.append((j2, other))
            self.found.append(((j, lit), maybe))

    def literals(self, m: re.Match[bytes], data, limit: int) -> list[tuple[int, _Literal]]:
        """The literals that occur where ``m`` (a match of the regex in ``data``) starts, as
        (offset of the match in the literal, literal)."""
        found, maybe = self.found[(m.lastindex or 1) - 1]
        if not maybe:
            return [found]
        pos = m.start()
        return [found] + [(j, other) for j, other in maybe if other.at(data, pos - j, limit)]


_Tails = dict[bytes, list[tuple[int, _Literal]]]


def _after(entries: list[tuple[int, _Literal]], ends: list[tuple[int, _Literal]]) -> bytes:
    """The regex for what follows an anchor byte: the rest of each literal anchored there,
    factored by prefix, then a lookbehind for the literal's bytes up to the anchor and an empty
    group that names the literal (appended to ``ends``). Exact and caseless literals are
    alternatives of one branch (a nested one costs each attempt more)."""
    exact: _Tails = {}
    folded: _Tails = {}
    for j, lit in entries:
        (folded if lit.caseless else exact).setdefault(lit.text[j + 1:], []).append((j, lit))
    alts = (_alternatives(exact, False, ends) if exact else []) + \
        (_alternatives(folded, True, ends) if folded else [])
    return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"


def _alternatives(tails: _Tails, caseless: bool, ends: list[tuple[int, _Literal]]) -> list[bytes]:
    """Regex alternatives that match where one of ``tails`` does and its literal's lookbehind
    holds after it. A tail may be a prefix of another: the longer ones come first."""
    heads: dict[bytes, _Tails] = {}
    for tail, got in tails.items():
        if tail:
            heads.setdefault(tail[:1], {})[tail[1:]] = got
    alts = []
    for head, rest in sorted(heads.items()):
        after = _alternatives(rest, caseless, ends)
        shown = _Literal(head, caseless, ()).regex(head)
        alts.append(shown + (after[0] if len(after) == 1 else b"(?:" + b"|".join(after) + b")"))
    # lookbehinds last (sre skips a branch alternative that starts with a byte in C), and a
    # literal that starts at its anchor byte needs none: it is whole once its tail is
    for j, lit in sorted(tails.get(b"", []), key=lambda e: e[0] == 0):
        ends.append((j, lit))
        alts.append((b"(?<=" + lit.regex(lit.text) + b")" if j else b"") + b"()")
    return alts


class PythonEngine:
    """Anchor-byte regex passes + memchr for rare anchor bytes + per-line regex confirmation.
    Pure Python, identical results to the Hyperscan engine."""

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
        # each literal, with the patterns its occurrence is a whole match of apart
        languages = [whole_language(p.prefilter, p.caseless) for p in self.patterns]
        self._lits = []
        for table, caseless in ((self._exact, False), (self._folded, True)):
            for text, idxs in _minimal(table).items():
                whole = {i for i in idxs if text in (languages[i] or ())}
                self._lits.append(_Literal(text, caseless, tuple(sorted(idxs - whole)),
                                           tuple(sorted(whole))))
        self._plan: _Plan | None = None
        self._sample = b""  # the bytes the plan is measured on (from the first chunk)
        self._planned = 0  # how many of them the current plan was measured on
        self._stale = False  # a rare anchor byte turned out common: measure again
        self.plans_measured = 0  # how many times the log's bytes were measured (tests)

    def plan(self, data, limit: int) -> _Plan:
        """The search plan, measured on SAMPLE_BYTES spread over the log's first chunk: a
        stream fed in small pieces is measured again each time its sample has doubled, and a
        log whose bytes changed (a byte taken for rare is not) on its next chunk."""
        if self._stale:
            self._sample, self._planned, self._stale = b"", 0, False
        if len(self._sample) < SAMPLE_BYTES:
            self._sample += _spread(data, limit, SAMPLE_BYTES - len(self._sample))
        if self._plan is None or len(self._sample) >= 2 * self._planned and \
                self._planned < SAMPLE_BYTES:
            freq, groups, alone = _layout(self._lits, self._sample)
            self.plans_measured += 1
            self._planned = max(1, len(self._sample))
            rare = {b for b in groups if _memchr_ns(freq[b]) < _pass_ns(freq[b])}
            if self._plan is None or self._plan.key != _plan_key(groups, alone, rare):
                self._plan = _Plan(groups, alone, rare)
        return self._plan

    def candidates(self, data, limit: int) -> list[tuple[int, int]]:
        """(offset inside a match, pattern index) pairs in ``data[:limit]``, sorted by offset."""
        out: list[tuple[int, int]] = []
        if not limit:
            return out
        plan = self.plan(data, limit)
        confirm = _Confirm(data, limit, self._regexes, out)
        for regex, anchored in plan.passes:
            _search_all(regex, anchored, data, 0, limit, confirm)
        find = data.find
        budget = max(RARE_MIN_HITS, int(limit * RARE_HITS))
        for byte, regex, anchored in plan.rare:
            match = regex.match
            hits = 0
            pos = find(byte, 0, limit)
            while pos != -1:
                hits += 1
                if hits > budget:  # not rare here after all: the regex's own pass from here
                    self._stale = True
                    _search_all(regex, anchored, data, pos, limit, confirm)
                    break
                m = match(data, pos, limit)
                if m is not None:
                    confirm(pos, anchored.literals(m, data, limit))
                pos = find(byte, pos + 1, limit)
        for i in self._no_literal:
            for m in self._regexes[i].finditer(data, 0, limit):
                out.append((m.end() - 1 if m.end() > m.start() else m.start(), i))
        out.sort()
        return out


def _search_all(regex: re.Pattern[bytes], anchored: _Anchored, data, start: int, limit: int,
                confirm: _Confirm) -> None:
    """Every match of one pass's regex in ``data[start:limit]``, each confirmed."""
    search = regex.search
    m = search(data, start, limit)
    while m is not None:
        confirm(m.start(), anchored.literals(m, data, limit))
        m = search(data, m.start() + 1, limit)  # literals may overlap


def _spread(data, limit: int, size: int) -> bytes:
    """``size`` bytes of ``data[:limit]`` in SAMPLE_SLICES slices spread evenly over it (the
    first bytes of a log are often a banner unlike the rest), or all of it when it is short."""
    if limit <= size:
        return bytes(memoryview(data)[:limit])
    step, piece = limit // SAMPLE_SLICES, size // SAMPLE_SLICES
    view = memoryview(data)
    return b"".join(view[k * step:k * step + piece] for k in range(SAMPLE_SLICES))


class _Confirm:
    """Adds to ``out`` the matches that the literals found at an offset stand for: the
    literal's own end for a pattern it is a whole match of, else the matches of the pattern's
    prefilter regex on the offset's line (run once per line and pattern)."""

    def __init__(self, data, limit: int, regexes: list[re.Pattern[bytes]], out: list):
        self.data, self.limit, self.regexes, self.out = data, limit, regexes, out
        self.done: set[tuple[int, int]] = set()  # (line start, pattern) already confirmed
        self.start = self.end = -1  # the last line's bounds (matches come in runs on a line)

    def __call__(self, pos: int, found: list[tuple[int, _Literal]]) -> None:
        data, limit, out = self.data, self.limit, self.out
        to_confirm = False
        for j, lit in found:
            if lit.whole:
                end = pos - j + len(lit.text) - 1
                out.extend((end, i) for i in lit.whole)
            to_confirm = to_confirm or bool(lit.patterns)
        if not to_confirm:
            return
        if not self.start <= pos < self.end:
            self.start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos, limit)
            self.end = limit if end == -1 else end
        start, end, done = self.start, self.end, self.done
        for _, lit in found:
            for i in lit.patterns:
                if (start, i) in done:
                    continue
                done.add((start, i))
                for m in self.regexes[i].finditer(data, start, end):
                    b, e = m.span()
                    out.append((e - 1 if e > b else b, i))
