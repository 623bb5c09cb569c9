"""Load a DeepSpeed JSON config or an Accelerate YAML config, keeping where every key is.

Every key is addressed by a *dotted path* (``zero_optimization.offload_param.device``; list
items as ``optimizer.params.betas[0]``) and remembers its line and column, so a finding can
point at ``ds_config.json:12``. Duplicate keys are recorded (DeepSpeed refuses such a config;
the DS301 rule reports it) instead of being silently collapsed.

Nothing is ever executed: JSON goes through a small position-tracking parser written here (it
also accepts the comments and trailing commas that DeepSpeed's hjson loader tolerates), YAML
through PyYAML's ``SafeLoader`` node composer only. Bad input raises
:class:`dsdoctor.errors.UsageError` with ``file:line:col: what is wrong``.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
from array import array
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in typeshed
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.facts.inputs import cached
from dsdoctor.safeio import read_bounded

#: Deeper than this is not a config, it is an attack or a bug; refuse before recursing further.
MAX_DEPTH = 100
#: Cap on YAML nodes walked (aliases can expand exponentially: "billion laughs").
MAX_NODES = 200_000
#: Configs are small; refuse huge files rather than spend minutes on them.
MAX_BYTES = 32 * 1024 * 1024

_MISSING = object()

#: Top-level keys that identify an Accelerate config file (``accelerate config`` writes these).
ACCELERATE_MARKERS = frozenset({
    "compute_environment", "distributed_type", "deepspeed_config", "fsdp_config",
    "mixed_precision", "num_processes", "machine_rank", "main_training_function",
    "use_cpu", "num_machines", "downcast_bf16", "dynamo_config", "megatron_lm_config",
})


@dataclass(frozen=True)
class KeyPos:
    """Where a key (or a list item) is written: file, 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Duplicate:
    """A key written twice in the same object; ``first`` is the earlier occurrence."""

    path: str
    pos: KeyPos
    first: KeyPos


@dataclass
class ConfigDoc:
    """A parsed config with the position of every key.

    ``kind`` is ``"deepspeed"`` or ``"accelerate"``. For an Accelerate config, ``deepspeed`` is
    the DeepSpeed config it uses: the JSON file named by ``deepspeed_config.deepspeed_config_file``
    (loaded and positioned in that file), or a config synthesized from the ``deepspeed_config``
    keys the way Accelerate builds it (its positions point at the YAML lines), or None.
    """

    path: str
    kind: str
    data: dict[str, Any]
    positions: dict[str, KeyPos] = field(default_factory=dict)
    duplicates: tuple[Duplicate, ...] = ()
    deepspeed: ConfigDoc | None = None
    synthesized: bool = False  # True when built from Accelerate keys rather than read from a file
    # For a synthesized config: DeepSpeed path -> the Accelerate key it came from.
    source_keys: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def get(self, path: str, default: Any = None) -> Any:
        """Value at a dotted path, or ``default`` when any part is missing."""
        return lookup(self.data, path, default)

    def has(self, path: str) -> bool:
        """True when the dotted path exists (even with a null value)."""
        return lookup(self.data, path, _MISSING) is not _MISSING

    def locate(self, path: str) -> KeyPos | None:
        """Position of the key at ``path``, or of its nearest written ancestor."""
        while path:
            pos = self.positions.get(path)
            if pos is not None:
                return pos
            path = parent_path(path)
        return None

    def line(self, path: str) -> int | None:
        """1-based line of the key at ``path`` (or of its nearest written ancestor)."""
        pos = self.locate(path)
        return pos.line if pos else None


# ----------------------------------------------------------------------------------------- paths

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list[str | int]:
    """``"a.b[2].c"`` -> ``["a", "b", 2, "c"]``."""
    parts: list[str | int] = []
    for m in _PATH_PART.finditer(path):
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
    return parts


def join_path(prefix: str, key: str | int) -> str:
    """Extend a dotted path with a key or a list index."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def parent_path(path: str) -> str:
    """``"a.b[2]"`` -> ``"a.b"``; ``"a"`` -> ``""``."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def lookup(data: Any, path: str, default: Any = None) -> Any:
    """Value at a dotted path inside nested dicts/lists, or ``default``."""
    cur = data
    for part in split_path(path):
        if isinstance(part, int):
            if isinstance(cur, list) and 0 <= part < len(cur):
                cur = cur[part]
                continue
            return default
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
            continue
        return default
    return cur


