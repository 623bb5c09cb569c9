"""Stream logs in constant memory and turn candidate segments into symptoms, timeline and facts.

The file is read in byte chunks. A prefilter engine (see prefilter.py) finds the few places where
some pattern may match; only the segments around those places are decoded, normalized and given
to the precise patterns. Every chunk keeps a look-ahead tail so that patterns with ``join_next``
(hard-wrapped messages) can see the lines after a candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from dsdoctor.aggregate import FactCollector, SymptomAggregator, Timeline
from dsdoctor.errors import UsageError
from dsdoctor.formats import Pattern, load_patterns
from dsdoctor.model import Evidence, FileSummary, Symptom, TimelinePoint, Fact
from dsdoctor.prefilter import make_engine
from dsdoctor.reader import normalize, open_log, rank_from_filename

CHUNK_BYTES = 8 << 20
LOOKAHEAD_BYTES = 256 << 10
MAX_BUFFER_BYTES = 64 << 20  # a single line longer than this is cut (segments stay capped anyway)
SEGMENT_WINDOW = 8 << 10  # around a hit inside a huge \r/\n-free segment
TIMELINE_FULL_BYTES = 64 << 20  # below this size every timeline line is read; above, sampled
TIMELINE_WINDOWS_PER_CHUNK = 16
TIMELINE_WINDOW_BYTES = 32 << 10


@dataclass
class ScanResult:
    """What the logs show. Symptoms by kind, the run's timeline, facts, per-file summaries."""

    symptoms: dict[str, Symptom] = field(default_factory=dict)
    timeline: list[TimelinePoint] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    files: list[FileSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    engine: str = ""


class Scanner:
    """Reusable scanner: compiles the prefilter engines once, scans any number of files."""

    def __init__(self, patterns: Sequence[Pattern] | None = None, engine: str = "auto"):
        self.patterns = list(patterns if patterns is not None else load_patterns())
        self.main_patterns = [p for p in self.patterns if not p.is_timeline]
        self.timeline_patterns = [p for p in self.patterns if p.is_timeline]
        self.engine_full = make_engine(self.patterns, engine)
        self.engine_main = make_engine(self.main_patterns, engine)
        # Timeline windows are small: the pure-Python engine is fast enough and needs no DB.
        self.engine_timeline = make_engine(self.timeline_patterns, "python")
        self.engine_name = self.engine_full.name
        self.symptoms = SymptomAggregator()
        self.timeline = Timeline()
        self.facts = FactCollector()
        self.files: list[FileSummary] = []
        self.notes: list[str] = []

    # -- public -------------------------------------------------------------------------------
    def scan_path(self, path: str, on_event: Callable[[str, Evidence, dict], None] | None = None
                  ) -> None:
        log = open_log(path)
        try:
            self._scan_stream(log.name, log.stream, log.size, log.compressed, on_event)
        finally:
            log.close()

    def result(self) -> ScanResult:
        return ScanResult(
            symptoms=self.symptoms.build(),
            timeline=self.timeline.points(),
            facts=self.facts.facts(),
            files=list(self.files),
            notes=list(self.notes),
            engine=self.engine_name,
        )

    # -- internals ----------------------------------------------------------------------------
    def _scan_stream(self, name, stream, size, compressed, on_event) -> None:
        full_timeline = size is None or size <= (TIMELINE_FULL_BYTES // (8 if compressed else 1))
        engine = self.engine_full if full_timeline else self.engine_main
        patterns = self.patterns if full_timeline else self.main_patterns
        file_rank = rank_from_filename(name) if name != "<stdin>" else None
        carry = b""
        base_line = 1  # line number of the first byte of the current buffer
        total = 0
        eof = False
        while not eof:
            try:
                chunk = stream.read(CHUNK_BYTES)
            except EOFError:
                self.notes.append(f"{name}: truncated gzip stream; analyzed the first "
                                  f"{base_line - 1} lines")
                chunk = b""
            except OSError as exc:
                if total == 0:
                    raise UsageError(f"{name}: cannot read ({exc}); check the file") from None
                self.notes.append(f"{name}: read error after {total} bytes ({exc}); "
                                  "analyzed what was readable")
                chunk = b""
            if not chunk:
                eof = True
            total += len(chunk)
            buf = carry + chunk if carry else chunk
            if not buf:
                break
            if eof:
                cut = len(buf)
            else:
                limit = len(buf) - LOOKAHEAD_BYTES
                cut = buf.rfind(b"\n", 0, limit) + 1 if limit > 0 else 0
                if cut == 0:
                    if len(buf) < MAX_BUFFER_BYTES:
                        carry = buf
                        continue
                    cut = len(buf) - LOOKAHEAD_BYTES  # one giant line: cut it
            region = buf[:cut] if cut < len(buf) else buf
            hits = engine.candidates(region)
            if hits:
                self._process_hits(name, buf, region, hits, patterns, base_line, file_rank,
                                   on_event)
            if not full_timeline:
                self._sample_timeline(name, region, base_line, file_rank)
            base_line += region.count(b"\n")
            carry = buf[cut:]
        lines = base_line - 1 + (1 if total and not _ends_with_newline(stream, total) else 0)
        self.files.append(FileSummary(path=name, lines=lines, bytes=total, compressed=compressed))
        if total == 0:
            self.notes.append(f"{name}: empty log")

    def _process_hits(self, name, buf, region, hits, patterns, base_line, file_rank, on_event):
        seen: set[tuple[int, int]] = set()
        pos = 0
        line = base_line
        count = region.count
        rfind = region.rfind
        for off, idx in hits:
            line_start = rfind(b"\n", 0, off) + 1
            seg_start = rfind(b"\r", line_start, off) + 1
            if seg_start < line_start:
                seg_start = line_start
            key = (seg_start, idx)
            if key in seen:
                continue
            seen.add(key)
            if line_start > pos:
                line += count(b"\n", pos, line_start)
                pos = line_start
            nl = buf.find(b"\n", off)
            line_end = nl if nl != -1 else len(buf)
            cr = buf.find(b"\r", off, line_end)
            seg_end = cr if cr != -1 else line_end
            if seg_end - seg_start > 4 * SEGMENT_WINDOW:
                seg_start = max(seg_start, off - SEGMENT_WINDOW)
                seg_end = min(seg_end, off + SEGMENT_WINDOW)
            pat = patterns[idx]
            seg = normalize(buf[seg_start:seg_end])
            following: list[str] = []
            if pat.join_next:
                following = _next_lines(buf, line_end, pat.join_next)
            values = pat.match_lines(seg.text, following)
            if values is None:
                continue
            rank = values.get("rank")
            if not isinstance(rank, int):
                rank = seg.rank if seg.rank is not None else file_rank
            ev = Evidence(file=name, line=line, text=seg.text.strip()[:500], rank=rank)
            self._emit(pat, ev, values)
            if on_event is not None:
                on_event(pat.emits, ev, values)

    def _emit(self, pat: Pattern, ev: Evidence, values: dict) -> None:
        if pat.is_timeline:
            self.timeline.add(pat.id, ev, values)
        elif pat.is_fact:
            self.facts.add(pat.emits[5:], ev, values)
        else:
            self.symptoms.add(pat.emits, pat.id, pat.strength, ev, values)

    def _sample_timeline(self, name, region, base_line, file_rank) -> None:
        """Big files: read the timeline in evenly spaced windows (bounded work per chunk)."""
        if not self.timeline_patterns or not region:
            return
        stride = max(len(region) // TIMELINE_WINDOWS_PER_CHUNK, 1)
        line = base_line
        pos = 0
        for start in range(0, len(region), stride):
            begin = region.find(b"\n", start) + 1 if start else 0
            if begin <= 0 or begin >= len(region):
                continue
            window = region[begin:begin + TIMELINE_WINDOW_BYTES]
            cut = window.rfind(b"\n") + 1
            window = window[:cut] if cut else window
            hits = self.engine_timeline.candidates(window)
            line += region.count(b"\n", pos, begin)
            pos = begin
            taken: set[int] = set()
            for off, idx in hits:
                if idx in taken:
                    continue
                ls = window.rfind(b"\n", 0, off) + 1
                ss = max(ls, window.rfind(b"\r", ls, off) + 1)
                nl = window.find(b"\n", off)
                le = nl if nl != -1 else len(window)
                cr = window.find(b"\r", off, le)
                seg = normalize(window[ss:cr if cr != -1 else le])
                pat = self.timeline_patterns[idx]
                values = pat.match(seg.text)
                if values is None:
                    continue
                taken.add(idx)
                ev = Evidence(file=name, line=line + window.count(b"\n", 0, ls),
                              text=seg.text.strip()[:500],
                              rank=seg.rank if seg.rank is not None else file_rank)
                self.timeline.add(pat.id, ev, values)


def _next_lines(buf: bytes, line_end: int, n: int) -> list[str]:
    out: list[str] = []
    pos = line_end + 1
    for _ in range(n):
        if pos >= len(buf):
            break
        nl = buf.find(b"\n", pos)
        end = nl if nl != -1 else len(buf)
        if end - pos > 4 * SEGMENT_WINDOW:
            end = pos + 4 * SEGMENT_WINDOW
        out.append(normalize(buf[pos:end]).text)
        pos = end + 1
    return out


def _ends_with_newline(stream, total: int) -> bool:
    # The line count is the number of "\n" (+1 for a last line without one). We do not keep the
    # last byte around, so ask the stream when it can seek; otherwise assume a final newline.
    try:
        stream.seek(total - 1)
        return stream.read(1) == b"\n"
    except Exception:  # noqa: BLE001 - gzip/stdin: not worth re-reading
        return True


def scan_files(paths: Iterable[str], engine: str = "auto",
               on_event: Callable[[str, Evidence, dict], None] | None = None) -> ScanResult:
    """Scan every path (``-`` = standard input) into one ScanResult."""
    scanner = Scanner(engine=engine)
    for p in paths:
        scanner.scan_path(p, on_event=on_event)
    return scanner.result()


def scan_text(text: str, name: str = "<text>", engine: str = "auto") -> ScanResult:
    """Scan an in-memory log (rule examples, tests)."""
    import io  # noqa: PLC0415

    scanner = Scanner(engine=engine)
    data = text.encode("utf-8")
    scanner._scan_stream(name, io.BytesIO(data), len(data), False, None)
    return scanner.result()


class TailScanner:
    """Incremental scanning of a growing log (``dsdoctor watch``).

    New bytes are fed as they arrive; complete lines are scanned. The last few lines are held
    back until more arrive (or :meth:`flush`), so that hard-wrapped messages (``join_next``)
    can still be joined with their continuation lines.
    """

    HOLD_BACK_LINES = 8

    def __init__(self, name: str, scanner: Scanner | None = None,
                 on_event: Callable[[str, Evidence, dict], None] | None = None):
        self.name = name
        self.scanner = scanner or Scanner()
        self.on_event = on_event
        self._buf = b""
        self._line = 1
        self.bytes_read = 0
        self._rank = rank_from_filename(name)

    @property
    def lines_read(self) -> int:
        return self._line - 1

    def feed(self, data: bytes) -> None:
        self.bytes_read += len(data)
        self._buf += data
        end = len(self._buf)
        for _ in range(self.HOLD_BACK_LINES + 1):
            end = self._buf.rfind(b"\n", 0, end)
            if end <= 0:
                return
        self._process(end + 1)

    def flush(self, final: bool = False) -> None:
        """Scan the held-back complete lines (and, when ``final``, a last line without newline)."""
        cut = len(self._buf) if final else self._buf.rfind(b"\n") + 1
        if cut:
            self._process(cut)

    def _process(self, cut: int) -> None:
        s = self.scanner
        region = self._buf[:cut]
        hits = s.engine_full.candidates(region)
        if hits:
            s._process_hits(self.name, self._buf, region, hits, s.patterns, self._line,
                            self._rank, self.on_event)
        self._line += region.count(b"\n")
        self._buf = self._buf[cut:]

    def result(self) -> ScanResult:
        res = self.scanner.result()
        res.files = [FileSummary(path=self.name, lines=self.lines_read, bytes=self.bytes_read)]
        return res
