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


#: The version of the cause fingerprint's recipe, hashed with it: a change to the recipe (a new
#: normalization step) bumps it, so an id never silently means two different things; the same
#: recipe gives the same id in every dsdoctor release (docs/fingerprints.md).
CAUSE_RECIPE = "cause-1"

#: Logger and launcher prefixes before the message (after :func:`signature`): glog's
#: ``[E206 <n> ProcessGroupNCCL.cpp:<n>]``, DeepSpeed's ``[INFO] [engine.py:<n>:step]``, Python
#: logging's ``ERROR - name -``, placeholders and separators. They differ between releases of the
#: printing library and between ranks; the message after them is the failure.
_PREFIX = re.compile(r"^(?:\s*(?:\[[^\]]*\]|<n>|<path>|<ip>|<hex>|(?:DEBUG|INFO|WARNING|WARN|ERROR|"
                     r"CRITICAL|FATAL)\b|[-:|>,]+))+\s*")
#: The signature is cut here: evidence text is capped, and a line whose numbers are longer is cut
#: earlier in its message; the start of the message names the failure.
CAUSE_SIGNATURE_CHARS = 160


def cause_signature(text: str) -> str:
    """A failure line's message with what varies between runs, ranks and releases of the printing
    library removed: :func:`signature`, then its logger prefix, cut to a fixed length."""
    # a long decimal reads as a hex id to signature(): both are what varies, one placeholder
    merged = signature(text).replace("<hex>", "<n>")
    return _PREFIX.sub("", merged)[:CAUSE_SIGNATURE_CHARS].strip()


def cause_fingerprint(key: str, signature_text: str) -> str:
    """12 hex digits naming one root cause: ``key`` (a rule code, or ``cause:<name>`` when no rule
    explains it) and the cause's normalized signature (a line's :func:`cause_signature`, or a
    config key's path)."""
    # surrogatepass: a config key may hold a lone surrogate (JSON allows "\udc00")
    raw = f"{CAUSE_RECIPE}\0{key}\0{signature_text}".encode("utf-8", "surrogatepass")
    return digest(raw)[:12].decode("ascii")


__all__ = ["CAUSE_RECIPE", "cause_fingerprint", "cause_signature", "fingerprint", "signature"]
