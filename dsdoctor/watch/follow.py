"""Follow several logs of one run together (one per rank or node) and track its progress.

The tailers (tailer.py) share one Scanner, so symptoms from every log aggregate into one analysis;
their timeline events feed the stall detector (progress.py). Used by ``watch --plain`` (plain.py)
and the TUI (app.py); it imports no UI library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import FileSummary, Scanner
from dsdoctor.model import Evidence, Fact
from dsdoctor.watch.progress import (
    FLOOR_SECONDS,
    BarTracker,
    StallChange,
    StallDetector,
    TqdmTick,
)
from dsdoctor.watch.series import LiveSeries
from dsdoctor.watch.tailer import Tailer, WatchState, watch_state


class Follower:
    """Several tailers, one scanner, one stall detector."""

    def __init__(self, paths: list[str], inputs: AnalysisInputs, from_start: bool = True,
                 stall_after: float | None = None, clock: Callable[[], float] = time.monotonic,
                 floor: float = FLOOR_SECONDS):
        self.inputs = inputs
        self.paths = list(paths)
        self.scanner = Scanner(engine=inputs.engine)
        self.tailers = [Tailer(p, inputs, from_start=from_start, scanner=self.scanner)
                        for p in self.paths]
        self.stall = StallDetector(stall_after, clock=clock, floor=floor)
        self._caught_up = False
        self._changes: list[StallChange] = []
        self.series = LiveSeries()
        self._lock = threading.Lock()
        self.bars = BarTracker()  # the run's tqdm bar: current step/total, rate and ETA
        for t in self.tailers:
            t.on_progress = self._on_progress
            t.on_tick = self._on_tick
            t.on_overflow = self._on_overflow
        self.state = WatchState()
        # the launcher's "spawned with command" lines (pid and argv), from the last snapshot:
        # watch LOG finds the ranks' pids in them (spawned.py)
        self.launch_facts: tuple[Fact, ...] = ()

    @property
    def path(self) -> str:
        return ", ".join(self.paths)

    def _on_progress(self, ev: Evidence, values: dict) -> None:
        step = values.get("step")
        self.series.add(values)
        change = self.stall.progress(ev.location, ev.text, step if isinstance(step, int) else None)
        if change:
            with self._lock:
                self._changes.append(change)

    def _on_overflow(self, ev: Evidence, values: dict) -> None:
        # a skipped step is no progress, but its scale is what collapses (series.py)
        self.series.overflow(ev.rank, values)

    @property
    def bar(self) -> TqdmTick | None:
        """The last tick of the run's tqdm bar, if it has one."""
        return self.bars.main

    def _on_tick(self, location: str, tick: TqdmTick) -> None:
        if self.bars.is_step(tick):
            change = self.stall.progress(location, tick.text, tick.n)
        else:
            change = self.stall.busy()
        if change:
            with self._lock:
                self._changes.append(change)

    @property
    def caught_up(self) -> bool:
        """The backlog already in the logs has been read."""
        return self._caught_up

    def _lines(self) -> int:
        return sum(t.lines_read for t in self.tailers)

    def poll(self) -> bool:
        """Read what is new in every log; True when something was read."""
        before = self._lines()
        read = False
        for t in self.tailers:
            read |= t.poll()
        if not read:
            self.flush()
            if not self._caught_up:  # the end of every log reached for the first time
                self._caught_up = True
                self.stall.caught_up()
        if self._lines() != before:
            change = self.stall.activity()
            if change:
                with self._lock:
                    self._changes.append(change)
        return read

    def flush(self, final: bool = False) -> None:
        for t in self.tailers:
            t.flush(final=final)

    def take_events(self) -> list[tuple[str, Evidence, dict]]:
        out: list[tuple[str, Evidence, dict]] = []
        for t in self.tailers:
            out.extend(t.take_events())
        return out

    def take_changes(self) -> list[StallChange]:
        """Stall transitions since the last call (checks the threshold now)."""
        change = self.stall.check()
        with self._lock:
            if change:
                self._changes.append(change)
            out, self._changes = self._changes, []
        return out

    def snapshot(self) -> WatchState:
        res = self.scanner.result()
        res.files = [FileSummary(path=t.path, lines=t.tail.lines_read, bytes=t.tail.bytes_read)
                     for t in self.tailers]
        self.launch_facts = tuple(f for f in res.facts
                                  if f.name == "launch-argv" and "pid" in f.values)
        self.state = watch_state(self.inputs, res, self.state, self.series.skipped)
        return self.state
