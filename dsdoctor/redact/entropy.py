"""Random-looking values under a name that says nothing: ``"x": "iK2ZWeqhFWCEPyYngFb51yBMW"``.

A token without a prefix of its own (a Comet API key, a ClearML secret, a Neptune or MLflow
token) is found by its context where there is one (names.py: a secret key, flag or header).
Under a neutral name (``"x"``, ``value``, ``MY_VAR``) it is found here by its look, as
detect-secrets' high-entropy-string plugin does: one run of letters and digits, 20 characters or
more, that mixes upper case, lower case and digits the way a random key does and no word does.

What stays (tests/test_redact_entropy.py): pure hex and UUIDs (a git hash, a checksum or a run id
looks exactly like a Datadog key, and a diagnosis quotes them: docs/security.md, "Limits"),
identifiers (``Qwen2VLForConditionalGeneration``: long lower-case runs, few digits), mangled C++
symbols (``undefined symbol: _ZN3c10...``), base64 that decodes to text (the base64 pass reads
it: ``world_info``), and any value under a name that says what it is (``commit``, ``sha``,
``run_id``, ``model``, ``path``).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter

from dsdoctor.redact.formats import REDACTED
from dsdoctor.redact.names import name_words

# A run of token characters (20-512, base64's padding after), whole: it neither starts nor ends
# inside a longer run; an "=" before it is a separator (x=VALUE). Cheap
# to scan for (one character class); only a run that looks random is checked for a name before it.
_RUN = re.compile(r"(?<![A-Za-z0-9_+/.-])[A-Za-z0-9_+/-]{20,512}+={0,2}+(?![A-Za-z0-9_+/=.-])")
# What must stand right before such a run: key <sep>, optionally quoted (JSON, YAML, env, Python
# dict, JSON inside a JSON string). The key starts at a word's first character, so a flag's name
# (--world_info=) is no key. Possessive and bounded: linear (tests/test_redact_linear.py).
_KEY_BEFORE = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z_][A-Za-z0-9_.-]{0,100}+)\\?[\"']?[ \t]*+[:=][ \t]*+"
    r"\\?[\"']?\Z")
_KEY_REACH = 112  # the longest key, its quotes and blanks
_HEX = re.compile(r"[0-9a-fA-F]++")
#: A C++ symbol as the Itanium ABI mangles it (``_ZN3c104cuda20CUDACachingAllocator9allocatorE``,
#: in "undefined symbol: ..."): lengths and names, no key.
_MANGLED = re.compile(r"_Z[A-Z]{0,4}+[0-9]")
#: A GPU or MIG device UUID (``GPU-8e3c1b2a-...``): an id that CUDA_VISIBLE_DEVICES names.
_PREFIXED_HEX = re.compile(r"[A-Za-z]{1,8}+-[0-9a-fA-F-]++")
_LOWER_RUN = re.compile(r"[a-z]{10,}")  # in a random 50-character key: 1 in ~100
#: A separated part that is a word (``global_step1000``, ``my-run-name``): a name, not a key.
_WORD_PART = re.compile(r"(?:^|[_./-])[A-Za-z][a-z]{3,}+(?=[_./-])|[_./-][A-Za-z][a-z]{3,}+(?=[0-9]|$)")
#: Capitalized words (``DTensorPolicyWorkerV2``): an identifier when they make most of the run.
_CAPITALIZED = re.compile(r"[A-Z][a-z]{2,}+")
#: Words in a key that say what its value is: an id, a hash, a name, a place.
_SAYS_WHAT = frozenset({
    "id", "ids", "uuid", "guid", "sha", "sha1", "sha256", "sha512", "md5", "hash", "commit",
    "digest", "checksum", "crc", "revision", "rev", "fingerprint", "etag", "nonce", "name", "path",
    "file", "filename", "dir", "url", "uri", "model", "version", "type", "class", "arch",
    "architectures", "tag", "ref", "branch", "seed", "trace", "span", "request", "session",
})
#: Bits per character a random run over letters and digits reaches with margin (a random
#: 25-character key: ~4.3); a short run is held to log2(length) - 1 (20 characters: 3.3).
MIN_ENTROPY = 3.6


def _entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _decodes_to_text(run: str) -> bool:
    """True when the run is base64 of printable text (JSON, a command line): not a key."""
    padded = run + "=" * (-len(run) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(text) and all(c.isprintable() or c in "\t\n\r" for c in text)


def random_looking(value: str) -> bool:
    """A run that looks like a generated key: mixed case and digits, spread out, no word."""
    # hex with or without dashes: a hash, a checksum, a UUID
    if _HEX.fullmatch(value.replace("-", "")) or _PREFIXED_HEX.fullmatch(value) or \
            _MANGLED.match(value):
        return False
    body = value.rstrip("=")
    digits = sum(c.isdigit() for c in body)
    if not digits or not any(c.isupper() for c in body):
        return False
    if _LOWER_RUN.search(body) or _WORD_PART.search(body):
        return False
    if sum(len(w) for w in _CAPITALIZED.findall(body)) * 3 > len(body) * 2:
        return False
    return _entropy(body) >= min(MIN_ENTROPY, math.log2(len(body)) - 1.0) and \
        not _decodes_to_text(value)


def _key_says_what(key: str) -> bool:
    return not _SAYS_WHAT.isdisjoint(name_words(key))


def neutral_named_values(text: str) -> list[tuple[str, str, int, int]]:
    """(key, value, start, end) of each random-looking value under a name that does not say
    what it is."""
    found = []
    for m in _RUN.finditer(text):
        val = m.group(0)
        if not random_looking(val):
            continue
        key = _KEY_BEFORE.search(text, max(0, m.start() - _KEY_REACH), m.start())
        if key is not None and not _key_says_what(key.group("key")):
            found.append((key.group("key"), val, m.start(), m.end()))
    return found


def redact_random_values(text: str) -> str:
    """``text`` with random-looking values under neutral names replaced by ``<redacted>``."""
    if len(text) < 22:
        return text
    found = neutral_named_values(text)
    if not found:
        return text
    out: list[str] = []
    pos = 0
    for _key, _val, start, end in found:
        out += [text[pos:start], REDACTED]
        pos = end
    out.append(text[pos:])
    return "".join(out)
