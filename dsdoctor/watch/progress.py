"""Progress and stalls for ``dsdoctor watch``: a silent hang must not look like a healthy run.

Progress is any timeline event the scanner emits (DeepSpeed step lines, Trainer log dicts, tqdm bars
with a loss, Megatron iterations, ...) and any tqdm tick, with or without a loss (found here in the
raw bytes, not by a format pattern: analyze's timeline stays as it is). Until the first one
arrives, any new log line counts as activity instead, so that a job that never prints steps
(inference, ``generate``) is still judged by its output going quiet.
The clock is injected, so tests move time by hand instead of sleeping.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Before a few intervals are seen there is nothing to be adaptive about: startup (model loading,
# JIT op builds, the first collective) legitimately takes minutes, so the floor is generous.
FLOOR_SECONDS = 300.0
# Once adaptive, never below this: evaluation, checkpoint saves and logging pauses take tens of
# seconds even when steps take a fraction of one.
MIN_ADAPTIVE_SECONDS = 60.0
ADAPTIVE_FACTOR = 20.0
MIN_INTERVALS = 4  # intervals between progress events needed before the threshold adapts
HISTORY = 64  # recent progress events kept for the median interval and the step rate


@dataclass(frozen=True)
class ProgressMark:
    """One progress event: when it arrived and the line that showed it."""

    at: float  # clock time it was read
    location: str  # file:line
    text: str
    step: int | None = None


@dataclass(frozen=True)
class StallStatus:
    """What the detector says now: stalled or not, for how long, against which threshold."""

    stalled: bool
    idle_seconds: float  # since the last progress (or, before any, the last activity)
    threshold: float
    adaptive: bool  # threshold from the run's own pace (not --stall-after, not the floor)
    last: ProgressMark | None  # the last progress line, None before any
    progress_events: int
    steps_per_second: float | None  # from step numbers when printed, else events per second

    def describe(self) -> str:
        """One line: the stall, the time since progress and the last progress line."""
        how = "adaptive" if self.adaptive else "threshold"
        if self.last is None:
            return (f"possible hang: no new output for {self.idle_seconds:.0f}s ({how} "
                    f"{self.threshold:.0f}s) and no progress line seen yet (step, loss, "
                    "Trainer dict or tqdm bar)")
        return (f"possible hang: no progress for {self.idle_seconds:.0f}s ({how} "
                f"{self.threshold:.0f}s); last progress {self.last.location}: "
                f"{self.last.text[:160]}")


@dataclass(frozen=True)
class StallChange:
    """A transition: ``stalled`` (a possible hang was raised) or ``resumed`` (it cleared)."""

    kind: str  # "stalled" | "resumed"
    status: StallStatus
    stalled_for: float = 0.0  # for "resumed": how long the stall lasted


class StallDetector:
    """Watches the gaps between progress events and raises a possible hang, once per stall."""

    def __init__(self, stall_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 floor: float = FLOOR_SECONDS):
        if stall_after is not None and stall_after <= 0:
            raise ValueError("stall_after must be positive")
        self.stall_after = stall_after
        self.clock = clock
        self.floor = floor
        self._marks: deque[ProgressMark] = deque(maxlen=HISTORY)
        self._intervals: deque[float] = deque(maxlen=HISTORY)
        self._count = 0
        self._last_activity = clock()
        self._stalled_at: float | None = None

    def progress(self, location: str, text: str, step: int | None = None) -> StallChange | None:
        """A progress event was read now; returns ``resumed`` when it ends a stall."""
        now = self.clock()
        if self._marks:
            prev = self._marks[-1]
            gap = now - prev.at
            # events read in the same poll share one clock value, and every rank prints the same
            # step: neither is an interval between steps
            same_step = step is not None and step == prev.step
            if gap > 1e-3 and not same_step:
                self._intervals.append(gap)
        self._marks.append(ProgressMark(now, location, text, step))
        self._count += 1
        self._last_activity = now
        return self._resume(now)

    def busy(self) -> StallChange | None:
        """Something that is not a step moved (an evaluation bar, a data-loading bar): the run
        is alive, but the gap is not an interval between steps."""
        now = self.clock()
        self._last_activity = now
        return self._resume(now)

    def activity(self) -> StallChange | None:
        """New log lines were read. Before any progress event they count as progress."""
        if self._marks:
            return None
        now = self.clock()
        self._last_activity = now
        return self._resume(now)

    def caught_up(self) -> None:
        """The backlog already in the logs has been read: the events read so far came in one
        burst, so their spacing says nothing about the run's pace. Only the last one is kept (it
        is still the last progress); the rate and the adaptive threshold start from live events."""
        if self._marks:
            last = self._marks[-1]
            self._marks.clear()
            self._marks.append(last)
        self._intervals.clear()

    def _resume(self, now: float) -> StallChange | None:
        if self._stalled_at is None:
            return None
        lasted = now - self._stalled_at
        self._stalled_at = None
        return StallChange("resumed", self.status(), stalled_for=lasted)

    def intervals(self) -> list[float]:
        """The recent intervals between progress events (step times), oldest first."""
        return list(self._intervals)

    def threshold(self) -> tuple[float, bool]:
        """(seconds, adaptive): --stall-after, else 20x the median interval, else the floor."""
        if self.stall_after is not None:
            return self.stall_after, False
        if len(self._intervals) >= MIN_INTERVALS:
            median = statistics.median(self._intervals)
            return max(MIN_ADAPTIVE_SECONDS, ADAPTIVE_FACTOR * median), True
        return self.floor, False

    def steps_per_second(self) -> float | None:
        """Step rate over the recent events: from printed step numbers, else events per second."""
        if len(self._marks) < 2:
            return None
        stepped = [m for m in self._marks if m.step is not None]
        if len(stepped) >= 2 and stepped[-1].step > stepped[0].step:  # type: ignore[operator]
            span = stepped[-1].at - stepped[0].at
            if span > 0:
                return (stepped[-1].step - stepped[0].step) / span  # type: ignore[operator]
        first, last = self._marks[0], self._marks[-1]
        span = last.at - first.at
        if span <= 0:
            return None
        return (len(self._marks) - 1) / span

    def status(self) -> StallStatus:
        now = self.clock()
        limit, adaptive = self.threshold()
        return StallStatus(
            stalled=self._stalled_at is not None,
            idle_seconds=max(0.0, now - self._last_activity),
            threshold=limit,
            adaptive=adaptive,
            last=self._marks[-1] if self._marks else None,
            progress_events=self._count,
            steps_per_second=self.steps_per_second(),
        )

    def check(self) -> StallChange | None:
        """Call periodically: returns ``stalled`` the first time the gap passes the threshold."""
        if self._stalled_at is not None:
            return None
        now = self.clock()
        limit, _ = self.threshold()
        if now - self._last_activity < limit:
            return None
        self._stalled_at = now
        return StallChange("stalled", self.status())


# A tqdm tick as tqdm's default format prints it: ``[desc: ] NN%|bar| n/total [elapsed<remaining,
# rate unit/s]`` (or ``s/unit`` below one per second, ``?it/s`` on the first tick); a postfix may
# follow the rate (``, loss=nan, v_num=0``). Ticks written with ``\r`` are often glued on one line.
_TICK = re.compile(rb"(\d{1,3})%\|[^|\r\n]{0,400}\|\s*(\d+)/(\d+)\s*\[([\d:]+)<([\d:?]+),\s*"
                   rb"([\d.]+|\?)\s*([A-Za-z]*/s|s/[A-Za-z]+)")
_DESC = re.compile(rb"([A-Za-z][\w .()/-]{0,60}?):\s*$")
# Bars that are not training steps: loading, downloading and data preparation (``Loading checkpoint
# shards``, datasets' ``Map``), evaluation and generation. They keep the stall clock alive, but
# their ticks are not steps (their pace says nothing of a training step's).
_NOT_TRAINING = re.compile(r"load|shard|download|fetch|extract|map|token|filter|prepar|"
                           r"eval|predict|valid|test|generat|sampl|infer", re.IGNORECASE)
MAX_TICKS = 8  # ticks parsed per read, from its end
TICK_CARRY_BYTES = 600  # a tick cut by a chunk boundary is completed by the next chunk


@dataclass(frozen=True)
class TqdmTick:
    """One tqdm tick: n of total, its rate and the remaining time tqdm estimates."""

    n: int
    total: int
    desc: str  # tqdm's description (``Loading checkpoint shards``); "" for Trainer's bar
    rate: float | None  # units per second (``s/it`` converted); None on the first tick (``?``)
    remaining: str  # tqdm's own ETA text, ``01:40``; "?" when unknown
    text: str  # the tick as printed

    @property
    def training(self) -> bool:
        """A training bar (not loading, data preparation, evaluation or generation)."""
        return not _NOT_TRAINING.search(self.desc)

    def describe(self) -> str:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        rate = ""
        if self.rate is not None:
            rate = f", {self.rate:.2f} it/s" if self.rate >= 1 else f", {1 / self.rate:.2f} s/it"
        eta = f", ETA {self.remaining}" if self.remaining not in ("?", "") else ""
        return f"{self.desc + ' ' if self.desc else ''}{self.n}/{self.total}{pct}{rate}{eta}"


def find_ticks(data: bytes) -> list[tuple[int, TqdmTick]]:
    """The tqdm ticks in ``data`` (offset, tick), only the last one of each bar: the ticks of one
    read all arrived at the same moment."""
    last: dict[tuple[str, int], tuple[int, TqdmTick]] = {}
    for m in _last_ticks(data):
        head = data[max(0, m.start() - 80):m.start()]
        d = _DESC.search(head)
        desc = d.group(1).decode("utf-8", "replace").strip() if d else ""
        rate_text, unit = m.group(6), m.group(7)
        rate: float | None = None
        if rate_text != b"?":
            value = float(rate_text)
            rate = (1 / value if value else None) if unit.startswith(b"s/") else value
        total = int(m.group(3))
        tick = TqdmTick(n=int(m.group(2)), total=total, desc=desc, rate=rate,
                        remaining=m.group(5).decode(), text=m.group(0).decode("utf-8", "replace"))
        last.setdefault((desc, total), (m.start(), tick))  # from the end: the first is the last
    return sorted(last.values(), key=lambda pair: pair[0])


def _last_ticks(data: bytes) -> list[re.Match[bytes]]:
    """The last MAX_TICKS ticks of ``data``, last first. Found from its end with ``rfind``: a read
    at 10,000 lines/s holds hundreds of ticks, and only each bar's last one matters (a bar whose
    ticks are all older than the others' last MAX_TICKS has moved anyway: its step shows later)."""
    out: list[re.Match[bytes]] = []
    end = len(data)
    while len(out) < MAX_TICKS:
        pos = data.rfind(b"%|", 0, end)
        if pos < 0:
            break
        m = _TICK.search(data, max(0, pos - 3), pos + 600)
        if m is not None and m.end(1) == pos:
            out.append(m)
        end = pos
    return out


class BarTracker:
    """Which tqdm bar is the run's: the training bar with the largest total seen (Trainer's bar
    over the run, not its evaluation bar); the others only show the run is alive."""

    def __init__(self) -> None:
        self.main: TqdmTick | None = None

    def is_step(self, tick: TqdmTick) -> bool:
        """Record ``tick``; True when it is a step of the run's bar."""
        if not tick.training:
            return False
        main = self.main
        if main is None or tick.total > main.total or (tick.total == main.total
                                                         and tick.desc == main.desc):
            self.main = tick
            return True
        return False
