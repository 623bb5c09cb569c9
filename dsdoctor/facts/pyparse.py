"""Python syntax trees of a user's script with a memory bound (read, never run).

``ast.parse`` holds about 500 bytes per token while it parses (measured: a list literal of
600,000 tokens peaks at 300 MB), whatever the text's length in bytes: a 7 MiB script of one
expression took 2.96 GiB, an unbalanced 2 MiB one 1.82 GiB before its SyntaxError (issue 24).
So a text is parsed only when its tokens, counted first at C speed, are at most
:data:`MAX_PARSE_TOKENS`; a big script is parsed in pieces (``scriptcheck``), each under it.
"""

from __future__ import annotations

import ast
import re

#: The most tokens one ``ast.parse`` call is given (about 200 MB of parser memory).
MAX_PARSE_TOKENS = 400_000

# A word (name, number, keyword) or one punctuation character: at least one token each, at most
# one AST node each, so the count bounds the parser's work from above closely enough.
_TOKEN = re.compile(r"\w+|[^\w\s]")


class ParseBudgetError(ValueError):
    """A text with more tokens than one parse may take."""

    def __init__(self, tokens: int):
        super().__init__(f"more than {MAX_PARSE_TOKENS:,} tokens in one piece ({tokens:,} or "
                         "more)")
        self.tokens = tokens


def _count(text: str | bytes, stop_after: int) -> int:
    s = text if isinstance(text, str) else text.decode("latin-1")
    n = 0
    piece = 1 << 20
    for start in range(0, len(s), piece):
        # a token cut at a piece boundary counts twice: an upper bound, as documented
        n += _TOKEN.subn("", s[start:start + piece])[1]
        if n > stop_after:
            break
    return n


def parse_bounded(text: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(text)``, or ParseBudgetError (a ValueError) for a text over the budget."""
    if len(text) > MAX_PARSE_TOKENS:
        n = _count(text, MAX_PARSE_TOKENS)
        if n > MAX_PARSE_TOKENS:
            raise ParseBudgetError(n)
    return ast.parse(text, filename=filename)
