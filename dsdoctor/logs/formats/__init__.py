"""Log formats as data: YAML files of patterns, each with real sample lines the tests run.

See docs/design.md ("Format files") for the schema. This module loads and validates them
and converts extracted fields to typed values (the portable engine derives its literals from the
prefilters: literal_engine.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.logs.aggregate import tally_kind
from dsdoctor.logs.formats.digits import is_digit_blind
from dsdoctor.model import SYMPTOM_KINDS

FIELD_TYPES = ("int", "float", "str", "bytes", "bool")
# Constructs that can match a line break: forbidden in prefilters (see _build).
_LINE_CROSSING = re.compile(r"\\[sSWDn r]|(?<!\\)\.|\[\^")
MAX_JOIN_NEXT = 8
#: Most ``\\``-continued lines a shell command pasted into a log is joined over (a launch
#: command's options one per line: real pastes reach about 40).
MAX_JOIN_CONTINUED = 64




class FormatError(ValueError):
    """A format file breaks the schema (a bug in dsdoctor, caught by the tests)."""


# Precise regexes are the standard library's ``re`` (they were the ``regex`` module's, whose
# import alone cost 8 ms of a 0.1 s start-up). One thing ``re`` lacks is a name shared by groups
# in different alternatives: a second "(?P<step>" is renamed "step__dup2" when compiling, and
# Pattern.match folds the names back (the last group that took part, as one shared group does).
_GROUP_DEF_RE = re.compile(r"(?<!\\)\(\?P<([A-Za-z_]\w*)>")
DUPLICATE_MARK = "__dup"


def with_unique_group_names(source: str) -> str:
    """``source`` with every repeated group name renamed ``name__dupN`` (N = 2, 3, ...)."""
    seen: dict[str, int] = {}

    def rename(m: re.Match[str]) -> str:
        name = m.group(1)
        seen[name] = seen.get(name, 0) + 1
        return m.group(0) if seen[name] == 1 else f"(?P<{name}{DUPLICATE_MARK}{seen[name]}>"

    return _GROUP_DEF_RE.sub(rename, source)


def compile_precise(source: str, caseless: bool) -> re.Pattern[str]:
    """A precise regex compiled (repeated group names renamed); raises ``re.error``."""
    return re.compile(with_unique_group_names(source), re.IGNORECASE if caseless else 0)


def check_precise(source: str, caseless: bool, where: str) -> None:
    """FormatError unless ``source`` compiles without a warning (``re`` warns, FutureWarning,
    where it reads a construct unlike other engines, such as the POSIX class in ``[[:digit:]]``)
    and repeats no group name that a back-reference points to."""
    import warnings  # noqa: PLC0415 - only when formats are validated (the cache spares it)

    if "(?P=" in source and with_unique_group_names(source) != source:
        raise FormatError(f"{where}: a back-reference to a repeated group name is ambiguous")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            compile_precise(source, caseless)
        except (re.error, Warning) as exc:
            raise FormatError(f"{where}: bad regex: {exc}") from None


@dataclass(frozen=True)
class Pattern:
    """One precise pattern with its prefilter."""

    id: str
    format: str
    emits: str  # symptom kind | "timeline" | "fact:<name>"
    prefilter: str
    source: str  # the precise regex, compiled on first use (most patterns never see a candidate)
    caseless: bool = False
    join_next: int = 0
    join_continued: int = 0  # a line ending in "\\": joined with up to N continuation lines
    strength: int = 1
    fields: dict[str, str] = field(default_factory=dict)
    samples: tuple[dict[str, Any], ...] = ()
    negatives: tuple[str, ...] = ()
    # The pattern's events count only when the analysis has no event of these patterns (the same
    # occurrence printed by an older release's line, which is counted instead; see
    # aggregate.tally_kind).
    counts_unless: tuple[str, ...] = ()

    @property
    def tally_kind(self) -> str:
        """The aggregator's key for this pattern's events: its symptom kind, or the kind marked
        as counting only without ``counts_unless``'s events."""
        return tally_kind(self.emits, self.counts_unless)

    @property
    def is_timeline(self) -> bool:
        return self.emits == "timeline"

    @property
    def is_fact(self) -> bool:
        return self.emits.startswith("fact:")

    @property
    def regex(self) -> re.Pattern[str]:
        """The compiled precise pattern, compiled once, on first use."""
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = compile_precise(self.source, self.caseless)
            object.__setattr__(self, "_compiled", compiled)
        return compiled

    @property
    def digit_blind(self) -> bool:
        """Whether the precise regex treats all ASCII digits alike (digits.py), found on first
        use (parsing every regex up front would slow every start)."""
        blind = self.__dict__.get("_digit_blind")
        if blind is None:
            blind = is_digit_blind(with_unique_group_names(self.source),
                                   re.IGNORECASE if self.caseless else 0)
            object.__setattr__(self, "_digit_blind", blind)
        return blind

    def match(self, text: str) -> dict[str, Any] | None:
        """Typed field values if the pattern matches ``text``, else None."""
        m = self.regex.search(text)
        if m is None:
            return None
        return self._values(m.groups())

    def spans(self, text: str) -> tuple[tuple[int, int], ...] | None:
        """The (start, end) of each group of the match in ``text`` ((-1, -1): a group that took
        no part), or None when the pattern does not match."""
        m = self.regex.search(text)
        return None if m is None else m.regs[1:]

    def plan(self, spans: tuple[tuple[int, int], ...]) -> tuple[tuple[str, int, int, str], ...]:
        """(field name, start, end, type) of each field whose group took part in a match whose
        groups are at ``spans`` (:meth:`spans`), in group order: what :meth:`values_at` reads."""
        return tuple((name, spans[pos][0], spans[pos][1], typ)
                     for name, pos, typ in self._field_positions() if spans[pos][0] >= 0)

    def values_at(self, text: str, plan: tuple[tuple[str, int, int, str], ...]) -> dict[str, Any]:
        """:meth:`match`'s values for ``text`` whose fields are where ``plan`` says: a
        digit-blind pattern's plan on a line of the same shape (scan.py, _Shape)."""
        out: dict[str, Any] = {}
        for name, start, end, typ in plan:
            raw = text[start:end]
            if typ == "str":  # convert()'s "str" case, without its call (most fields are text)
                out[name] = raw.strip()
                continue
            val = _typed(raw, typ)
            if val is not None:
                out[name] = val
        return out

    def _field_positions(self) -> tuple[tuple[str, int, str], ...]:
        """(name, position in m.groups(), type) of each group, in group order: groupdict()
        costs more than groups(), and this runs once per matched line (a million OVERFLOW
        lines). In group order, so that of a repeated name the last group that took part wins."""
        fields = self.__dict__.get("_fields")
        if fields is None:
            fields = tuple((name.split(DUPLICATE_MARK)[0], num - 1,
                            self.fields.get(name.split(DUPLICATE_MARK)[0], "str"))
                           for name, num in sorted(self.regex.groupindex.items(),
                                                   key=lambda item: item[1]))
            object.__setattr__(self, "_fields", fields)
        return fields

    def _values(self, groups: Sequence[str | None]) -> dict[str, Any]:
        """The typed field values of a match's groups."""
        out: dict[str, Any] = {}
        for name, pos, typ in self._field_positions():
            raw = groups[pos]
            if raw is None:
                continue
            if typ == "str":  # convert()'s "str" case, without its call (most fields are text)
                out[name] = raw.strip()
                continue
            val = _typed(raw, typ)
            if val is not None:
                out[name] = val
        return out

    def lines_wanted(self, first: str) -> int:
        """How many lines after ``first`` :meth:`match_lines` may read."""
        if self.join_continued and ends_continued(first):
            return self.join_continued
        return self.join_next

    def match_lines(self, first: str, following: list[str]) -> dict[str, Any] | None:
        """Match one segment, or (``join_next``) the segment joined with the lines after it, or
        (``join_continued``) a shell command continued with ``\\`` joined as the shell joins it."""
        if self.join_continued and ends_continued(first):
            return self.match(join_continued(first, following, self.join_continued))
        got = self.match(first)
        if got is not None or not self.join_next or not following:
            return got
        joined = first
        for nxt in following[: self.join_next]:
            joined = joined.rstrip() + " " + nxt.strip()
            got = self.match(joined)
            if got is not None:
                return got
        return None


