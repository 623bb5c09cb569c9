"""Live series for the TUI's plots: loss, grad norm, loss scale, throughput and step time, as text
sparklines.

Values come from the progress events (timeline points) as they are read, and the loss scale and the
skipped steps also from the scaler's ``OVERFLOW! ... Skipping step`` lines: DeepSpeed's step lines
print neither the scale nor a skip until the next ``steps_per_print``, and the scale collapsing is
the news. Only the recent values are kept. Non-finite values (a NaN loss) are shown as a gap mark,
not dropped.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

BARS = "▁▂▃▄▅▆▇█"
NONFINITE = "!"
KEEP = 240

SERIES = (("loss", "loss"), ("grad_norm", "grad norm"), ("loss_scale", "loss scale"),
          ("throughput", "samples/s"))
LOG_SCALE = {"loss_scale"}  # plotted on a log scale
LABEL = 10  # label column of a plot cell
MIN_SPARK = 12  # narrowest sparkline worth a cell of its own
CELL_OVERHEAD = LABEL + 13  # label, value, the spaces between them and the cells


def sparkline(values: Sequence[float], width: int = 40, log: bool = False) -> str:
    """The last ``width`` values as bar characters scaled between their min and max; ``log``:
    on a log scale (a loss scale halves: each halving one step down, not a cliff then a floor)."""
    tail = list(values)[-width:]
    if log:
        tail = [math.log2(v) if math.isfinite(v) and v > 0 else math.nan for v in tail]
    finite = [v for v in tail if math.isfinite(v)]
    if not finite:
        return NONFINITE * len(tail)
    low, high = min(finite), max(finite)
    span = high - low
    out = []
    for v in tail:
        if not math.isfinite(v):
            out.append(NONFINITE)
        elif span == 0:
            out.append(BARS[len(BARS) // 2])
        else:
            out.append(BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))])
    return "".join(out)


def _value(v: float) -> str:
    """A plotted value in 10 characters: a loss scale as the integer it is (65536, not 6.554e+04)."""
    if math.isfinite(v) and v == int(v) and abs(v) < 1e10:
        return str(int(v))
    return f"{v:.4g}"


class LiveSeries:
    """Recent values of each plotted series."""

    def __init__(self, keep: int = KEEP):
        self.values: dict[str, deque[float]] = {key: deque(maxlen=keep) for key, _ in SERIES}
        self.skipped = 0  # steps the loss scaler skipped: the step lines' count or the overflows
        self.overflows: dict[int | None, int] = {}  # OVERFLOW lines by the rank that printed them
        self._scale_rank: int | None = None  # the one rank whose overflow lines feed the scale

    def add(self, values: dict) -> None:
        for key, _ in SERIES:
            v = values.get(key)
            if isinstance(v, (int, float)):
                self.values[key].append(float(v))
        skipped = values.get("skipped")
        if isinstance(skipped, int):
            self.skipped = max(self.skipped, skipped)

    def overflow(self, rank: int | None, values: dict) -> None:
        """One ``OVERFLOW! ... Skipping step`` line: a skipped step (hysteresis too: the step is
        skipped either way) and, when printed, the scale it goes to. Counted per printing rank and
        the most taken: the same event printed by several ranks is one skip, not several."""
        self.overflows[rank] = self.overflows.get(rank, 0) + 1
        self.skipped = max(self.skipped, self.overflows[rank])
        if self._scale_rank is None:
            self._scale_rank = rank
        if rank != self._scale_rank:
            return
        scale = values.get("next_scale", values.get("attempted_scale"))
        if isinstance(scale, (int, float)) and not isinstance(scale, bool):
            self.values["loss_scale"].append(float(scale))

    def cells(self, step_seconds: Iterable[float] = (), width: int = 40) -> list[str]:
        """One cell per series that has values: label, last value, sparkline (``width`` values);
        a single value is a sparkline too (a short sample still shows its plots)."""
        out = []
        for key, label in SERIES:
            vals = self.values[key]
            if vals:
                spark = sparkline(vals, width, log=key in LOG_SCALE)
                out.append(f"{label:<{LABEL}} {_value(vals[-1]):>10} {spark}")
        steps = list(step_seconds)
        if steps:
            out.append(f"{'step time':<{LABEL}} {steps[-1]:>9.3g}s {sparkline(steps, width)}")
        return out

    def lines(self, step_seconds: Iterable[float] = (), width: int = 40) -> list[str]:
        """One line per series (``watch --plain`` and the tests)."""
        return self.cells(step_seconds, width)

    def layout(self, step_seconds: Iterable[float], columns: int) -> list[str]:
        """The cells side by side in ``columns`` characters: as few lines as fit (loss, grad norm,
        loss scale and throughput in view at once), then the sparklines as wide as room allows."""
        steps = list(step_seconds)
        count = len(self.cells(steps, 1))
        if not count:
            return []
        fit = max(1, columns // (CELL_OVERHEAD + MIN_SPARK))  # most cells one line holds
        lines = -(-count // fit)
        per_line = -(-count // lines)  # balanced: 5 cells in 2 lines are 3 and 2, not 4 and 1
        cell = columns // per_line
        cells = [c.ljust(cell - 1) for c in self.cells(steps, max(1, cell - CELL_OVERHEAD))]
        return [" ".join(cells[i:i + per_line]).rstrip() for i in range(0, count, per_line)]
