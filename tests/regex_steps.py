"""Count the work a backtracking regex engine does, instead of timing it.

``re`` keeps no count of its steps, so this replays a parsed pattern (``re._parser``'s tree, the
same tree ``re`` compiles) the way a backtracking engine runs it: ``search`` tries every start;
each start walks the nodes, a repeat tries its counts greedily (or lazily) and backtracks, an
atomic group or possessive repeat keeps its first way. Every node visited and every character a
repeat consumes is one step. The count does not depend on the machine's load, so a test can
assert how work grows with the text (linear: 4x the text, about 4x the steps; quadratic: 16x).

It covers what dsdoctor's patterns use: literals and classes (case-folded when caseless),
anchors and word boundaries, groups, alternation, greedy/lazy/possessive repeats, atomic groups,
look-ahead and fixed-width look-behind. ``matches`` agrees with ``re`` (tested on every sample).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from re import _constants as C  # noqa: N812
from re import _parser as sre_parse
from typing import Any


class OverBudget(Exception):
    """The step budget ran out (the caller treats it as superlinear)."""


_WORD = re.compile(r"\w")
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s")


def _in_category(cat: Any, ch: str) -> bool:
    if cat is C.CATEGORY_DIGIT:
        return bool(_DIGIT.match(ch))
    if cat is C.CATEGORY_NOT_DIGIT:
        return not _DIGIT.match(ch)
    if cat is C.CATEGORY_WORD:
        return bool(_WORD.match(ch))
    if cat is C.CATEGORY_NOT_WORD:
        return not _WORD.match(ch)
    if cat is C.CATEGORY_SPACE:
        return bool(_SPACE.match(ch))
    if cat is C.CATEGORY_NOT_SPACE:
        return not _SPACE.match(ch)
    raise NotImplementedError(cat)


def _char_test(op: Any, av: Any, caseless: bool) -> Callable[[str], bool] | None:
    """A predicate for a one-character node, or None if the node is not one."""
    def fold(ch: str) -> tuple[str, ...]:
        return (ch, ch.lower(), ch.upper()) if caseless else (ch,)

    if op is C.LITERAL:
        want = chr(av)
        return lambda ch: any(c == want or c == want.lower() or c == want.upper()
                              for c in fold(ch)) if caseless else ch == want
    if op is C.NOT_LITERAL:
        lit = _char_test(C.LITERAL, av, caseless)
        assert lit is not None
        return lambda ch: not lit(ch)
    if op is C.ANY:
        return lambda ch: ch != "\n"
    if op is C.IN:
        negate = bool(av) and av[0][0] is C.NEGATE
        items = av[1:] if negate else av

        def one(c: str) -> bool:
            for iop, iav in items:
                if iop is C.LITERAL and c == chr(iav):
                    return True
                if iop is C.RANGE and iav[0] <= ord(c) <= iav[1]:
                    return True
                if iop is C.CATEGORY and _in_category(iav, c):
                    return True
            return False

        return lambda ch: (not any(one(c) for c in fold(ch))) if negate else any(
            one(c) for c in fold(ch))
    return None


class Counter:
    """Replays one parsed pattern on texts, counting steps."""

    def __init__(self, source: str, caseless: bool = False) -> None:
        self.tree = sre_parse.parse(source, re.IGNORECASE if caseless else 0)
        self.caseless = bool(self.tree.state.flags & re.IGNORECASE)  # (?i) at the start too
        self.steps = 0
        self.budget = 0
        self.text = ""
        self._tests: dict[int, Callable[[str], bool] | None] = {}

    def _tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.budget:
            raise OverBudget

    def _test(self, node: Any, ci: bool) -> Callable[[str], bool] | None:
        key = id(node) * 2 + ci
        if key not in self._tests:
            self._tests[key] = _char_test(node[0], node[1], ci)
        return self._tests[key]

    def search(self, text: str, budget: int) -> tuple[bool, int]:
        """(whether it matches somewhere, steps taken); raises OverBudget past ``budget``."""
        self.text, self.steps, self.budget = text, 0, budget
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20 * len(text) + 1000))
        try:
            nodes = list(self.tree)
            for start in range(len(text) + 1):
                self._tick()
                if self._seq(nodes, 0, start, lambda _p: True, self.caseless):
                    return True, self.steps
            return False, self.steps
        finally:
            sys.setrecursionlimit(limit)

    def _seq(self, nodes: list[Any], i: int, pos: int, k: Callable[[int], bool], ci: bool) -> bool:
        """Match ``nodes[i:]`` at ``pos``, then the continuation ``k``; ``ci``: case-insensitive."""
        if i == len(nodes):
            return k(pos)
        self._tick()
        node = nodes[i]
        op, av = node
        test = self._test(node, ci)
        if test is not None:
            return (pos < len(self.text) and test(self.text[pos])
                    and self._seq(nodes, i + 1, pos + 1, k, ci))

        def rest(p: int) -> bool:
            return self._seq(nodes, i + 1, p, k, ci)
        if op is C.SUBPATTERN:
            _group, add, remove, body = av
            inner = (ci or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            return self._seq(list(body), 0, pos, rest, inner)
        if op is C.BRANCH:
            return any(self._seq(list(b), 0, pos, rest, ci) for b in av[1])
        if op is C.AT:
            return self._at(av, pos) and rest(pos)
        if op is C.ATOMIC_GROUP:
            end = self._first_end(list(av), pos, ci)
            return end is not None and rest(end)
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, body = av
            body = list(body)
            if direction == 1:
                ok = self._seq(body, 0, pos, lambda _p: True, ci)
            else:
                width = body_width(body)
                ok = pos - width >= 0 and self._seq(body, 0, pos - width, lambda p: p == pos, ci)
            return (ok if op is C.ASSERT else not ok) and rest(pos)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            return self._repeat(op, av, pos, rest, ci)
        raise NotImplementedError(op)

    def _first_end(self, nodes: list[Any], pos: int, ci: bool) -> int | None:
        ends: list[int] = []

        def keep(p: int) -> bool:
            ends.append(p)
            return True
        return ends[0] if self._seq(nodes, 0, pos, keep, ci) else None

    def _at(self, code: Any, pos: int) -> bool:
        text = self.text
        if code in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return pos == 0
        if code is C.AT_END:
            return pos == len(text) or (pos == len(text) - 1 and text[pos] == "\n")
        if code is C.AT_END_STRING:
            return pos == len(text)
        if code in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY):
            before = pos > 0 and bool(_WORD.match(text[pos - 1]))
            after = pos < len(text) and bool(_WORD.match(text[pos]))
            return (before != after) == (code is C.AT_BOUNDARY)
        raise NotImplementedError(code)

    def _repeat(self, op: Any, av: Any, pos: int, k: Callable[[int], bool], ci: bool) -> bool:
        lo, hi, body = av
        body = list(body)
        hi = len(self.text) + 1 if hi is C.MAXREPEAT else hi
        test = self._test(body[0], ci) if len(body) == 1 else None
        if test is not None:  # one character per count, as sre's REPEAT_ONE runs it
            n = 0
            while n < hi and pos + n < len(self.text) and test(self.text[pos + n]):
                n += 1
                if op is not C.MIN_REPEAT:
                    self._tick()
            if n < lo:
                return False
            if op is C.POSSESSIVE_REPEAT:
                return k(pos + n)
            counts = range(n, lo - 1, -1) if op is C.MAX_REPEAT else range(lo, n + 1)
            for c in counts:
                self._tick()
                if k(pos + c):
                    return True
            return False
        if op is C.POSSESSIVE_REPEAT:
            count, at = 0, pos
            while count < hi:
                end = self._first_end(body, at, ci)
                if end is None or end == at:
                    break
                count, at = count + 1, end
            return count >= lo and k(at)

        def more(count: int, at: int) -> bool:
            self._tick()
            def next_(p: int) -> bool:
                return p != at and more(count + 1, p)
            if op is C.MAX_REPEAT:
                if count < hi and self._seq(body, 0, at, next_, ci):
                    return True
                return count >= lo and k(at)
            if count >= lo and k(at):
                return True
            return count < hi and self._seq(body, 0, at, next_, ci)
        return more(0, pos)


def body_width(body: list[Any]) -> int:
    lo, hi = sre_parse.SubPattern(sre_parse.State(), body).getwidth()
    if lo != hi:
        raise NotImplementedError("variable-width look-behind")
    return lo
