"""Digit-blind regexes: whose run is the same on any text whose ASCII digits are replaced.

A log repeats one line shape with other numbers in it (a million OOM lines, each with its own
size; step lines). When no part of a regex tells one ASCII digit from another (no literal digit,
no class holding some digits but not all, no back-reference), the engine takes the same steps on
a line and on that line with every digit made ``0``: it matches or refuses both, with the same
group spans. The scanner then runs such a regex once per shape (digits masked) and reads each
line's values at the spans found (scan.py, Pattern.match_masked).
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

_DIGITS = frozenset(range(ord("0"), ord("9") + 1))
#: str.translate table: every ASCII digit becomes "0" (CPython's ASCII fast path)
DIGIT_MASK = str.maketrans("123456789", "000000000")


def mask_digits(text: str) -> str:
    """``text`` with every ASCII digit replaced by ``0``: the key of its line shape."""
    return text.translate(DIGIT_MASK)


def is_digit_blind(source: str, flags: int = 0) -> bool:
    """True when the regex ``source`` treats the ten ASCII digits alike everywhere (see the
    module's docstring); False for anything this check does not understand."""
    try:
        parsed = _p.parse(source, flags)
    except re.error:
        return False
    return _blind(parsed)


def _blind(items: Any) -> bool:
    for op, av in items:
        if op in (_c.LITERAL, _c.NOT_LITERAL):
            if av in _DIGITS:
                return False
        elif op is _c.IN:
            if not _set_blind(av):
                return False
        elif op in (_c.GROUPREF, _c.GROUPREF_IGNORE, _c.GROUPREF_LOC_IGNORE,
                    _c.GROUPREF_UNI_IGNORE):
            return False  # compares text: "1" and "2" differ
        elif op in (_c.ANY, _c.AT, _c.CATEGORY, _c.FAILURE, _c.SUCCESS):
            continue  # categories (\d, \w, \s, \b and negations) hold all digits or none
        elif op is _c.SUBPATTERN:
            if not _blind(av[-1]):
                return False
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            if not _blind(av[2]):
                return False
        elif op is _c.BRANCH:
            if not all(_blind(alt) for alt in av[1]):
                return False
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            if not _blind(av[1]):
                return False
        elif op is _c.ATOMIC_GROUP:
            if not _blind(av):
                return False
        elif op is _c.GROUPREF_EXISTS:  # (group, yes, no): whether the group took part
            if not _blind(av[1]) or (av[2] is not None and not _blind(av[2])):
                return False
        else:
            return False  # an opcode this check does not know: not proven blind
    return True


def _set_blind(items: Any) -> bool:
    """A character class holds all ten digits or none of them."""
    held: set[int] = set()
    for op, av in items:
        if op is _c.NEGATE:
            continue  # negating a set that holds all or none keeps it so
        if op is _c.LITERAL:
            if av in _DIGITS:
                held.add(av)
        elif op is _c.RANGE:
            held.update(d for d in _DIGITS if av[0] <= d <= av[1])
        elif op is _c.CATEGORY:
            continue
        else:
            return False
    return not held or held == _DIGITS
