"""Edit a JSON config's text in place: each edit replaces, inserts or removes only the bytes of the
member it fixes, so indentation, key order, comments, number spellings (``3e-4``, ``5e8``), line
endings and the trailing newline stay as the user wrote them (issue 20, item 7).

Every function takes a :class:`~dsdoctor.facts.configfile.JsonLayout` (the text with where each
member and object is written) and returns the new text; ``fixout`` parses the result again before
the next edit and checks that it reads back as the intended config.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from dsdoctor.facts.configfile import JsonLayout, MemberSpan, ObjectSpan, join_path, split_path

# Spaces, tabs and comments that may follow a value on its own line (single-line block comments only).
_REST_OF_LINE = re.compile(r"(?:[ \t]+|//[^\r\n]*|#[^\r\n]*|/\*[^\r\n]*?\*/)*")
_WS_COMMENTS = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*|/\*.*?\*/)*", re.S)
_EXPONENT = re.compile(r"[eE]")

#: Renders a value for the indentation of the line it starts on (multi-line containers need it),
#: or on one line (True) among members that share one.
Render = Callable[[str, bool], str]


class SpliceError(ValueError):
    """The text cannot be edited at that place (a path through a list, a value not an object)."""


# ---------------------------------------------------------------------------------- the text's style

def newline_of(text: str) -> str:
    """The file's line ending: CRLF when its first line ends so, else LF."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def _line_start(text: str, i: int) -> int:
    return text.rfind("\n", 0, i) + 1


def _indent_before(text: str, i: int) -> str | None:
    """The whitespace from the line's start to ``i``, or None when something else precedes ``i``."""
    head = text[_line_start(text, i):i]
    return head if head.strip(" \t") == "" else None


def _line_indent(text: str, i: int) -> str:
    start = _line_start(text, i)
    m = re.match(r"[ \t]*", text[start:])
    return m.group() if m else ""


def indent_unit(layout: JsonLayout) -> str:
    """One level of indentation as the file writes it (two spaces when no object says)."""
    text = layout.text
    for obj in layout.objects.values():
        if not obj.members:
            continue
        inner = _indent_before(text, layout.members[obj.members[0]].key_start)
        if inner is None:
            continue
        outer = _line_indent(text, obj.open)
        if len(inner) > len(outer) and inner.startswith(outer):
            return inner[len(outer):]
    return "  "


def _separator(layout: JsonLayout, obj: ObjectSpan) -> str:
    """What the object writes between a key and its value (``": "`` unless its members say)."""
    for path in obj.members:
        m = layout.members[path]
        sep = layout.text[m.key_end:m.value_start]
        if sep.strip() == ":" and "\n" not in sep:
            return sep
    return ": "


# ---------------------------------------------------------------------------------------- values

def number_text(value: float | int, like: str | None = None) -> str:
    """A JSON number for ``value``: integral values as integers, or as ``2e8`` when the number it
    replaces was written with an exponent (or, with none to follow, when it has six zeros or more);
    others as Python's shortest repr with the exponent's zeros dropped (``3e-5``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e16):
        digits = str(int(value))
        mantissa = digits.rstrip("0")
        zeros = len(digits) - len(mantissa)
        exponent = bool(_EXPONENT.search(like)) if like is not None else zeros >= 6
        if not exponent or zeros < 3 or mantissa in ("", "-"):
            return digits
        sign = "-" if mantissa.startswith("-") else ""
        mantissa = mantissa.lstrip("-")
        point = f"{mantissa[0]}.{mantissa[1:]}" if len(mantissa) > 1 else mantissa
        return f"{sign}{point}e{zeros + len(mantissa) - 1}"
    text = repr(float(value))
    return re.sub(r"e([-+]?)0*(\d)", r"e\1\2", text).replace("e+", "e")


def value_text(value: Any, indent: str, unit: str, nl: str, like: str | None = None,
               inline: bool = False) -> str:
    """``value`` as JSON text starting on a line indented by ``indent``: containers one member a
    line (``inline``: on one line), numbers in the spelling of the value they replace."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return number_text(value, like)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        items = [(json.dumps(str(k), ensure_ascii=False), v) for k, v in value.items()]
        if not items:
            return "{}"
        if inline:
            return "{" + ", ".join(f"{k}: {value_text(v, indent, unit, nl, inline=True)}"
                                   for k, v in items) + "}"
        inner = indent + unit
        return "{" + ",".join(f"{nl}{inner}{k}: {value_text(v, inner, unit, nl)}"
                              for k, v in items) + f"{nl}{indent}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[" + ", ".join(value_text(v, indent, unit, nl, inline=True) for v in value) + "]"
    raise SpliceError(f"cannot write a {type(value).__name__} as JSON")


