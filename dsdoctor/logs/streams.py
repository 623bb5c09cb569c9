"""Byte streams under the scanner: a peeked head put back, decompression, UTF-16/32 to UTF-8.

Every wrapper reads forward only (pipes, ``<(...)`` and ``/dev/stdin`` cannot seek), produces
output in bounded pieces (a decompression bomb never inflates more than one piece at a time), and
says in ``notes`` what it had to drop (a truncated stream, trailing garbage).
"""

from __future__ import annotations

import bz2
import codecs
import io
import lzma
import zlib
from typing import BinaryIO

#: Most bytes one decompression step may produce (bounds memory on a bomb).
PIECE_BYTES = 1 << 20
#: Bounds on the whole decompressed output (work on a bomb; docs/security.md): past the first
#: DECOMPRESSED_FREE_BYTES, output may be at most MAX_RATIO times the compressed bytes read (text
#: logs compress 5-50x; 10 GiB of one repeated line in bz2 is 10^5x and more), and never more
#: than MAX_DECOMPRESSED_BYTES. What was decompressed before a bound is analyzed, with a note.
DECOMPRESSED_FREE_BYTES = 256 << 20
MAX_RATIO = 1000
MAX_DECOMPRESSED_BYTES = 64 << 30
#: Compressed bytes read at once (gzip, bz2, xz): small, so that the ratio is checked against
#: what was actually read, not a megabyte read ahead.
INPUT_BYTES = 64 << 10

GZIP_MAGIC = b"\x1f\x8b"
BZ2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# RFC 8878 3.1.2: skippable frames (magic 0x184D2A50-0x184D2A5F, a 4-byte little-endian size,
# then that many bytes of user data) may come before, between and after zstd frames.


def _zstd_skippable(head: bytes) -> bool:
    return len(head) >= 4 and 0x50 <= head[0] <= 0x5F and head[1:4] == b"\x2a\x4d\x18"


def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes announce (gzip, bz2, xz, zstd), or None."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(BZ2_MAGIC) and head[3:4].isdigit():
        return "bz2"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(ZSTD_MAGIC) or _zstd_skippable(head):
        return "zstd"
    return None


class Chained(io.RawIOBase):
    """``head`` then the rest of ``inner``: puts back what was read to sniff the format."""

    def __init__(self, head: bytes, inner: BinaryIO):
        self._head = memoryview(head)
        self._inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._inner.readinto(b) or 0  # type: ignore[attr-defined]  # every stream here has it

    def close(self) -> None:  # the caller closes the file it opened
        super().close()


#: Compressed bytes given to a zstd decompressor at once. zstandard's decompressobj has no
#: output limit; a 128 KiB block can be a 4-byte RLE block, so 512 bytes in give at most 16 MiB.
ZSTD_INPUT_BYTES = 512


