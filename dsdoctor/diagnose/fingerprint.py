"""A stable fingerprint of a log line: the same failure gives the same id across jobs and ranks.

What changes from one run to the next is removed before hashing: timestamps, numbers, hex ids,
paths, hosts and IP addresses, rank and pid prefixes, quoted values. What stays is the message's
wording, which is what identifies a failure ("the same NCCL error in 40 jobs").
"""

from __future__ import annotations

import re

from dsdoctor.datacache import digest

_STEPS: tuple[tuple[re.Pattern[str], str], ...] = (
    # launcher and logger prefixes that carry a rank, a pid or a host
    (re.compile(r"\[(?:rank|default)\d+\]:|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\)"), " "),
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?"), " "),  # ISO timestamps
    (re.compile(r"\b[EWIF]\d{3,4} \d\d:\d\d:\d\d\.\d+"), " "),  # glog timestamps
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?"), " "),  # times of day
    (re.compile(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?"), "<path>"),  # paths
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{8,}\b"), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def signature(text: str) -> str:
    """The line with what varies between runs replaced by placeholders."""
    out = text
    for pattern, placeholder in _STEPS:
        out = pattern.sub(placeholder, out)
    return out.strip()


def fingerprint(text: str) -> str:
    """12 hex digits naming the line's signature (identical for the same failure elsewhere)."""
    return digest(signature(text).encode("utf-8"))[:12].decode("ascii")


__all__ = ["fingerprint", "signature"]