def _reindent(raw: str, old: str, new: str) -> str:
    """A value's text moved from a line indented ``old`` to one indented ``new``."""
    lines = raw.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        out.append(new + line[len(old):] if line.startswith(old) else line)
    return "\n".join(out)


# ------------------------------------------------------------------------------------ the edits

def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def set_value(layout: JsonLayout, path: str, value: Any) -> str:
    """The text with the value of the existing member ``path`` replaced by ``value``."""
    m = layout.members[path]
    text = layout.text
    old = text[m.value_start:m.value_end]
    indent = _line_indent(text, m.key_start)
    new = value_text(value, indent, indent_unit(layout), newline_of(text), like=old,
                     inline="\n" not in old and isinstance(value, dict)
                     and _indent_before(text, m.key_start) is None)
    return _splice(text, m.value_start, m.value_end, new)


def rename_key(layout: JsonLayout, path: str, new_key: str) -> str:
    """The text with the key of member ``path`` spelled ``new_key`` (its value untouched)."""
    m = layout.members[path]
    return _splice(layout.text, m.key_start, m.key_end, json.dumps(new_key, ensure_ascii=False))


def _object_spans(layout: JsonLayout, obj: ObjectSpan) -> list[MemberSpan]:
    spans = [layout.members[p] for p in obj.members]
    spans += [s for p in obj.members for s in layout.shadowed.get(p, ())]
    return sorted(spans, key=lambda s: s.key_start)


def _comma_after(text: str, i: int) -> int | None:
    """The offset of the comma that follows a value ending at ``i`` (comments may sit between)."""
    m = _WS_COMMENTS.match(text, i)
    j = m.end() if m else i
    return j if j < len(text) and text[j] == "," else None


def _line_end(text: str, i: int) -> tuple[int, int] | None:
    """Where the line ending after ``i`` starts and ends, when only blanks and comments sit
    between; None when more JSON follows on that line."""
    m = _REST_OF_LINE.match(text, i)
    j = m.end() if m else i
    if text.startswith("\r\n", j):
        return j, j + 2
    if j < len(text) and text[j] in "\r\n":
        return j, j + 1
    return None


def delete_span(layout: JsonLayout, obj: ObjectSpan, span: MemberSpan) -> str:
    """The text without one member: its own lines when it has them, else just its bytes and
    one comma; the other members, their commas and comments stay."""
    text = layout.text
    spans = _object_spans(layout, obj)
    k = spans.index(span)
    prev = spans[k - 1] if k > 0 else None
    nxt = spans[k + 1] if k + 1 < len(spans) else None
    comma = _comma_after(text, span.value_end)
    tail = comma + 1 if comma is not None else span.value_end
    own = _indent_before(text, span.key_start) is not None
    eol = _line_end(text, tail) if own else None
    if eol is not None:  # the member has its lines: remove them whole
        start, end = _line_start(text, span.key_start), eol[1]
        if comma is None and prev is not None:  # the last member: the comma before it goes
            prev_comma = _comma_after(text, prev.value_end)
            if prev_comma is not None:
                return text[:prev_comma] + text[prev_comma + 1:start] + text[end:]
        return text[:start] + text[end:]
    if nxt is not None:
        return _splice(text, span.key_start, nxt.key_start, "")
    if prev is not None:
        prev_comma = _comma_after(text, prev.value_end)
        if prev_comma is not None:
            return _splice(text, prev_comma, tail, "")
    return _splice(text, span.key_start, tail, "")


