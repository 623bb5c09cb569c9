"""PyTorch Flight Recorder dumps: recognise them, read them (JSON, or plain-only pickle), type them.

With ``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) set, every process group
records its recent collectives in a ring buffer (torch/csrc/distributed/c10d/FlightRecorder.hpp);
ProcessGroupNCCL's watchdog writes it on a timeout to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (or
``TORCH_FR_DUMP_TEMP_FILE``) + the rank, as a pickle; ``torch._C._distributed_c10d._dump_fr_trace``
returns the same pickle and ``_dump_fr_trace_json`` a JSON form (no stack frames). The dump does
not say which rank wrote it: like torch's ``fr_trace`` (components/loader.py) the rank is the
number the file name ends with.

Dump keys (FlightRecorder.hpp's constants, version "2.10" in torch 2.13): ``version``,
``pg_config`` {pg name: {name, desc, ranks: "[0, 1]"}}, ``pg_status`` {pg id:
{last_enqueued_collective, last_started_collective, last_completed_collective}}, ``entries``
[{record_id, pg_id, process_group: (name, desc), collective_seq_id, p2p_seq_id, is_p2p, op_id,
profiling_name "nccl:all_reduce", input_sizes, input_dtypes, output_sizes, output_dtypes,
time_created_ns, timeout_ms, state, frames: [{name, filename, line}], ...}].
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.logs.plainpickle import MAX_BYTES, RefusedPickle, loads_plain
from dsdoctor.logs.rankfacts import Frame
from dsdoctor.safeio import one_line, read_bounded

#: torch's fr_trace takes the rank from the digits that end the file name (loader.py ``exp``).
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
#: ``[0, 1, 2]`` as pg_config writes a group's ranks (a string, not a list).
_RANK_LIST = re.compile(r"^\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]$")
#: Keys every dump has (FlightRecorder.hpp), looked for in a file's first bytes to recognise it.
_KEYS = (b"pg_config", b"entries", b"version")


@dataclass(frozen=True)
class FREntry:
    """One recorded collective (or point-to-point op) of one rank."""

    record_id: int
    pg_name: str  # the process group's name (its uid: "0" for the default group)
    pg_desc: str  # "default_pg", or what new_group(group_desc=...) said
    seq: int  # collective_seq_id (p2p ops: p2p_seq_id)
    is_p2p: bool
    backend: str  # "nccl", "gloo", ...
    op: str  # "all_reduce", "send", "coalesced", ...
    peer: str  # the "1->2" / "3<-0" of a send/recv, else ""
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # scheduled | started | completed
    frames: tuple[Frame, ...] = ()  # outermost first (pickle dumps with stack traces only)
    time_created_ns: int | None = None

    @property
    def name(self) -> str:
        return f"{self.op} {self.peer}".strip()

    def describe(self) -> str:
        """``all_reduce [[8]] Float``."""
        sizes = "" if not self.input_sizes else " " + str([list(s) for s in self.input_sizes])
        dtypes = f" {','.join(sorted(set(self.input_dtypes)))}" if self.input_dtypes else ""
        return f"{self.name}{sizes}{dtypes}"


@dataclass(frozen=True)
class FRGroup:
    """A process group as one dump describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class FRDump:
    """One rank's Flight Recorder dump."""

    path: str
    rank: int
    version: str
    groups: Mapping[str, FRGroup]  # by pg name ("" when gloo recorded no name)
    entries: tuple[FREntry, ...]  # in record_id order
    last_enqueued: Mapping[str, int]  # pg id -> pg_status's last enqueued collective
    last_completed: Mapping[str, int]
    fmt: str  # "json" | "pickle"


def looks_like_dump(path: str) -> bool:
    """Whether a file is a Flight Recorder dump: a pickle or JSON object whose first bytes hold
    the dump's keys. Reads at most 64 KiB; never unpickles."""
    # one open, one fstat, one read: this runs on every LOG of analyze (100,000 of them in
    # one command line); a FIFO or a device is no dump and is not read here
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 65536)
    except OSError:
        return False
    finally:
        os.close(fd)
    pickle_head = head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
    json_head = head.lstrip()[:1] == b"{"
    return (pickle_head or json_head) and all(k in head for k in _KEYS)