def _zstd_decompressor():
    """A zstd decompressor (eof, unused_data), or None when no zstd module is installed."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # noqa: PLC0415 - 3.14+

        return zstd.ZstdDecompressor()
    except ImportError:
        pass
    try:
        import zstandard  # noqa: PLC0415 - a dependency; absent in odd installs
    except ImportError:
        return None
    return zstandard.ZstdDecompressor().decompressobj()


def zstd_available() -> bool:
    return _zstd_decompressor() is not None


def _new_decompressor(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor()
    return _zstd_decompressor()


class Decompressed(io.RawIOBase):
    """The decompressed bytes of a gzip/bz2/xz/zstd stream, multi-member, read forward.

    Each step inflates at most PIECE_BYTES. A stream cut short ends the output with a note (the
    readable part is analyzed); bytes after the last member that do not start another member are
    dropped with a note; corrupt data after some output ends the output with a note.
    """

    def __init__(self, kind: str, inner: BinaryIO, name: str, notes: list[str]):
        self.kind = kind
        self._inner = inner
        self._name = name
        self._notes = notes
        self._dec = _new_decompressor(kind)
        # compression.zstd (3.14) takes max_length like bz2/lzma; zstandard's object does not
        self._limited = kind != "gzip" and hasattr(self._dec, "needs_input")
        self._pending = b""  # compressed input not yet given to the decompressor
        self._out = b""
        self._done = False
        self._fed = False  # the current member has had input (EOF before that is a clean end)
        self.produced = 0
        self.consumed = 0  # compressed bytes read from ``inner``

    def readable(self) -> bool:
        return True

    def _stop(self, note: str, exc: Exception | None = None) -> None:
        if self.produced == 0 and not self._out and exc is not None:
            raise OSError(f"corrupt {self.kind} data ({exc})")
        self._notes.append(f"{self._name}: {note}")
        self._done = True

    def _member_end(self, rest: bytes) -> None:
        """One member ended: start the next one, or stop before trailing garbage."""
        if not rest:
            rest = self._inner.read(PIECE_BYTES)
            self.consumed += len(rest)
            if not rest:
                self._done = True
                return
        if self.kind == "gzip" and not rest.strip(b"\x00"):
            self._dec = _new_decompressor(self.kind)  # NUL padding (tape blocks): keep reading
            self._fed = False
            return
        if compression_of(rest[:8]) == self.kind:
            self._dec = _new_decompressor(self.kind)
            self._fed = False
            self._pending = rest
            return
        self._stop(f"trailing data after the {self.kind} stream ignored; analyzed the "
                   f"{self.produced + len(self._out):,} bytes before it")

    def _skip_zstd_frames(self, data: bytes) -> bytes:
        """``data`` after the skippable frames at its start (their bytes read and dropped)."""
        while _zstd_skippable(data[:4]) or (0 < len(data) < 4 and 0x50 <= data[0] <= 0x5F
                                             and b"\x2a\x4d\x18".startswith(data[1:4])):
            while len(data) < 8:
                more = self._inner.read(8 - len(data))
                self.consumed += len(more)
                if not more:
                    self._stop(f"truncated zstd skippable frame; analyzed the first "
                               f"{self.produced:,} bytes")
                    return b""
                data += more
            if not _zstd_skippable(data[:4]):
                break
            skip = int.from_bytes(data[4:8], "little")
            data = data[8:]
            while skip > len(data):
                skip -= len(data)
                data = self._inner.read(min(INPUT_BYTES, skip) or INPUT_BYTES)
                self.consumed += len(data)
                if not data:
                    self._stop(f"truncated zstd skippable frame; analyzed the first "
                               f"{self.produced:,} bytes")
                    return b""
            data = data[skip:]
        return data

    def _step(self) -> None:
        dec = self._dec
        held = self._limited and not dec.eof and not dec.needs_input
        if held:
            data = b""  # output held back by max_length: ask for it without new input
        elif self._pending:
            data, self._pending = self._pending, b""
        else:
            data = self._inner.read(INPUT_BYTES if self._limited or self.kind == "gzip"
                                    else ZSTD_INPUT_BYTES)
            self.consumed += len(data)  # counted where read: unused data is fed again later
            if not data:
                if not self._fed:
                    self._done = True  # ended on a member boundary (after NUL padding)
                    return
                self._stop(f"truncated {self.kind} stream; analyzed the first "
                           f"{self.produced:,} bytes")
                return
        if self.kind == "zstd" and not self._fed and data:
            data = self._skip_zstd_frames(data)
            if not data:
                return  # only skippable frames so far: the next step reads on
        self._fed = self._fed or bool(data)
        try:
            if self.kind == "gzip" or self._limited:
                self._out = dec.decompress(data, PIECE_BYTES)
            else:
                self._out = dec.decompress(data)
        except Exception as exc:  # noqa: BLE001 - zlib.error, LZMAError, ZstdError...
            self._stop(f"corrupt {self.kind} data after {self.produced:,} bytes ({exc}); "
                       "analyzed what was readable", exc)
            return
        if self.kind == "gzip":
            self._pending = dec.unconsumed_tail
        out = self.produced + len(self._out)
        if out > DECOMPRESSED_FREE_BYTES and (out > MAX_RATIO * self.consumed
                                              or out > MAX_DECOMPRESSED_BYTES):
            self._out = b""
            self._stop(f"decompressed past {self.produced:,} bytes from {self.consumed:,} "
                       f"compressed ({out // max(self.consumed, 1):,}:1; the bounds are "
                       f"{MAX_RATIO}:1 and {MAX_DECOMPRESSED_BYTES >> 30} GiB, a decompression "
                       f"bomb?); analyzed the first {self.produced:,} bytes")
            return
        if dec.eof:
            self._member_end(dec.unused_data)

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._dec is None:
            raise OSError("a zstd log needs the 'zstandard' package (pip install zstandard) or "
                          "Python 3.14; or decompress it with 'zstd -d'")
        # fill the whole request (the scanner asks for 8 MiB): fewer, larger chunks downstream
        view = memoryview(b).cast("B")
        n = 0
        while n < len(view):
            if not self._out:
                if self._done:
                    break
                self._step()
                continue
            k = min(len(view) - n, len(self._out))
            view[n:n + k] = memoryview(self._out)[:k]
            self._out = self._out[k:] if k < len(self._out) else b""  # copies only a remainder
            n += k
            self.produced += k  # notes written by _step count what was handed out so far
        return n


def utf_encoding_of(head: bytes) -> str | None:
    """UTF-16/32 (with or without BOM) from a log's first bytes; None for UTF-8 and the rest."""
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    sample = head[:4096]
    n = len(sample) // 4 * 4
    if n < 16:
        return None
    sample = sample[:n]

    def zero_share(start: int, step: int) -> float:
        part = sample[start::step]
        return part.count(0) / len(part)

    # ASCII text in UTF-32: three NULs per character; in UTF-16: one in every pair.
    if all(zero_share(i, 4) > 0.9 for i in (1, 2, 3)) and zero_share(0, 4) < 0.1:
        return "utf-32-le"
    if all(zero_share(i, 4) > 0.9 for i in (0, 1, 2)) and zero_share(3, 4) < 0.1:
        return "utf-32-be"
    if zero_share(1, 2) > 0.7 and zero_share(0, 2) < 0.1:
        return "utf-16-le"
    if zero_share(0, 2) > 0.7 and zero_share(1, 2) < 0.1:
        return "utf-16-be"
    return None