def delete_member(layout: JsonLayout, path: str) -> str:
    """The text without the member ``path`` (its effective occurrence)."""
    parent = parent_of(path)
    return delete_span(layout, layout.objects[parent], layout.members[path])


def parent_of(path: str) -> str:
    """The dotted path of the object holding member ``path``."""
    parts = split_path(path)
    if any(isinstance(p, int) for p in parts):
        raise SpliceError(f"{path}: a path through a list is not edited")
    return ".".join(str(p) for p in parts[:-1])


def _nested(keys: list[str], leaf: Render, unit: str, nl: str) -> Render:
    """A renderer for ``{"k1": {"k2": ... leaf}}`` (the sections a set or move must create)."""
    if not keys:
        return leaf

    def render(indent: str, inline: bool) -> str:
        inner = indent if inline else indent + unit
        body = _nested(keys[1:], leaf, unit, nl)(inner, inline)
        member = f"{json.dumps(keys[0], ensure_ascii=False)}: {body}"
        return "{" + member + "}" if inline else f"{{{nl}{inner}{member}{nl}{indent}}}"
    return render


def insert_member(layout: JsonLayout, path: str, leaf: Render) -> str:
    """The text with member ``path`` added at the end of the deepest object that exists on its
    way, creating the sections between; indented like its siblings, or on their line when they
    share one."""
    parts = split_path(path)
    if any(isinstance(p, int) for p in parts) or not parts:
        raise SpliceError(f"{path}: a path through a list is not edited")
    keys = [str(p) for p in parts]
    depth = 0
    while depth < len(keys) - 1 and ".".join(keys[:depth + 1]) in layout.objects:
        depth += 1
    parent = ".".join(keys[:depth])
    obj = layout.objects.get(parent)
    if obj is None:
        raise SpliceError(f"{parent or path}: not an object in the config")
    if join_path(parent, keys[depth]) in layout.members:
        raise SpliceError(f"{join_path(parent, keys[depth])}: not an object in the config")
    text = layout.text
    nl, unit = newline_of(text), indent_unit(layout)
    sep = _separator(layout, obj)
    spans = _object_spans(layout, obj)
    last = spans[-1] if spans else None

    def member(indent: str, inline: bool) -> str:
        value = _nested(keys[depth + 1:], leaf, unit, nl)(indent, inline)
        return f"{json.dumps(keys[depth], ensure_ascii=False)}{sep}{value}"

    if last is None:  # an empty object: inside its braces
        if "\n" in text[obj.open:obj.close]:
            indent = _line_indent(text, obj.close) + unit
            return _splice(text, obj.open + 1, obj.open + 1, nl + indent + member(indent, False))
        return _splice(text, obj.open + 1, obj.open + 1, member("", True))
    comma = _comma_after(text, last.value_end)
    tail = comma + 1 if comma is not None else last.value_end
    own = _indent_before(text, last.key_start)
    eol = _line_end(text, tail) if own is not None else None
    if own is not None and eol is not None and eol[1] <= obj.close:
        at = eol[0]  # after the last member's comment, before its line ending
        new = nl + own + member(own, False) + ("," if comma is not None else "")
        text = _splice(text, at, at, new)
        return text if comma is not None else _splice(text, last.value_end, last.value_end, ",")
    new = ", " + member(_line_indent(text, last.key_start), True)
    return _splice(text, last.value_end, last.value_end, new)


def moved_value(layout: JsonLayout, path: str) -> Render:
    """A renderer for the value of member ``path`` as written (number spellings, comments kept),
    re-indented for its new place."""
    m = layout.members[path]
    text = layout.text
    raw = text[m.value_start:m.value_end]
    old = _line_indent(text, m.key_start)
    return lambda indent, inline: _reindent(raw, old, indent)


def rendered(value: Any, layout: JsonLayout) -> Render:
    """A renderer for a new value in the file's style."""
    unit, nl = indent_unit(layout), newline_of(layout.text)
    return lambda indent, inline: value_text(value, indent, unit, nl, inline=inline)