# ------------------------------------------------------------------------------------------ JSON

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WS_COMMENTS = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*|/\*.*?\*/)*", re.S)
_NEWLINE = re.compile("\n")
_WS_START = frozenset(" \t\r\n/#\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0")  # what may begin _WS_COMMENTS
# Positions kept of array elements: the first ones of each array, and so many per file (an
# array of a million numbers, or of rows, is data, not settings; an element without a position
# is located at its array's key, see ConfigDoc.locate). Object keys always keep theirs.
MAX_ARRAY_POSITIONS = 100
MAX_ARRAY_POSITIONS_PER_FILE = 10_000
_LITERALS = {"true": True, "false": False, "null": None,
             "NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


@dataclass(frozen=True)
class MemberSpan:
    """Where one ``"key": value`` member is written, as offsets into the decoded text:
    the key's quotes ``[key_start, key_end)`` and the value ``[value_start, value_end)``."""

    key_start: int
    key_end: int
    value_start: int
    value_end: int


@dataclass(frozen=True)
class ObjectSpan:
    """Where one object is written: ``{`` at ``open``, ``}`` at ``close``, and its members'
    dotted paths in the order written (the effective occurrence of each key)."""

    open: int
    close: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class JsonLayout:
    """A JSON text with where each member and object is written (``--fix-out`` edits the text at
    these offsets, so every byte it does not fix stays as the user wrote it).

    ``members`` holds the occurrence that counts (the last, as ``json.load``); ``shadowed`` the
    earlier occurrences of a duplicated key, whose subtrees are not in ``members`` or ``objects``.
    """

    file: str
    text: str
    data: dict[str, Any]
    members: dict[str, MemberSpan]
    objects: dict[str, ObjectSpan]
    shadowed: dict[str, tuple[MemberSpan, ...]]


class _JsonParser:
    """Recursive-descent JSON parser recording every key's position (no eval, depth-capped);
    with ``spans``, also where each member's key and value and each object are written."""

    def __init__(self, text: str, file: str, spans: bool = False) -> None:
        self.text = text
        self.file = file
        self.positions: dict[str, KeyPos] = {}
        self.duplicates: list[Duplicate] = []
        self._nl = array("q", (m.start() for m in _NEWLINE.finditer(text)))  # 8 bytes a line
        self._array_positions = 0
        self.spans = spans
        self.members: dict[str, MemberSpan] = {}
        self.objects: dict[str, ObjectSpan] = {}
        self.shadowed: dict[str, list[MemberSpan]] = {}

    def pos(self, offset: int) -> KeyPos:
        line = bisect.bisect_left(self._nl, offset)
        col = offset - (self._nl[line - 1] + 1 if line else 0)
        return KeyPos(self.file, line + 1, col + 1)

    def fail(self, offset: int, what: str) -> UsageError:
        p = self.pos(min(offset, len(self.text)))
        return UsageError(f"{p}: {what}; this is not valid DeepSpeed JSON, fix the file and retry")

    def ws(self, i: int) -> int:
        if i < len(self.text) and self.text[i] not in _WS_START and not self.text[i].isspace():
            return i  # nothing to skip (most calls): no regex
        m = _WS_COMMENTS.match(self.text, i)  # matches the empty string: never None
        return m.end() if m is not None else i

    def parse(self) -> dict[str, Any]:
        i = self.ws(0)
        if i >= len(self.text):
            raise self.fail(i, "the file is empty")
        if self.text[i] != "{":
            raise self.fail(i, "the top level must be a JSON object ({...})")
        value, i = self.value(i, "", 1)
        i = self.ws(i)
        if i < len(self.text):
            raise self.fail(i, "extra data after the top-level object")
        return value

    def value(self, i: int, path: str, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise self.fail(i, f"nested deeper than {MAX_DEPTH} levels")
        text = self.text
        if i >= len(text):
            raise self.fail(i, "unexpected end of file")
        ch = text[i]
        if ch == "{":
            return self.obj(i, path, depth)
        if ch == "[":
            return self.arr(i, path, depth)
        if ch == '"':
            return self.string(i)
        m = _NUMBER.match(text, i)
        if m:
            s = m.group()
            if len(s) > 4000:  # int() refuses over 4,300 digits (quadratic-time guard)
                raise self.fail(i, f"a number of {len(s)} digits; a config value is not that long")
            return (float(s) if "." in s or "e" in s or "E" in s else int(s)), m.end()
        for lit, val in _LITERALS.items():
            if text.startswith(lit, i):
                return val, i + len(lit)
        raise self.fail(i, f"unexpected character {ch!r}")

    def string(self, i: int) -> tuple[str, int]:
        try:
            return scanstring(self.text, i + 1, True)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.pos, exc.msg.lower()) from None

    def _forget(self, path: str) -> None:
        """Drop the spans recorded under a shadowed occurrence of ``path`` (its subtree)."""
        for table in (self.members, self.objects, self.shadowed):
            for p in [p for p in table if p.startswith((path + ".", path + "["))]:
                del table[p]
        self.objects.pop(path, None)

    def _member(self, path: str, span: MemberSpan) -> None:
        earlier = self.members.get(path)
        if earlier is not None:
            self.shadowed.setdefault(path, []).append(earlier)
        self.members[path] = span

    def obj(self, i: int, path: str, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        opened = i
        order: dict[str, None] = {}
        i = self.ws(i + 1)
        if i < len(self.text) and self.text[i] == "}":
            if self.spans:
                self.objects[path] = ObjectSpan(opened, i, ())
            return out, i + 1
        while True:
            if i >= len(self.text) or self.text[i] != '"':
                if i < len(self.text) and self.text[i] == "}":  # trailing comma (hjson accepts it)
                    if self.spans:
                        self.objects[path] = ObjectSpan(opened, i, tuple(order))
                    return out, i + 1
                raise self.fail(i, "expected a double-quoted key")
            key_at = i
            key, i = self.string(i)
            key_end = i
            i = self.ws(i)
            if i >= len(self.text) or self.text[i] != ":":
                raise self.fail(i, f"expected ':' after key {key!r}")
            kpath = join_path(path, key)
            kpos = self.pos(key_at)
            if key in out:
                self.duplicates.append(Duplicate(kpath, kpos, self.positions.get(kpath, kpos)))
            else:
                self.positions[kpath] = kpos
            value_at = self.ws(i + 1)
            if self.spans and key in out:
                self._forget(kpath)
            value, i = self.value(value_at, kpath, depth + 1)
            out[key] = value  # last one wins, like json.load; the duplicate is reported
            if self.spans:
                self._member(kpath, MemberSpan(key_at, key_end, value_at, i))
                order.pop(kpath, None)
                order[kpath] = None
            i = self.ws(i)
            if i < len(self.text) and self.text[i] == ",":
                i = self.ws(i + 1)
                continue
            if i < len(self.text) and self.text[i] == "}":
                if self.spans:
                    self.objects[path] = ObjectSpan(opened, i, tuple(order))
                return out, i + 1
            raise self.fail(i, "expected ',' or '}'")

    def arr(self, i: int, path: str, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        i = self.ws(i + 1)
        if i < len(self.text) and self.text[i] == "]":
            return out, i + 1
        while True:
            if i < len(self.text) and self.text[i] == "]":  # trailing comma
                return out, i + 1
            ipath = join_path(path, len(out))
            if len(out) < MAX_ARRAY_POSITIONS \
                    and self._array_positions < MAX_ARRAY_POSITIONS_PER_FILE:
                self._array_positions += 1
                self.positions[ipath] = self.pos(i)
            value, i = self.value(i, ipath, depth + 1)
            out.append(value)
            i = self.ws(i)
            if i < len(self.text) and self.text[i] == ",":
                i = self.ws(i + 1)
                continue
            if i < len(self.text) and self.text[i] == "]":
                return out, i + 1
            raise self.fail(i, "expected ',' or ']'")


def parse_json(text: str, file: str) -> tuple[dict[str, Any], dict[str, KeyPos], list[Duplicate]]:
    """Parse JSON text into (data, positions, duplicates); raises UsageError on bad input."""
    p = _JsonParser(text, file)
    data = p.parse()
    return data, p.positions, p.duplicates


def json_layout(text: str, file: str) -> JsonLayout:
    """Parse JSON text keeping where each member and object is written; UsageError on bad input."""
    p = _JsonParser(text, file, spans=True)
    data = p.parse()
    return JsonLayout(file, text, data, p.members, p.objects,
                      {k: tuple(v) for k, v in p.shadowed.items()})


# ------------------------------------------------------------------------------------------ YAML

def parse_yaml(text: str, file: str) -> tuple[dict[str, Any], dict[str, KeyPos], list[Duplicate]]:
    """Parse YAML (SafeLoader nodes only) into (data, positions, duplicates)."""
    import yaml  # PyYAML is a dependency; imported here to keep JSON-only runs light

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise UsageError(f"{file}: nested too deeply; this is not a config file") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise UsageError(f"{where}: {exc.problem or exc.context}; "
                         "this is not valid YAML, fix the file and retry") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{file}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if root is None:
        raise UsageError(f"{file}:1:1: the file is empty; give a DeepSpeed JSON or Accelerate YAML config")
    if not isinstance(root, yaml.MappingNode):
        m = root.start_mark
        raise UsageError(f"{file}:{m.line + 1}:{m.column + 1}: the top level must be a mapping "
                         "(key: value), not a list or a scalar")
    positions: dict[str, KeyPos] = {}
    duplicates: list[Duplicate] = []
    budget = [MAX_NODES]
    constructor = yaml.SafeLoader("")  # only used to convert scalars with the safe resolver rules

    def kpos(node: Any) -> KeyPos:
        return KeyPos(file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(node: Any, path: str, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise UsageError(f"{kpos(node)}: more than {MAX_NODES} YAML nodes (alias bomb?); "
                             "give a plain config file")
        if depth > MAX_DEPTH:
            raise UsageError(f"{kpos(node)}: nested deeper than {MAX_DEPTH} levels; "
                             "this is not a config file")
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in (
                "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
            # e.g. !!python/object/apply: never constructed; refuse rather than guess.
            raise UsageError(f"{kpos(node)}: unsupported YAML tag {node.tag}; a config holds "
                             "plain mappings, lists and values")
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    raise UsageError(f"{kpos(knode)}: a mapping key must be a plain value")
                if knode.tag == "tag:yaml.org,2002:merge":
                    raise UsageError(f"{kpos(knode)}: YAML merge keys (<<) are not supported; "
                                     "write the merged keys out in the config")
                key = scalar(knode)
                skey = str(key)
                p = join_path(path, skey)
                if key in out:
                    duplicates.append(Duplicate(p, kpos(knode), positions.get(p, kpos(knode))))
                else:
                    positions[p] = kpos(knode)
                out[key] = build(vnode, p, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for idx, item in enumerate(node.value):
                p = join_path(path, idx)
                positions[p] = kpos(item)
                items.append(build(item, p, depth + 1))
            return items
        return scalar(node)

    def scalar(node: Any) -> Any:
        """A scalar by the safe resolver; bad tags, ``!!int abc``, huge ints are one line."""
        try:
            value = constructor.construct_object(node)
            hash(value)
            return value
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UsageError(f"{kpos(node)}: {problem}; a config holds plain values") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise UsageError(f"{kpos(node)}: bad value for tag {node.tag} "
                             f"({str(exc)[:80]}); fix the value") from None

    data = build(root, "", 1)
    return data, positions, duplicates


# ----------------------------------------------------------------------------------- the loader

def config_bytes(path: str) -> bytes:
    """A config file's bytes, read once per process (the analysis parses them, ``report`` quotes
    them as written). A FIFO or device is refused before reading; the read stops at MAX_BYTES
    (issue 14, item 4)."""
    return cached("config-bytes", path, functools.partial(
        read_bounded, limit=MAX_BYTES, what="--config",
        hint="give the DeepSpeed JSON or Accelerate YAML config file itself", noun="config file"))


def _read_text(path: str) -> str:
    raw = config_bytes(path)
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise UsageError(f"{path}:{line}:1: binary data (NUL byte); give a DeepSpeed JSON "
                         "or Accelerate YAML text file")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}:1: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                         "give a DeepSpeed JSON or Accelerate YAML text file") from None


def looks_like_accelerate(data: dict[str, Any]) -> bool:
    """True for a mapping written by ``accelerate config``."""
    return bool(ACCELERATE_MARKERS & set(map(str, data)))


def load_config(path: str | os.PathLike[str], *, _depth: int = 0) -> ConfigDoc:
    """Load a DeepSpeed JSON or an Accelerate YAML config (detected by content).

    Raises :class:`UsageError` (``file:line:col: what is wrong``) for unreadable, unparsable,
    non-object, too deeply nested or binary input. Duplicate keys are kept in ``duplicates``.
    """
    path = os.fspath(path)
    text = _read_text(path)
    stripped = text.lstrip()
    # JSON first when it looks like JSON: YAML would accept most of it but lose duplicates' sense
    # and reject the comments DeepSpeed's hjson loader tolerates.
    if stripped.startswith("{") or path.endswith(".json"):
        data, positions, dups = parse_json(text, path)
    else:
        data, positions, dups = parse_yaml(text, path)
    if looks_like_accelerate(data):
        doc = ConfigDoc(path, "accelerate", data, positions, tuple(dups))
        doc.deepspeed = _accelerate_deepspeed(doc, _depth)
        return doc
    return ConfigDoc(path, "deepspeed", data, positions, tuple(dups))


# Accelerate's deepspeed_config keys -> the DeepSpeed keys Accelerate fills from them
# (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__).
_ACCEL_TO_DS: dict[str, str] = {
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = [p for p in split_path(path) if isinstance(p, str)]
    cur = data
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value


def _accelerate_deepspeed(doc: ConfigDoc, depth: int) -> ConfigDoc | None:
    """The DeepSpeed config an Accelerate config uses (its file, or synthesized from its keys)."""
    section = doc.data.get("deepspeed_config")
    if not isinstance(section, dict):
        return None
    ref = section.get("deepspeed_config_file")
    if isinstance(ref, str) and ref.strip() and ref.strip().lower() != "none":
        if depth > 0:
            raise UsageError(f"{doc.locate('deepspeed_config.deepspeed_config_file')}: "
                             "a DeepSpeed config file cannot point to another config")
        candidates = [ref] if os.path.isabs(ref) else [
            os.path.join(os.path.dirname(os.path.abspath(doc.path)), ref), ref]
        for cand in candidates:
            if os.path.isfile(cand):
                child = load_config(cand, _depth=depth + 1)
                if child.kind != "deepspeed":
                    raise UsageError(f"{cand}: deepspeed_config_file must be a DeepSpeed JSON "
                                     "config, not an Accelerate config")
                return child
        doc.notes.append(f"{doc.path}: deepspeed_config_file {ref!r} not found (looked next to "
                         "the YAML and in the current directory); give it with --config too")
        return None
    # No file: Accelerate builds the DeepSpeed config from these keys.
    ds: dict[str, Any] = {}
    positions: dict[str, KeyPos] = {}
    sources: dict[str, str] = {}
    for akey, dspath in _ACCEL_TO_DS.items():
        sources[dspath] = f"deepspeed_config.{akey}"
        if akey in section and section[akey] is not None:
            value = section[akey]
            if akey.endswith("_device") and value == "none":
                continue
            _set_path(ds, dspath, value)
            pos = doc.positions.get(f"deepspeed_config.{akey}")
            if pos:
                positions[dspath] = pos
    # A finding on a section Accelerate built from one key points at that key.
    sources["zero_optimization.offload_param"] = "deepspeed_config.offload_param_device"
    sources["zero_optimization.offload_optimizer"] = "deepspeed_config.offload_optimizer_device"
    sources["fp16.enabled"] = sources["bf16.enabled"] = "mixed_precision"
    sources["fp16"] = sources["bf16"] = "mixed_precision"
    mp = doc.data.get("mixed_precision")
    if mp in ("fp16", "bf16"):
        ds[mp] = {"enabled": True}
        pos = doc.positions.get("mixed_precision")
        if pos:
            positions[mp] = positions[f"{mp}.enabled"] = pos
    for dspath, pos in list(positions.items()):  # parents point at their first child's line
        p = parent_path(dspath)
        while p:
            positions.setdefault(p, pos)
            p = parent_path(p)
    if not ds:
        return None
    return ConfigDoc(doc.path, "deepspeed", ds, positions, (), synthesized=True, source_keys=sources)
