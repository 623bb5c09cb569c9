"""Which real logs of the wild corpus are sealed (held out), decided by their source address alone.

The choice is made before anyone reads a log: a SHA-256 of the thread's address (lower-cased, no
trailing slash, no ``#issuecomment`` anchor) with a fixed salt, and one address in five is sealed.
A sealed log goes to ``tests/data/real_logs_sealed/``; nobody who writes patterns or rules reads it,
and it is only run by ``bench/heldout.py`` to measure recall and verdict agreement.

    python bench/seal.py https://github.com/owner/repo/issues/123     # prints: sealed | open
"""

from __future__ import annotations

import hashlib
import sys

SALT = "dsdoctor-issue-19-heldout"


def canonical(source: str) -> str:
    """The address as it is hashed: lower-cased, without anchor, query or trailing slash."""
    s = source.strip().lower().split("#", 1)[0].split("?", 1)[0].rstrip("/")
    return s


def is_sealed(source: str) -> bool:
    """True for one address in five (pseudo-randomly, independent of the log's text)."""
    digest = hashlib.sha256(f"{SALT}\n{canonical(source)}".encode()).hexdigest()
    return int(digest, 16) % 5 == 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    for src in sys.argv[1:]:
        print("sealed" if is_sealed(src) else "open", src if len(sys.argv) > 2 else "")