def rank_of(path: str) -> int:
    m = _RANK_SUFFIX.search(os.path.basename(path))
    if m is None:
        raise UsageError(f"{one_line(path)}: a Flight Recorder dump whose name does not end with "
                         "its rank (torch writes <prefix><rank>, e.g. nccl_trace_rank_3); "
                         "rename it so")
    return int(m.group(1))


def read_dump(path: str) -> FRDump:
    """One dump, typed. UsageError (one line) for anything that is not a plain dump."""
    shown = one_line(path)
    data = read_bounded(path, MAX_BYTES, "Flight Recorder dump",
                        "pass the per-rank dump files torch wrote (or their folder)")
    rank = rank_of(path)
    if data.lstrip()[:1] != b"{":  # not JSON: a pickle, read by the plain-only loader
        fmt = "pickle"
        try:
            raw = loads_plain(data)
        except RefusedPickle as exc:
            raise UsageError(f"{shown}: refused: {exc} (dsdoctor never runs code from a "
                             "pickle); pass the dump torch wrote, or its JSON form") from None
    else:
        fmt = "json"
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UsageError(f"{shown}: not a Flight Recorder dump (neither a pickle nor JSON: "
                             f"{' '.join(str(exc).split())[:80]})") from None
    try:
        return _typed(path, rank, raw, fmt)
    except _Malformed as exc:
        raise UsageError(f"{shown}: not a Flight Recorder dump ({exc}); pass the files torch "
                         "wrote with TORCH_FR_BUFFER_SIZE set") from None


class _Malformed(ValueError):
    pass


def _get(d: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise _Malformed(f"{where} has no {key!r}")
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        raise _Malformed(f"{where}[{key!r}] is a {type(v).__name__}")
    return v


def _int(v: Any, where: str) -> int:
    # JSON dumps write pg_status numbers as strings ("5"), pickles as ints
    if isinstance(v, bool):
        raise _Malformed(f"{where} is a bool")
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,19}", v):
        return int(v)
    raise _Malformed(f"{where} is not a whole number")


def _sizes(v: Any, where: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(v, (list, tuple)):
        raise _Malformed(f"{where} is not a list")
    out = []
    for s in v:
        if not isinstance(s, (list, tuple)) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in s):
            raise _Malformed(f"{where} holds a size that is not a list of numbers")
        out.append(tuple(s))
    return tuple(out)


def _strs(v: Any, where: str) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise _Malformed(f"{where} is not a list of strings")
    return tuple(v)