def _typed(raw: str, typ: str) -> Any:
    """``raw`` as a value of type ``typ`` (not "str"), None when it does not parse: plain
    digits first (convert() gives the same value)."""
    try:
        if typ == "float":
            val = float(raw)
            return math.nan if val != val else val
        if typ == "int":
            return int(raw)
        if typ == "bytes":
            return _bytes_value(raw)
        return convert(raw, typ)
    except ValueError:
        return convert(raw, typ)  # "1,024" and the like


def ends_continued(text: str) -> bool:
    """A shell line continued on the next one: it ends in one backslash (trailing blanks, which
    pastes add, ignored; ``\\\\`` is an escaped backslash, not a continuation)."""
    line = text.rstrip()
    return line.endswith("\\") and not line.endswith("\\\\")


def join_continued(first: str, following: list[str], limit: int) -> str:
    """``first`` and its continuation lines joined with one space each, as the shell joins them:
    up to ``limit`` lines, ending after the first line that does not end in ``\\``. A blank line
    (or the end of the paste) ends it too: the paste cut the command there."""
    parts = [first.rstrip()[:-1].rstrip()]
    for nxt in following[:limit]:
        piece = nxt.strip()
        if not piece:
            break
        if ends_continued(piece):
            parts.append(piece[:-1].rstrip())
            continue
        parts.append(piece)
        break
    return " ".join(p for p in parts if p)


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([KMGTP]?i?B|bytes?)?\s*$", re.I)
# torch prints "GiB"/"MiB" (binary); the bare "GB"/"MB" of its older messages are binary too
_UNIT_POWER = {"": 0, "b": 0, "byte": 0, "bytes": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def convert(raw: str, typ: str) -> Any:
    """Convert a captured string to its declared type; None when it does not parse."""
    raw = raw.strip()
    try:
        if typ == "int":
            return int(raw.replace(",", ""))
        if typ == "float":
            v = float(raw.replace(",", ""))  # also "nan", "-inf", "Infinity"
            # one NaN object for every NaN: results then compare equal (nan != nan, but
            # containers compare identical objects as equal), e.g. the two engines' timelines
            return math.nan if v != v else v
        if typ == "bytes":
            return _bytes_value(raw)
        if typ == "bool":
            return raw.lower() in ("true", "1", "yes", "on")
    except (ValueError, OverflowError):
        return None
    return raw


# A size seen once is usually seen again (an OOM message's total and free memory repeat on
# every line of a million-line log); parsing one costs a regex and a float, a hit a dict look-up.
@functools.lru_cache(maxsize=4096)
def _bytes_value(raw: str) -> int | None:
    """``raw`` ("2.40 GiB", "0 bytes", "978.00 MiB") in bytes, or None when it is no size."""
    m = _SIZE_RE.match(raw)
    if not m:
        return None
    unit = (m.group(2) or "").lower()
    power = _UNIT_POWER.get(unit, _UNIT_POWER.get(unit[:1], 0))
    try:
        return int(float(m.group(1)) * 1024 ** power)
    except OverflowError:  # "1e999 GiB"
        return None


def _check_keys(obj: dict, allowed: set[str], where: str) -> None:
    extra = set(obj) - allowed
    if extra:
        raise FormatError(f"{where}: unknown keys {sorted(extra)}")


def _build(fmt_name: str, spec: dict, where: str, validate: bool = True) -> Pattern:
    _check_keys(
        spec,
        {"id", "emits", "prefilter", "caseless", "regex", "join_next", "join_continued", "strength", "fields",
         "samples", "negatives", "description", "source", "notes", "counts_unless"},
        where,
    )
    for key in ("id", "emits", "prefilter", "regex"):
        if not spec.get(key):
            raise FormatError(f"{where}: missing {key!r}")
    emits = spec["emits"]
    if not (emits in SYMPTOM_KINDS or emits == "timeline" or emits.startswith("fact:")):
        raise FormatError(f"{where}: emits {emits!r} is not a symptom kind, 'timeline' or 'fact:*'")
    fields = dict(spec.get("fields") or {})
    for name, typ in fields.items():
        if typ not in FIELD_TYPES:
            raise FormatError(f"{where}: field {name!r} has unknown type {typ!r}")
    caseless = bool(spec.get("caseless", False))
    if validate:
        check_precise(spec["regex"], caseless, where)
    bad = _LINE_CROSSING.search(spec["prefilter"])
    if bad:
        # Both engines must agree on which line a hit belongs to: a prefilter must never match
        # "\n" or "\r". Use literal spaces or "[ \t]" instead of "\s", "." and negated classes.
        raise FormatError(f"{where}: prefilter may not use {bad.group(0)!r} (it can cross lines)")
    try:
        re.compile(spec["prefilter"].encode(), re.IGNORECASE if caseless else 0)
    except re.error as exc:
        raise FormatError(f"{where}: bad prefilter: {exc}") from None
    join_next = int(spec.get("join_next", 0))
    if not 0 <= join_next <= MAX_JOIN_NEXT:
        raise FormatError(f"{where}: join_next must be 0..{MAX_JOIN_NEXT}")
    join_cont = int(spec.get("join_continued", 0))
    if not 0 <= join_cont <= MAX_JOIN_CONTINUED:
        raise FormatError(f"{where}: join_continued must be 0..{MAX_JOIN_CONTINUED}")
    unless = spec.get("counts_unless") or []
    if not isinstance(unless, list) or not all(isinstance(u, str) and u for u in unless):
        raise FormatError(f"{where}: counts_unless is a list of pattern ids")
    if unless and emits not in SYMPTOM_KINDS:
        raise FormatError(f"{where}: counts_unless applies to a symptom pattern only")
    samples = []
    for s in spec.get("samples") or ():
        if isinstance(s, str):
            s = {"line": s}
        if "line" not in s:
            raise FormatError(f"{where}: a sample lacks 'line'")
        samples.append(dict(s))
    if not samples:
        raise FormatError(f"{where}: at least one real sample line is required")
    return Pattern(
        id=spec["id"],
        format=fmt_name,
        emits=emits,
        prefilter=spec["prefilter"],
        source=spec["regex"],
        caseless=caseless,
        join_next=join_next,
        join_continued=join_cont,
        strength=int(spec.get("strength", 1)),
        fields=fields,
        samples=tuple(samples),
        negatives=tuple(spec.get("negatives") or ()),
        counts_unless=tuple(unless),
    )


def load_file(text: str, name: str, validate: bool = True) -> list[Pattern]:
    """Parse one format file's YAML text into patterns.

    ``validate=False`` skips compiling the precise regexes up front (the shipped formats: the
    tests compile every one of them; at run time each compiles on first use).
    """
    import yaml  # noqa: PLC0415 - the cache (load_patterns) usually spares parsing YAML

    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader (C when available)
    if not isinstance(doc, dict):
        raise FormatError(f"{name}: a format file is a mapping")
    _check_keys(doc, {"format", "description", "source", "patterns", "notes"}, name)
    fmt = doc.get("format") or name
    return [_build(fmt, spec, f"{name}:{spec.get('id', i)}", validate)
            for i, spec in enumerate(doc.get("patterns") or ())]


@functools.lru_cache(maxsize=1)
def load_patterns() -> tuple[Pattern, ...]:
    """All patterns of all shipped format files, validated (unique ids).

    The validated patterns are kept in dsdoctor's private data cache (datacache.py), keyed by
    the format files as they are now: parsing the YAML costs more than scanning a small log.
    """
    from dsdoctor.datacache import cached_files, package_files  # noqa: PLC0415

    files = package_files("dsdoctor.logs.formats", lambda n: n.endswith(".yaml"))
    # the schema names Pattern's fields: a cache written by a version whose patterns had
    # other fields is never read back
    schema = ",".join(f.name for f in dataclasses.fields(Pattern))
    specs = cached_files("formats", files, _validated_fields, schema)
    return tuple(Pattern(**spec) for spec in specs)


def _validated_fields(sources: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    out: list[Pattern] = []
    for name, data in sources:
        out.extend(load_file(data.decode("utf-8"), name, validate=False))
    seen: set[str] = set()
    for p in out:
        if p.id in seen:
            raise FormatError(f"duplicate pattern id {p.id!r}")
        seen.add(p.id)
    for p in out:
        unknown = [u for u in p.counts_unless if u not in seen]
        if unknown:
            raise FormatError(f"{p.id}: counts_unless names unknown pattern(s) {unknown}")
    return [{f.name: getattr(p, f.name) for f in dataclasses.fields(p)} for p in out]
