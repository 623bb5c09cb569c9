"""A loss that diverges without ever becoming NaN: the not-learning fate's finite case.

A run whose logged loss climbs far above its own minimum and stays there (artidoro/qlora#78:
2.18 -> 3.39 -> 9.20 -> 50.79 with paged_adamw_8bit) trains no better than a NaN does, but no
symptom line says so. What counts, judged per log file on the first rank's points:
- enough points that one spike is not a trend (MIN_POINTS);
- a positive minimum (a cross-entropy-like loss; RL losses near or below zero are not judged,
  where a ratio means nothing);
- the last points all far above that minimum, both as a ratio and in absolute terms, so that a
  loss wandering between 0.01 and 0.05 late in training is not called a divergence;
- the newest point the highest of the run: a loss that climbed and came back down recovered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dsdoctor.model import Evidence, TimelinePoint

#: fewer logged losses than this say nothing about a trend
MIN_POINTS = 4
#: every one of the last points is at least this many times the run's minimum ...
RISE_RATIO = 3.0
#: ... and at least this much above it (in the loss's own units: nats for cross-entropy)
RISE_ABSOLUTE = 2.0
#: the last points that must all stay up: a quarter of the run, at least two
TAIL_SHARE = 0.25


@dataclass(frozen=True)
class Divergence:
    """The loss rose from ``low`` (at ``low_at``) to ``last`` (at ``last_at``) over ``points``."""

    low: float
    low_at: Evidence
    last: float
    last_at: Evidence
    points: int

    def phrase(self) -> str:
        return (f"the loss rose from {self.low:g} (line {self.low_at.line}) to {self.last:g} "
                f"(line {self.last_at.line}) and stayed up: the run diverged ({self.points} "
                "logged points, never NaN)")


def diverged(timeline: Sequence[TimelinePoint]) -> Divergence | None:
    """The first log file whose loss diverged, or None."""
    by_file: dict[str, list[TimelinePoint]] = {}
    for p in timeline:
        if p.loss is not None and math.isfinite(p.loss):
            by_file.setdefault(p.file, []).append(p)
    for points in by_file.values():
        found = _diverged_series(_first_rank(points))
        if found is not None:
            return found
    return None


def _first_rank(points: list[TimelinePoint]) -> list[TimelinePoint]:
    """One rank's points in line order: several ranks' interleaved losses are not one series."""
    ranks = {p.rank for p in points}
    keep = min((r for r in ranks if r is not None), default=None) if None not in ranks else None
    return sorted((p for p in points if p.rank == keep), key=lambda p: p.line)


def _diverged_series(points: list[TimelinePoint]) -> Divergence | None:
    if len(points) < MIN_POINTS:
        return None
    losses = [p.loss for p in points if p.loss is not None]
    low = min(losses)
    if low <= 0:
        return None
    tail = max(2, math.ceil(len(losses) * TAIL_SHARE))
    floor = max(low * RISE_RATIO, low + RISE_ABSOLUTE)
    if losses.index(low) >= len(losses) - tail or any(v < floor for v in losses[-tail:]):
        return None
    if losses[-1] < max(losses):
        return None  # it came back down from its peak: not (yet) a divergence
    low_point, last_point = points[losses.index(low)], points[-1]
    return Divergence(low, _evidence(low_point), losses[-1], _evidence(last_point), len(losses))


def _evidence(p: TimelinePoint) -> Evidence:
    return Evidence(p.file, p.line, f"loss {p.loss:g}" + (f" at step {p.step}" if p.step else ""),
                    p.rank)