def _frames(v: Any) -> tuple[Frame, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    out = []
    for f in v:
        if isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(
                f.get("name"), str) and isinstance(f.get("line"), int):
            out.append(Frame(f["filename"], f["line"], f["name"]))
    # torch records the innermost frame first (a C++ unwind); Frame lists here are outermost first
    return tuple(reversed(out))


def _entry(e: Any, i: int) -> FREntry:
    where = f"entries[{i}]"
    pg = _get(e, "process_group", (list, tuple), where)
    if len(pg) != 2 or not all(isinstance(x, str) for x in pg):
        raise _Malformed(f"{where}['process_group'] is not (name, desc)")
    profiling = _get(e, "profiling_name", str, where)
    backend, _, name = profiling.partition(":")
    op, _, peer = name.partition(" ")
    is_p2p = bool(e.get("is_p2p", False))
    seq_key = "p2p_seq_id" if is_p2p else "collective_seq_id"
    created = e.get("time_created_ns")
    return FREntry(
        record_id=_int(_get(e, "record_id", (int, str), where), f"{where}['record_id']"),
        pg_name=pg[0], pg_desc=pg[1],
        seq=_int(_get(e, seq_key, (int, str), where), f"{where}[{seq_key!r}]"),
        is_p2p=is_p2p, backend=backend, op=op or backend, peer=peer,
        input_sizes=_sizes(e.get("input_sizes", []), f"{where}['input_sizes']"),
        output_sizes=_sizes(e.get("output_sizes", []), f"{where}['output_sizes']"),
        input_dtypes=_strs(e.get("input_dtypes", []), f"{where}['input_dtypes']"),
        output_dtypes=_strs(e.get("output_dtypes", []), f"{where}['output_dtypes']"),
        state=str(e.get("state", "")), frames=_frames(e.get("frames")),
        time_created_ns=created if isinstance(created, int) and not isinstance(created, bool)
        else None)


def _groups(pg_config: Any) -> dict[str, FRGroup]:
    if not isinstance(pg_config, dict):
        raise _Malformed("pg_config is not a mapping")
    out = {}
    for key, cfg in pg_config.items():
        if not isinstance(key, str) or not isinstance(cfg, dict):
            raise _Malformed("pg_config holds an entry that is not {name: {...}}")
        ranks = cfg.get("ranks", "[]")
        if isinstance(ranks, str):
            # never eval: a strict "[0, 1, 2]" (torch's builder.py eval()s this string)
            if not _RANK_LIST.match(ranks.strip()):
                raise _Malformed(f"pg_config[{key!r}]['ranks'] is not a list of ranks")
            members = tuple(int(r) for r in re.findall(r"\d+", ranks))
        elif isinstance(ranks, (list, tuple)) and all(
                isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            members = tuple(ranks)
        else:
            raise _Malformed(f"pg_config[{key!r}]['ranks'] is not a list of ranks")
        out[key] = FRGroup(key, str(cfg.get("desc", "")), members)
    return out


def _typed(path: str, rank: int, raw: Any, fmt: str) -> FRDump:
    if not isinstance(raw, dict):
        raise _Malformed(f"the top level is a {type(raw).__name__}, not a mapping")
    version = _get(raw, "version", str, "the dump")
    groups = _groups(_get(raw, "pg_config", dict, "the dump"))
    entries = tuple(sorted((_entry(e, i) for i, e in enumerate(raw.get("entries", []) or [])),
                           key=lambda e: e.record_id))
    enq: dict[str, int] = {}
    done: dict[str, int] = {}
    status = raw.get("pg_status", {})
    if isinstance(status, dict):
        for pg, st in status.items():
            if isinstance(st, dict):
                if "last_enqueued_collective" in st:
                    enq[str(pg)] = _int(st["last_enqueued_collective"], "pg_status")
                if "last_completed_collective" in st:
                    done[str(pg)] = _int(st["last_completed_collective"], "pg_status")
    return FRDump(path=path, rank=rank, version=version, groups=groups, entries=entries,
                  last_enqueued=enq, last_completed=done, fmt=fmt)


def dump_paths(paths: list[str] | tuple[str, ...]) -> list[str]:
    """The dump files named: files as given, folders walked one level deep (sorted).

    A folder's files that are not dumps are skipped; a file named explicitly must be one."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, n) for n in os.listdir(p)
                           if os.path.isfile(os.path.join(p, n))
                           and looks_like_dump(os.path.join(p, n)))
            if not found:
                raise UsageError(f"{one_line(p)}: no Flight Recorder dump in this folder (torch "
                                 "writes one file per rank when TORCH_FR_BUFFER_SIZE is set)")
            out += found
        elif not os.path.exists(p):
            raise UsageError(f"{one_line(p)}: no such file or folder; check the --trace path")
        else:
            out.append(p)
    return out


def read_dumps(paths: list[str] | tuple[str, ...]) -> tuple[FRDump, ...]:
    """Every dump named (files or folders), one per rank; UsageError on a rank given twice."""
    dumps: dict[int, FRDump] = {}
    for p in dump_paths(paths):
        d = read_dump(p)
        if d.rank in dumps:
            raise UsageError(f"{one_line(p)}: a second dump of rank {d.rank} (the first: "
                             f"{one_line(dumps[d.rank].path)}); pass one run's dumps")
        dumps[d.rank] = d
    return tuple(dumps[r] for r in sorted(dumps))


__all__ = ["FRDump", "FREntry", "FRGroup", "dump_paths", "looks_like_dump", "rank_of",
           "read_dump", "read_dumps"]
