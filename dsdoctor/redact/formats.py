"""The shared list of secret formats (``secret_formats.yaml``), loaded and compiled once.

Every output path of dsdoctor applies the same list through :func:`redact_formats`. A format is
data (regex, prefilter keywords, real-shape samples and negatives that the tests run), so adding
a vendor is one YAML entry and its tests come with it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

REDACTED = "<redacted>"

# "{L}": a token starts here when not glued to an ASCII letter/digit, or glued to a URL escape
# ("%3Dhf_..."), a C escape ("\nhf_...") or a JSON unicode escape ("\u724chf_...": CJK text in
# a config written with ensure_ascii, quoted verbatim by report). CJK text, "_" and punctuation
# are boundaries too, which \b alone would not give (CJK letters and "_" are word characters).
LEFT = (r"(?:(?<![A-Za-z0-9])|(?<=%[0-9A-Fa-f][0-9A-Fa-f])|(?<=\\[nrt])"
        r"|(?<=\\u[0-9A-Fa-f]{4}))")
RIGHT = r"(?![A-Za-z0-9])"


@dataclass(frozen=True)
class Sample:
    """A planted text: ``parts`` joined; ``parts[secret]`` must vanish, ``kept`` must stay."""

    parts: tuple[str, ...]
    secret: int
    kept: str

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def secret_text(self) -> str:
        return self.parts[self.secret]


@dataclass(frozen=True)
class SecretFormat:
    """One secret format: what it is, how it is found, what proves it works."""

    id: str
    description: str
    reference: str
    keywords: tuple[str, ...]
    source: str  # the regex, with {L}/{R} expanded; compiled on first use (most never are)
    samples: tuple[Sample, ...]
    negatives: tuple[str, ...]
    whole_line: bool = False

    @property
    def regex(self) -> re.Pattern[str]:
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = re.compile(self.source)
            object.__setattr__(self, "_compiled", compiled)
        return compiled

    def applies(self, lowered: str) -> bool:
        """Cheap prefilter: one of the keywords is in the (lower-cased) text."""
        return not self.keywords or any(k in lowered for k in self.keywords)

    def sub(self, text: str) -> str:
        return self.regex.sub(self._repl, text)

    def _repl(self, m: re.Match[str]) -> str:
        if "secret" in self.regex.groupindex and m.group("secret") is not None:
            start, end = m.span("secret")
            return m.string[m.start():start] + REDACTED + m.string[end:m.end()]
        return REDACTED


def _source(entry: dict) -> str:
    return str(entry["regex"]).replace("{L}", LEFT).replace("{R}", RIGHT)


def _compile(entry: dict) -> SecretFormat:
    samples = tuple(
        Sample(tuple(str(p) for p in s["text"]), int(s.get("secret", len(s["text"]) - 1)),
               str(s.get("kept", "")))
        for s in entry.get("samples") or ())
    return SecretFormat(
        id=str(entry["id"]), description=str(entry["description"]),
        reference=str(entry.get("reference", "")),
        keywords=tuple(str(k).lower() for k in entry.get("keywords") or ()),
        source=_source(entry), samples=samples,
        negatives=tuple(str(n) for n in entry.get("negatives") or ()),
        whole_line=bool(entry.get("whole_line", False)))


@functools.lru_cache(maxsize=1)
def secret_formats() -> tuple[SecretFormat, ...]:
    """Every secret format, in the order they are applied (the file's order)."""
    from dsdoctor.datacache import cached_files, package_files  # noqa: PLC0415

    files = package_files("dsdoctor.redact", lambda n: n == "secret_formats.yaml")
    entries = cached_files("secrets", files, lambda sources: _parse(sources[0][1]))
    return tuple(_compile(e) for e in entries)


def _parse(data: bytes) -> list:
    import yaml  # noqa: PLC0415 - the cache usually spares parsing YAML

    entries = yaml.load(data.decode("utf-8"),
                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for entry in entries:  # validated once, when the cache is built; compiled lazily after
        try:
            re.compile(_source(entry))
        except re.error as exc:  # a broken entry is a bug in the package, say which one
            raise ValueError(f"secret format {entry.get('id')!r}: bad regex ({exc})") from None
    return entries


@functools.lru_cache(maxsize=1)
def _keywords() -> tuple[str, ...]:
    """Every format's keywords, each once (many formats share one)."""
    return tuple(dict.fromkeys(k for f in secret_formats() for k in f.keywords))


@functools.lru_cache(maxsize=1)
def _formats_by_keyword() -> dict[str, frozenset[int]]:
    """Each keyword's formats, by their place in the file (most texts hold no keyword at all,
    so the formats that apply are looked up rather than each format asked in turn)."""
    index: dict[str, set[int]] = {}
    for i, f in enumerate(secret_formats()):
        for k in f.keywords:
            index.setdefault(k, set()).add(i)
    return {k: frozenset(v) for k, v in index.items()}


@functools.lru_cache(maxsize=1)
def _always() -> frozenset[int]:
    """The formats without keywords: they run on every text."""
    return frozenset(i for i, f in enumerate(secret_formats()) if not f.keywords)


@functools.lru_cache(maxsize=2048)  # a report redacts the same evidence line many times
def redact_formats(text: str) -> str:
    """``text`` with every match of every secret format replaced by ``<redacted>``."""
    if not text:
        return text
    lowered = text.lower()
    chosen = set(_always())
    by_keyword = _formats_by_keyword()
    for k in _keywords():
        if k in lowered:
            chosen |= by_keyword[k]
    formats = secret_formats()
    for i in sorted(chosen):  # the file's order: a format may rely on an earlier one's work
        text = formats[i].sub(text)
    return text
