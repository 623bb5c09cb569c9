"""Live series for the TUI's plots: loss, grad norm, loss scale and step time, as text sparklines.

Values come from the progress events (timeline points) as they are read; only the recent ones are
kept. Non-finite values (a NaN loss) are shown as a gap mark, not dropped: they are the news.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

BARS = "▁▂▃▄▅▆▇█"
NONFINITE = "!"
KEEP = 240

SERIES = (("loss", "loss"), ("grad_norm", "grad norm"), ("loss_scale", "loss scale"))


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """The last ``width`` values as bar characters scaled between their min and max."""
    tail = list(values)[-width:]
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


class LiveSeries:
    """Recent values of each plotted series."""

    def __init__(self, keep: int = KEEP):
        self.values: dict[str, deque[float]] = {key: deque(maxlen=keep) for key, _ in SERIES}
        self.skipped = 0  # steps the loss scaler skipped (DeepSpeed's step lines say how many)

    def add(self, values: dict) -> None:
        for key, _ in SERIES:
            v = values.get(key)
            if isinstance(v, (int, float)):
                self.values[key].append(float(v))
        skipped = values.get("skipped")
        if isinstance(skipped, int):
            self.skipped = max(self.skipped, skipped)

    def lines(self, step_seconds: Iterable[float] = (), width: int = 40) -> list[str]:
        """One line per series that has values: label, last value, sparkline."""
        out = []
        for key, label in SERIES:
            vals = self.values[key]
            if vals:
                extra = f" ({self.skipped} skipped)" if key == "loss_scale" and self.skipped else ""
                out.append(f"{label:<10} {vals[-1]:>10.4g}{extra} {sparkline(vals, width)}")
        steps = list(step_seconds)
        if steps:
            out.append(f"{'step time':<10} {steps[-1]:>9.3g}s {sparkline(steps, width)}")
        return out
