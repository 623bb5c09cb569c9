"""Plain data out of a pickle, and nothing else: no class, no callable, no bomb.

PyTorch's Flight Recorder writes its per-rank dumps as pickles of dicts, lists, strings and numbers
(``torch/csrc/distributed/c10d/FlightRecorder.hpp``: ``dump`` returns a "stringified pickle"), and
torch's own reader (``flight_recorder/components/loader.py``) calls ``pickle.load`` on them, which
runs whatever a hostile file names. This loader accepts the plain subset only, in three layers:

1. every opcode is checked with ``pickletools.genops`` BEFORE anything is built: only opcodes that
   push scalars, build lists/tuples/dicts/sets or use the memo pass; any opcode that names a
   global, calls, builds an object, or reads a persistent id or an out-of-band buffer is refused
   with its byte offset;
2. the unpickler itself refuses ``find_class`` and ``persistent_load`` (defence in depth: layer 1
   already refused every opcode that would reach them);
3. the result is walked once with a node budget and a depth limit, and cycles are refused, so a
   small file cannot expand into billions of shared references ("billion laughs") or nest deeper
   than any dump does.

The input is bounded by its caller (``MAX_BYTES``) and read whole: ``pickle.loads`` on bytes
checks every declared length against what is there.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any

#: Larger than any Flight Recorder dump (2,000 entries with stack frames are a few MiB).
MAX_BYTES = 64 * 2**20
#: Containers nested deeper than this are refused (a dump nests 6 deep: entries, sizes, frames).
MAX_DEPTH = 32
#: Values visited when walking the result; shared references count each time they are reached.
MAX_NODES = 4_000_000

#: Opcodes that only push scalars, build plain containers, or move values on the stack and memo.
PLAIN_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET", "MEMOIZE",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET",
})
#: What a refused opcode would have done, for the error line.
_WHY = {"GLOBAL": "names a global", "STACK_GLOBAL": "names a global",
        "INST": "builds an object", "OBJ": "builds an object", "NEWOBJ": "builds an object",
        "NEWOBJ_EX": "builds an object", "REDUCE": "calls a callable",
        "BUILD": "sets an object's state", "EXT1": "names a registered global",
        "EXT2": "names a registered global", "EXT4": "names a registered global",
        "PERSID": "asks for a persistent object", "BINPERSID": "asks for a persistent object",
        "NEXT_BUFFER": "reads an out-of-band buffer", "READONLY_BUFFER": "reads an out-of-band buffer"}


class RefusedPickle(ValueError):
    """The pickle is not plain data (or not a pickle): the message says what it tried, where."""


class _NoClassUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"names the global {module}.{name}, which is never loaded")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("asks for a persistent object, which is never loaded")


def check_opcodes(data: bytes) -> None:
    """Refuse, without building anything, a pickle with any opcode outside PLAIN_OPCODES."""
    try:
        for op, arg, pos in pickletools.genops(io.BytesIO(data)):
            if op.name not in PLAIN_OPCODES:
                what = _WHY.get(op.name, "is not plain data")
                named = f" ({' '.join(str(arg).split())[:80]})" if op.name in ("GLOBAL", "INST") \
                    else ""
                raise RefusedPickle(f"opcode {op.name}{named} at byte {pos} {what}; only plain "
                                    "containers and scalars are read")
    except RefusedPickle:
        raise
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError) as exc:
        raise RefusedPickle(f"not a valid pickle ({_short(exc)})") from None


def loads_plain(data: bytes, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """The plain value a pickle holds (dict, list, tuple, set, str, bytes, int, float, bool, None).

    Raises RefusedPickle, with one line, for anything else: a global, a call, an object, a
    persistent id, nesting deeper than ``max_depth``, more than ``max_nodes`` values (shared
    references counted each time), a cycle, a damaged or truncated pickle, more than MAX_BYTES.
    """
    if len(data) > MAX_BYTES:
        raise RefusedPickle(f"{len(data)} bytes is more than the {MAX_BYTES} read from a dump")
    check_opcodes(data)
    try:
        value = _NoClassUnpickler(io.BytesIO(data)).load()
    except RefusedPickle:
        raise
    except (pickle.UnpicklingError, ValueError, EOFError, UnicodeDecodeError, OverflowError,
            IndexError, KeyError, TypeError, MemoryError) as exc:
        raise RefusedPickle(f"not a valid pickle ({_short(exc)})") from None
    _walk(value, max_depth, max_nodes)
    return value


def _walk(value: Any, max_depth: int, max_nodes: int) -> None:
    """Depth, size and cycle limits over the built value (iterative: no recursion to exhaust)."""
    budget = max_nodes
    stack: list[tuple[Any, int, tuple[int, ...]]] = [(value, 1, ())]
    while stack:
        v, depth, path = stack.pop()
        budget -= 1
        if budget < 0:
            raise RefusedPickle(f"holds more than {max_nodes} values (shared references counted "
                                "each time): refused as a decompression bomb")
        if isinstance(v, (str, bytes, bytearray, int, float, bool)) or v is None:
            continue
        if not isinstance(v, (dict, list, tuple, set, frozenset)):
            raise RefusedPickle(f"holds a {type(v).__name__}, not plain data")
        if depth > max_depth:
            raise RefusedPickle(f"nests containers deeper than {max_depth} levels")
        if id(v) in path:
            raise RefusedPickle("holds a container that contains itself (a cycle)")
        inner = (*path, id(v))
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else list(v)
        stack.extend((x, depth + 1, inner) for x in items)


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


__all__ = ["MAX_BYTES", "MAX_DEPTH", "PLAIN_OPCODES", "RefusedPickle", "check_opcodes",
           "loads_plain"]