#: Legacy console encodings tried, in order, on a log that is not UTF-8: Chinese Windows and
#: Linux consoles (GBK, as its superset GB18030) and Japanese Windows (Shift-JIS, as cp932).
LEGACY_ENCODINGS = ("gb18030", "cp932")


def _implausible(encoding: str, text: str) -> int:
    """Characters a real log in ``encoding`` rarely holds, where the bytes of another encoding
    land: for GB18030, characters outside GB2312 (Shift-JIS kana and kanji decode to rare GBK
    ones); for cp932, half-width katakana and private-use characters (what GBK hanzi become)."""
    bad = 0
    for ch in text:
        if ch < "\x80":
            continue
        if encoding == "gb18030":
            try:
                ch.encode("gb2312")
            except UnicodeEncodeError:
                bad += 1
        elif "\uff61" <= ch <= "\uff9f" or "\ue000" <= ch <= "\uf8ff":
            bad += 1
    return bad


def legacy_encoding_of(head: bytes) -> str | None:
    """GB18030 or cp932 for a log's first bytes that are not UTF-8 but decode cleanly (but for
    a character cut at the end) as one of them, the likelier by its characters; else None."""
    sample = head[:16384]
    try:
        sample.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        if exc.start >= len(sample) - 3:
            return None  # UTF-8 but for a character cut at the end of the sample
    best: tuple[int, str] | None = None
    for encoding in LEGACY_ENCODINGS:
        dec = codecs.getincrementaldecoder(encoding)(errors="strict")
        try:
            text = dec.decode(sample, final=False)
        except UnicodeDecodeError:
            continue
        wide = sum(1 for ch in text if ch >= "\x80")
        if not wide:
            continue
        bad = _implausible(encoding, text)
        if bad * 5 > wide:
            continue  # more than one character in five is unlikely: not this encoding
        if best is None or bad < best[0]:
            best = (bad, encoding)
    return best[1] if best else None


class Transcoded(io.RawIOBase):
    """UTF-8 bytes of a UTF-16/32 stream (undecodable units become U+FFFD)."""

    def __init__(self, encoding: str, inner: BinaryIO | io.RawIOBase):
        self._dec = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._inner = inner
        self._out = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._out and not self._eof:
            data = self._inner.read(PIECE_BYTES)
            self._eof = not data
            self._out = self._dec.decode(data or b"", final=self._eof).encode("utf-8", "replace")
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def read_up_to(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the stream)."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        part = stream.read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)
