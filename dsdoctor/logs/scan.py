"""Stream logs in constant memory and turn candidate segments into symptoms, timeline and facts.

The file is read in byte chunks. A prefilter engine (see prefilter.py) finds the few places where
some pattern may match; only the segments around those places are decoded, normalized and given
to the precise patterns. Every chunk keeps a look-ahead tail so that patterns with ``join_next``
(hard-wrapped messages) can see the lines after a candidate.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.logs.aggregate import FactCollector, SymptomAggregator, Timeline, finished
from dsdoctor.logs.formats import Pattern, load_patterns
from dsdoctor.logs.hidden import hidden_candidates
from dsdoctor.logs.jobs import PARALLEL_MIN_BYTES, PositionedReader, default_jobs, fork_available
from dsdoctor.logs.prefilter import hyperscan_available, make_engine
from dsdoctor.logs.rankfacts import RANKLESS_EMITS, RankCollector, RankFacts
from dsdoctor.logs.reader import OpenedLog, Segment, local_rank_from_path, normalize, open_log, rank_from_filename
from dsdoctor.logs.teardown import with_launcher_exit
from dsdoctor.logs.timeouts import with_located_timeout
from dsdoctor.logs.tracebacks import with_raised_exceptions
from dsdoctor.model import Evidence, Fact, FileSummary, Symptom, TimelinePoint
from dsdoctor.redact.redactor import redact_wrapped_line, secret_word

#: A scan's progress: (file name, bytes read so far, its size or None when unknown).
ProgressFn = Callable[[str, int, "int | None"], None]
CHUNK_BYTES = 8 << 20
LOOKAHEAD_BYTES = 256 << 10
MAX_BUFFER_BYTES = 64 << 20  # a single line longer than this is cut (segments stay capped anyway)
SEGMENT_WINDOW = 8 << 10  # around a hit inside a huge \r/\n-free segment
# Hits of one pattern matched one by one inside one huge separator-free line (a 200 MB line
# holding a million messages); beyond this the rest are counted as candidates and a note says so.
MAX_WINDOW_MATCHES_PER_LINE = 10_000
TIMELINE_FULL_BYTES = 2 << 20  # up to this size every timeline line is read; above, sampled
TIMELINE_TARGET_POINTS = 1000  # sampled windows per file (evenly spaced by byte offset)
TIMELINE_WINDOW_MISSES = 4  # candidates a timeline pattern's regex may refuse in one window
TIMELINE_WINDOW_BYTES = 4 << 10
TIMELINE_UNKNOWN_SIZE_STRIDE = 512 << 10  # stdin and gzip: one window per 512 KiB
# A hard wrap (a terminal or a paste at 80 columns) may split a token between two lines: the
# text around a line whose edge is glued to its neighbour's, read to join the token (the longest
# token shapes are a few hundred characters; a JWT wrapped at 20 columns spans 15 lines).
WRAP_CONTEXT_BYTES = 1024
# Line shapes whose pattern outcomes are kept (_shape_of), and the longest segment that gets one
# (a longer one is matched as it is): at most about 16 MB of keys per pattern list.
MAX_SHAPES = 4096
MAX_SHAPE_BYTES = 4096
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.~")
_WORD_STR = "".join(sorted(_WORD_CHARS))
_WORD_BYTES_STR = _WORD_STR.encode("ascii")
_LINE_END_BYTES = b"\r\n"
# the start of a next line that may continue a word: blanks and a rank prefix, then the word
_WRAP_HEAD_BYTES = re.compile(rb"[ \t]*+(?:\[rank\d++\]:[ \t]*+|\d++:[ \t]++)?"
                              rb"([A-Za-z0-9_\-+/=.~]++)")


@dataclass
class ScanResult:
    """What the logs show. Symptoms by kind, the run's timeline, facts, per-file summaries."""

    symptoms: dict[str, Symptom] = field(default_factory=dict)
    timeline: list[TimelinePoint] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    files: list[FileSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    engine: str = ""
    # what each rank's lines said last (frames, exception, watchdog numbers), by rank
    ranks: dict[int, RankFacts] = field(default_factory=dict)


class Scanner:
    """Reusable scanner: compiles the prefilter engines once, scans any number of files."""

    def __init__(self, patterns: Sequence[Pattern] | None = None, engine: str = "auto",
                 on_progress: ProgressFn | None = None, jobs: int | None = None,
                 parallel_min_bytes: int = PARALLEL_MIN_BYTES):
        # on_progress(name, bytes read, size or None) after every chunk (a progress bar)
        self.on_progress = on_progress
        # worker processes for one big regular file (None: default_jobs(); 1: never fork)
        self.jobs = default_jobs() if jobs is None else max(1, jobs)
        self.parallel_min_bytes = parallel_min_bytes
        self.patterns = list(patterns if patterns is not None else load_patterns())
        self.main_patterns = [p for p in self.patterns if not p.is_timeline]
        self.timeline_patterns = [p for p in self.patterns if p.is_timeline]
        self._engine_choice = engine
        self._engine_full = None
        self._engine_main = None
        self._engine_timeline = None
        self.engine_name = "hyperscan" if engine != "python" and hyperscan_available() else "python"
        self.symptoms = SymptomAggregator()
        self.timeline = Timeline()
        self.facts = FactCollector()
        self.ranks = RankCollector()
        self.files: list[FileSummary] = []
        self.notes: list[str] = []
        # on_event also for a pattern counted only without others (counts_unless): for a caller
        # that asks what each line says (tests), not one that counts events as they come (watch)
        self.events_of_conditional_patterns = False
        # (file, line) of the huge line being matched, its matches and skipped hits per pattern id
        self._huge_line: tuple[str, int] | None = None
        self._huge_matched: dict[str, int] = {}
        self._huge_skipped: dict[tuple[str, int, str], int] = {}
        # per log, the bytes before its buffer's first line (the end of the chunk scanned last),
        # for a token wrapped across a chunk cut (see _unwrapped)
        self._wrap_carry: dict[str, bytes] = {}

    # -- public -------------------------------------------------------------------------------
    def scan_path(self, path: str, on_event: Callable[[str, Evidence, dict], None] | None = None
                  ) -> None:
        log = open_log(path)
        try:
            if not (on_event is None and self._scan_parallel(log)):
                stream: Any = log.stream
                if log.bytes_as_on_disk and log._file is not None and hasattr(os, "preadv"):
                    # a plain regular file: read straight into the scan buffer, no copies
                    stream = PositionedReader(log._file.fileno(), 0)
                self._scan_stream(log.name, stream, log.size, log.compressed, on_event)
        finally:
            log.close()
        self.notes.extend(log.notes)  # truncated or trailing data, UTF-16 text (reader wrappers)

    def result(self) -> ScanResult:
        facts = self.facts.facts()
        symptoms = with_launcher_exit(with_raised_exceptions(
            with_located_timeout(self.symptoms.build(), facts), facts), facts)
        return ScanResult(
            symptoms=symptoms,
            timeline=self.timeline.points(),
            facts=facts,
            files=list(self.files),
            notes=list(self.notes),
            engine=self.engine_name,
            ranks=self.ranks.facts(),
        )

    # -- internals ----------------------------------------------------------------------------
    def _engine(self, full_timeline: bool):
        """Prefilter engines are compiled on first use (a big file never needs the full one)."""
        if full_timeline:
            if self._engine_full is None:
                self._engine_full = make_engine(self.patterns, self._engine_choice)
            return self._engine_full
        if self._engine_main is None:
            self._engine_main = make_engine(self.main_patterns, self._engine_choice)
        return self._engine_main

    @property
    def engine_full(self):
        return self._engine(True)

    @property
    def engine_timeline(self):
        """The timeline patterns' engine, for the sampled windows of big files (on first use)."""
        if self._engine_timeline is None:
            self._engine_timeline = make_engine(self.timeline_patterns, self._engine_choice)
        return self._engine_timeline

    def _scan_stream(self, name, stream, size, compressed, on_event) -> None:
        counts = self._scan_range(name, stream, size, compressed, on_event)
        self._summarize(name, compressed, *counts)

    def _summarize(self, name: str, compressed: bool, newlines: int, total: int,
                   last_byte: bytes) -> None:
        lines = newlines + (1 if total and last_byte != b"\n" else 0)
        self.files.append(FileSummary(path=name, lines=lines, bytes=total, compressed=compressed))
        self._cap_notes(name)
        if total == 0:
            self.notes.append(f"{name}: empty log")

    def _scan_parallel(self, log: OpenedLog) -> bool:
        """Scan a big regular uncompressed file in ranges on several cores (parallel.py); False
        when it does not qualify (the caller scans it in one process)."""
        size = log.size
        if (self.jobs < 2 or size is None or not log.bytes_as_on_disk or log._file is None
                or size < self.parallel_min_bytes or not fork_available()):
            return False
        stride = max(size // TIMELINE_TARGET_POINTS, TIMELINE_WINDOW_BYTES)
        if size <= TIMELINE_FULL_BYTES:
            return False  # small files read every timeline line: one process
        from dsdoctor.logs.parallel import scan_parallel  # noqa: PLC0415 - big files only

        counts = scan_parallel(self, log.name, log._file.fileno(), size, self.jobs, stride,
                               self.on_progress)
        if counts is None:
            return False
        self._summarize(log.name, False, *counts)
        return True

    def _reusable_buffer(self) -> bytearray:
        """The scan buffer of this scanner; one grown past its size by a giant line shrinks back
        (one range at a time: a scanner scans its ranges one after the other)."""
        size = CHUNK_BYTES + LOOKAHEAD_BYTES
        buf = getattr(self, "_buf", None)
        if buf is None or len(buf) != size:
            buf = self._buf = bytearray(size)
        return buf

    def _scan_range(self, name, stream, size, compressed, on_event, start: int = 0,
                    stop: int | None = None, mark: int = 0) -> tuple[int, int, bytes]:
        """Scan ``stream`` (positioned at byte ``start`` of a file of ``size`` bytes) up to byte
        ``stop`` (a line start; None: the end), reading LOOKAHEAD_BYTES past it for patterns that
        join the next lines. Line numbers count from 1 at ``start``; ``mark`` is the first
        timeline window's mark (see _sample_timeline). Returns (newlines before
        ``stop``, bytes scanned, the last byte scanned)."""
        known = size is not None and not compressed
        full_timeline = known and size <= TIMELINE_FULL_BYTES
        if size is None or compressed:
            stride = TIMELINE_UNKNOWN_SIZE_STRIDE
        else:
            stride = max(size // TIMELINE_TARGET_POINTS, TIMELINE_WINDOW_BYTES)
        consumed = start  # absolute offset of buf[0]
        done = False  # the range's end has been scanned (the rest of the buffer is look-ahead)
        file_rank = rank_from_filename(name) if name != "<stdin>" else None
        # torchrun --log-dir's attempt_0/N/stdout.log: N is the node's local rank
        file_local = file_rank is None and local_rank_from_path(name) is not None
        if file_local:
            file_rank = local_rank_from_path(name)
        self._wrap_carry.pop(name, None)
        # One buffer, reused across chunks and files: a fresh (zero-filled) 8 MiB per file made
        # 100,000 small logs cost 3 ms each before a byte was read (issue 24).
        buf = self._reusable_buffer()
        have = 0  # valid bytes at the start of buf
        base_line = 1  # line number of buf[0]
        total = 0
        last_byte = b"\n"
        eof = False
        while not eof and not done:
            if len(buf) < have + CHUNK_BYTES:
                buf.extend(bytes(have + CHUNK_BYTES - len(buf)))
            try:
                n = stream.readinto(memoryview(buf)[have:have + CHUNK_BYTES]) or 0
            except EOFError:
                self.notes.append(f"{name}: truncated gzip stream; analyzed the first "
                                  f"{total:,} bytes")
                n = 0
            except Exception as exc:  # noqa: BLE001 - OSError, zlib.error from a corrupt gzip...
                if total == 0:
                    raise UsageError(f"{name}: cannot read ({exc}); check the file") from None
                self.notes.append(f"{name}: read error after {total:,} bytes ({exc}); "
                                  "analyzed what was readable")
                n = 0
            if n == 0:
                eof = True
            have += n
            total += n
            if self.on_progress is not None:
                self.on_progress(name, total, None if compressed else size)
            if have == 0:
                break
            last_byte = bytes(buf[have - 1:have])
            if eof:
                cut = have
            else:
                limit = have - LOOKAHEAD_BYTES
                cut = buf.rfind(b"\n", 0, limit) + 1 if limit > 0 else 0
                if cut == 0:
                    if have < MAX_BUFFER_BYTES:
                        continue  # no complete line yet: read more
                    cut = have - LOOKAHEAD_BYTES  # one giant line: cut it
            if stop is not None and consumed + cut >= stop:
                # a cut short of the end leaves LOOKAHEAD_BYTES after it, so the bytes past
                # stop that patterns joining the next lines may need are in the buffer
                cut = stop - consumed
                last_byte = bytes(buf[cut - 1:cut]) if cut else last_byte
                done = True
            # streams of unknown size (stdin, gzip) read every timeline line of their first MiBs
            full = full_timeline or (not known and consumed < TIMELINE_FULL_BYTES)
            patterns = self.patterns if full else self.main_patterns
            engine = self._engine(full)
            hits = hidden_candidates(engine, buf, cut, engine.candidates(buf, cut))
            samples: list[tuple] = []
            if not full:
                samples, mark = self._sample_timeline(buf, cut, have, consumed, stride, mark)
            else:  # every line was read: no window is due before the next chunk
                mark = -(-(consumed + cut) // stride) * stride
            base_line = self._process(name, buf, cut, have, hits, samples, patterns, base_line,
                                      file_rank, on_event, file_local)
            rest = have - cut
            consumed += cut
            self._wrap_carry[name] = bytes(buf[max(0, cut - WRAP_CONTEXT_BYTES):cut])
            if rest:
                buf[0:rest] = buf[cut:have]
            have = rest
        return base_line - 1, total if stop is None else min(total, stop - start), last_byte

    def _symptom_flags(self, patterns) -> list[bool]:
        """Which patterns emit symptoms, per pattern list (computed once, not per chunk)."""
        cache = self.__dict__.setdefault("_symptom_cache", {})
        flags = cache.get(id(patterns))
        if flags is None or flags[0] is not patterns:
            flags = cache[id(patterns)] = (patterns, [not p.is_timeline and not p.is_fact
                                                      for p in patterns])
        return flags[1]

    def _process(self, name, buf, cut, have, hits, samples, patterns, base_line, file_rank,
                 on_event, file_local: bool = False) -> int:
        """Match the candidates of buf[:cut]; return the line number of buf[cut]."""
        seen: set[tuple[int, int]] = set()
        pos = 0
        line = base_line
        count = buf.count
        # hits and timeline samples in one pass of newline counting
        items = heapq.merge(hits, samples, key=_OFFSET) if samples else hits
        sampled = bool(samples)
        cur_line: tuple[int, int] | None = None  # (start, end) of the line of the last hit
        last_seg: tuple[int, int, Segment] | None = None  # several patterns, one segment
        last_whole: tuple[int, int, int, int] | None = None  # _segment_at of a whole segment
        symptom = self._symptom_flags(patterns)
        shapes = self._shape_cache(patterns)
        # the last whole segment's shape (_Shape), or None; and the patterns its shape refused
        shape: _Shape | None = None
        refused: set[int] | frozenset[int] = _NONE_REFUSED
        done: set[int] = set()  # patterns already matched on the shaped segment
        for item in items:
            off, idx = item[0], item[1]
            if sampled and len(item) > 2:  # a sampled timeline point: (offset, pattern index, segment, values)
                seg, values = item[2], item[3]
                if off > pos:
                    line += count(b"\n", pos, off)
                    pos = off
                ev = Evidence(file=name, line=line, text=seg.text,  # a point keeps no text
                              rank=seg.rank if seg.rank is not None else file_rank)
                self.timeline.add(self.timeline_patterns[idx].id, ev, values)
                if ev.rank is not None:
                    self.ranks.add("timeline", "", name, line, seg.text, ev.rank, values,
                                   local=seg.local_rank if seg.rank is not None else file_local)
                continue
            if last_whole is not None and last_whole[1] <= off < last_whole[2]:
                # another pattern's hit in the segment of the last hit, a whole one (not a
                # window of a huge line): most lines of a big log hold several candidates
                line_start, seg_start, seg_end, line_end = last_whole
            else:
                line_start, seg_start, seg_end, line_end = _segment_at(buf, off, have, cur_line)
                cur_line = (line_start, line_end)
                whole = ((seg_start == line_start or buf[seg_start - 1] == 13)
                         and (seg_end == line_end or buf[seg_end] == 13))
                last_whole = (line_start, seg_start, seg_end, line_end) if whole else None
                shape, refused = None, _NONE_REFUSED
                done = set()
                if whole and seg_end - seg_start <= MAX_SHAPE_BYTES:
                    # every hit of a whole segment reads its text: read it now, for its shape
                    if not (last_seg is not None and last_seg[0] == seg_start
                            and last_seg[1] == seg_end):
                        seg = normalize(bytes(buf[seg_start:seg_end]))
                        if seg_start == line_start and seg_end == line_end:
                            seg = self._unwrapped(name, seg, buf, line_start, line_end, have)
                        last_seg = (seg_start, seg_end, seg)
                    shape = _shape_of(shapes, last_seg[2].text)
                    refused = shape.refused
            if line_start > pos:
                line += count(b"\n", pos, line_start)
                pos = line_start
            if idx in refused:
                continue  # a digit-blind pattern that refused this line's shape before
            pat = patterns[idx]
            plan = shape.plans.get(idx) if shape is not None else None
            if plan is not None:
                # a pattern that matched this shape before: its values at the same spans (the
                # checks below are settled for a whole segment and a pattern joining no lines)
                if idx in done:
                    continue
                done.add(idx)
                seg = last_seg[2]  # type: ignore[index]  # read with the shape
                values = pat.values_at(seg.text, plan)
            else:
                key = (seg_start, idx)
                if key in seen:
                    continue
                # before adding to the seen set: a capped huge line must not fill it with a
                # million keys
                if seg_end - seg_start < line_end - line_start and self._over_line_cap(
                        name, line, pat.id, buf, line_start, seg_start, seg_end, line_end):
                    continue
                seen.add(key)
                if shape is not None:
                    done.add(idx)
                if last_seg is not None and last_seg[0] == seg_start and last_seg[1] == seg_end:
                    seg = last_seg[2]
                else:
                    seg = normalize(bytes(buf[seg_start:seg_end]))
                    if seg_start == line_start and seg_end == line_end:
                        seg = self._unwrapped(name, seg, buf, line_start, line_end, have)
                    last_seg = (seg_start, seg_end, seg)
                wanted = pat.lines_wanted(seg.text) if pat.join_next or pat.join_continued else 0
                if wanted:
                    values = pat.match_lines(seg.text, _next_lines(buf, line_end, wanted, have))
                elif shape is not None and pat.digit_blind:
                    spans = pat.spans(seg.text)  # the shape's first line
                    if spans is None:
                        shape.refused.add(idx)
                        continue
                    plan = pat.plan(spans)
                    if not (pat.join_next or pat.join_continued):
                        shape.plans[idx] = plan
                    values = pat.values_at(seg.text, plan)
                else:
                    values = pat.match(seg.text)  # what match_lines does without lines to join
            if values is None:
                continue
            rank = values.get("rank")
            local = False
            if not isinstance(rank, int):
                rank = seg.rank if seg.rank is not None else file_rank
                local = seg.local_rank if seg.rank is not None else file_local
            if rank is not None or pat.emits in RANKLESS_EMITS:
                self.ranks.add(pat.emits, pat.id, name, line, seg.text, rank, values, local=local)
            # the whole segment's text: the aggregator cuts only the evidence it keeps, and
            # makes an Evidence only for a line it keeps (most of a million hits are counted)
            if symptom[idx]:
                self.symptoms.add_hit(pat.tally_kind, pat.id, pat.strength, name, line, seg.text,
                                      rank, values)
            else:
                self._emit(pat, Evidence(file=name, line=line, text=seg.text, rank=rank), values)
            # live watchers see only what always counts: a pattern counted only without others
            # (counts_unless) would count twice with them before the scan knows (aggregate.py)
            if on_event is not None and (not pat.counts_unless
                                         or self.events_of_conditional_patterns):
                on_event(pat.emits, finished(Evidence(file=name, line=line, text=seg.text,
                                                      rank=rank)), values)
        if cut > pos:
            line += count(b"\n", pos, cut)
        elif pos > cut:  # a timeline window that starts before cut may end after it
            line -= count(b"\n", cut, pos)
        return line

    def _shape_cache(self, patterns) -> dict[bytes, _Shape]:
        """The line shapes seen with this pattern list (indexes differ between lists)."""
        cache = self.__dict__.setdefault("_shapes", {})
        got = cache.get(id(patterns))
        if got is None or got[0] is not patterns:
            got = cache[id(patterns)] = (patterns, {})
        return got[1]

    def _unwrapped(self, name: str, seg: Segment, buf, line_start: int, line_end: int,
                   have: int) -> Segment:
        """``seg`` (a whole line) with a token that a hard wrap split between it and the lines
        around it redacted (redact_wrapped_line): the evidence and its values are redacted
        line by line later, where neither half of the token is recognised. Only the words at
        the line's edges and their neighbours' are looked at, unless one of the joined words is
        a secret (or a neighbour is one word that may go on further)."""
        text = seg.text
        if not text:
            return seg
        nxt = line_end + 1
        stop = min(have, nxt + WRAP_CONTEXT_BYTES)
        suspect = False
        if text[-1] in _WORD_CHARS and nxt < have:
            m = _WRAP_HEAD_BYTES.match(buf, nxt, stop)
            if m is not None:
                end = m.end(1)
                tail = text[len(text.rstrip(_WORD_STR)):]
                suspect = (end == stop or buf[end] in _LINE_END_BYTES
                           or secret_word(tail + m.group(1).decode("ascii")))
        # the previous line, when the buffer starts with this one: the end of the last chunk
        carry = self._wrap_carry.get(name, b"")[:-1] if line_start == 0 else b""
        prev_raw: bytes | None = None  # the line before, read once: it is looked at, then joined
        if (line_start > 0 or carry) and (text[0] in _WORD_CHARS or suspect):
            prev_raw = (carry if line_start == 0 else
                        bytes(buf[max(0, line_start - 1 - WRAP_CONTEXT_BYTES):line_start - 1]))
        if not suspect and text[0] in _WORD_CHARS and prev_raw is not None:
            prev = prev_raw.rstrip(b"\r")
            word = prev[len(prev.rstrip(_WORD_BYTES_STR)):]
            if word:
                whole = len(word) == len(prev) or prev[-len(word) - 1] in _LINE_END_BYTES
                suspect = whole or secret_word(
                    word.decode("ascii") + text[:len(text) - len(text.lstrip(_WORD_STR))])
        if not suspect:
            return seg
        before = prev_raw.decode("utf-8", "replace") if prev_raw is not None else ""
        after = bytes(buf[nxt:stop]).decode("utf-8", "replace") if nxt < have else ""
        out = redact_wrapped_line(text, before, after)
        return seg if out == text else dataclasses.replace(seg, text=out)

    def _over_line_cap(self, name: str, line: int, pid: str, buf, line_start: int,
                       seg_start: int, seg_end: int, line_end: int) -> bool:
        """True when this hit is one too many for its huge line: windowed hits (no separator
        near them) of one pattern are matched one by one up to MAX_WINDOW_MATCHES_PER_LINE per
        physical line, then only counted (see _cap_notes)."""
        if not (seg_start > line_start and buf[seg_start - 1] != 13
                or seg_end < line_end and buf[seg_end] != 13):
            return False  # a whole \r-delimited segment, not a window of a huge one
        if self._huge_line != (name, line):
            self._huge_line = (name, line)
            self._huge_matched = {}
        n = self._huge_matched.get(pid, 0)
        if n < MAX_WINDOW_MATCHES_PER_LINE:
            self._huge_matched[pid] = n + 1
            return False
        k = (name, line, pid)
        self._huge_skipped[k] = self._huge_skipped.get(k, 0) + 1
        return True

    def _cap_notes(self, name: str) -> None:
        for (fname, line, pid), skipped in list(self._huge_skipped.items()):
            if fname != name:
                continue
            del self._huge_skipped[(fname, line, pid)]
            held = skipped + MAX_WINDOW_MATCHES_PER_LINE
            self.notes.append(
                f"{name}:{line}: one line without line breaks holds {held:,} "
                f"candidates of pattern {pid}; the first {MAX_WINDOW_MATCHES_PER_LINE:,} were "
                f"matched one by one (counted in the findings), {skipped:,} more were not (cost cap)")

    def _emit(self, pat: Pattern, ev: Evidence, values: dict) -> None:
        if pat.is_timeline:
            self.timeline.add(pat.id, ev, values)
        elif pat.is_fact:
            self.facts.add(pat.emits[5:], ev, values)
        else:
            self.symptoms.add(pat.tally_kind, pat.id, pat.strength, ev, values)

    def _sample_timeline(self, buf, cut, have, consumed, stride, mark) -> tuple[list[tuple], int]:
        """Big files: read the timeline in small windows, one per ``stride`` bytes of the file.

        A window starts at the first line start at or after its mark (an absolute offset, a
        multiple of ``stride``) and belongs to the chunk holding that line start, so the
        windows do not depend on where chunks (or parallel ranges) are cut. Returns (offset,
        pattern index, segment, values), sorted by offset, first hit of each timeline pattern
        per window; and the next mark to handle.
        """
        out: list[tuple] = []
        if not self.timeline_patterns or not cut:
            return out, mark
        windows: list[tuple[int, bytes]] = []  # (offset in buf, bytes)
        while True:
            rel = mark - consumed
            if rel <= 0 or buf[rel - 1:rel] == b"\n":
                begin = max(rel, 0)
            else:
                begin = buf.find(b"\n", rel - 1, have) + 1
                if begin == 0:
                    break  # no line start yet: the next chunk has it
            if begin >= cut:
                break
            mark += stride
            window = bytes(buf[begin:min(begin + TIMELINE_WINDOW_BYTES, have)])
            wcut = window.rfind(b"\n") + 1
            # a window ends its last line (one without a newline gets one, so that windows
            # joined below never share a line)
            windows.append((begin, window[:wcut] if wcut else window + b"\n"))
        if not windows:
            return out, mark
        # one engine call for all the chunk's windows, joined
        joined = b"".join(w for _, w in windows)
        starts = list(itertools.accumulate((len(w) for _, w in windows[:-1]), initial=0))
        taken: set[tuple[int, int]] = set()  # (window, pattern): its first hit only
        # (window, pattern) -> candidates its regex refused: a pattern whose prefilter hits lines
        # another format owns (the generic "step ... loss" on DeepSpeed's step lines) would cost
        # a regex per such line; after a few refusals in a window it is not tried there again
        refused: dict[tuple[int, int], int] = {}
        # a line is refused once per pattern: engines may report one line's prefilter hit once
        # (the literal engine) or at several offsets (Hyperscan reports every match end), and the
        # budget must count lines, or the two engines would give different timelines
        refused_line: dict[tuple[int, int], int] = {}
        for off, idx in self.engine_timeline.candidates(joined, len(joined)):
            k = bisect.bisect_right(starts, off) - 1
            if (k, idx) in taken or refused.get((k, idx), 0) >= TIMELINE_WINDOW_MISSES:
                continue
            ls, ss, se, _ = _segment_at(joined, off, len(joined))
            if refused_line.get((k, idx)) == ss:
                continue
            seg = normalize(joined[ss:se])
            values = self.timeline_patterns[idx].match(seg.text)
            if values is None:
                refused[k, idx] = refused.get((k, idx), 0) + 1
                refused_line[k, idx] = ss
                continue
            taken.add((k, idx))
            out.append((windows[k][0] + ls - starts[k], idx, seg, values))
        return out, mark  # windows and their candidates come in offset order


_OFFSET = itemgetter(0)
_NONE_REFUSED: frozenset[int] = frozenset()
_DIGIT_MASK = bytes.maketrans(b"123456789", b"000000000")


@dataclass
class _Shape:
    """What the digit-blind patterns (formats/digits.py) found on the lines of one shape (a
    segment's text with its ASCII digits made 0): a log of a million lines that differ only in
    their numbers runs each such regex once per shape, not once per line (issue 24). By pattern
    index: where the fields are in those that matched (and join no lines; Pattern.plan), the
    set of those that refused."""

    plans: dict[int, tuple[tuple[str, int, int, str], ...]] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)


def _shape_of(shapes: dict[bytes, _Shape], text: str) -> _Shape:
    """The _Shape of ``text`` in ``shapes``; at most MAX_SHAPES are kept (when full, the oldest
    half goes)."""
    key = text.encode("utf-8", "surrogatepass").translate(_DIGIT_MASK)
    shape = shapes.get(key)
    if shape is None:
        if len(shapes) >= MAX_SHAPES:
            for old in list(itertools.islice(shapes, MAX_SHAPES // 2)):
                del shapes[old]
        shape = shapes[key] = _Shape()
    return shape


def _segment_at(buf, off: int, have: int, line: tuple[int, int] | None = None
                ) -> tuple[int, int, int, int]:
    """(line start, segment start, segment end, line end) around offset ``off`` of ``buf[:have]``.

    A segment is the ``\r``/``\n``-delimited piece holding ``off``; inside a huge segment
    without separators only a window around ``off`` is kept. ``line`` is the (start, end) of a
    line already found for an earlier hit: a line holding many hits is searched once, and the
    ``\r`` searches look at most 4 windows away, so each hit costs a bounded amount of work
    (a 200 MB line with a million hits was quadratic).
    """
    if line is not None and line[0] <= off <= line[1]:
        line_start, line_end = line
    else:
        line_start = buf.rfind(b"\n", 0, off) + 1
        nl = buf.find(b"\n", off, have)
        line_end = nl if nl != -1 else have
    reach = 4 * SEGMENT_WINDOW + 1  # beyond this the segment is windowed anyway
    lo = max(line_start, off - reach)
    cr = buf.rfind(b"\r", lo, off)
    seg_start = cr + 1 if cr != -1 else lo
    hi = min(line_end, off + reach)
    cr = buf.find(b"\r", off, hi)
    seg_end = cr if cr != -1 else hi
    if seg_end - seg_start > 4 * SEGMENT_WINDOW:
        seg_start = max(seg_start, off - SEGMENT_WINDOW)
        seg_end = min(seg_end, off + SEGMENT_WINDOW)
    return line_start, seg_start, seg_end, line_end


def _next_lines(buf, line_end: int, n: int, have: int) -> list[str]:
    out: list[str] = []
    pos = line_end + 1
    for _ in range(n):
        if pos >= have:
            break
        nl = buf.find(b"\n", pos, have)
        end = nl if nl != -1 else have
        if end - pos > 4 * SEGMENT_WINDOW:
            end = pos + 4 * SEGMENT_WINDOW
        out.append(normalize(bytes(buf[pos:end])).text)
        pos = end + 1
    return out


def scan_files(paths: Iterable[str], engine: str = "auto",
               on_event: Callable[[str, Evidence, dict], None] | None = None,
               on_progress: ProgressFn | None = None, jobs: int | None = None) -> ScanResult:
    """Scan every path (``-`` = standard input) into one ScanResult; big regular files on
    ``jobs`` cores (None: default_jobs(); 1: one process)."""
    scanner = Scanner(engine=engine, on_progress=on_progress, jobs=jobs)
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

    #: Most bytes held while waiting for line ends; a longer unterminated line is scanned in
    #: pieces (like the batch scanner's giant lines) instead of growing without limit.
    MAX_PENDING_BYTES = 8 << 20

    def feed(self, data: bytes) -> None:
        self.bytes_read += len(data)
        self._buf += data
        end = len(self._buf)
        for _ in range(self.HOLD_BACK_LINES + 1):
            end = self._buf.rfind(b"\n", 0, end)
            if end <= 0:
                if len(self._buf) > self.MAX_PENDING_BYTES:
                    self._process(len(self._buf) - LOOKAHEAD_BYTES)
                return
        self._process(end + 1)

    def flush(self, final: bool = False) -> None:
        """Scan the held-back complete lines (and, when ``final``, a last line without newline)."""
        cut = len(self._buf) if final else self._buf.rfind(b"\n") + 1
        if cut:
            self._process(cut)

    def _process(self, cut: int) -> None:
        s = self.scanner
        hits = hidden_candidates(s.engine_full, self._buf, cut,
                                 s.engine_full.candidates(self._buf, cut))
        self._line = s._process(self.name, self._buf, cut, len(self._buf), hits, [], s.patterns,
                                self._line, self._rank, self.on_event)
        s._wrap_carry[self.name] = self._buf[max(0, cut - WRAP_CONTEXT_BYTES):cut]
        self._buf = self._buf[cut:]

    def result(self) -> ScanResult:
        res = self.scanner.result()
        res.files = [FileSummary(path=self.name, lines=self.lines_read, bytes=self.bytes_read)]
        return res
