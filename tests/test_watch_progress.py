"""The stall detector (dsdoctor/watch/progress.py) with a hand-moved clock: no test sleeps."""

from __future__ import annotations

import pytest

from dsdoctor.watch.progress import ADAPTIVE_FACTOR, FLOOR_SECONDS, MIN_ADAPTIVE_SECONDS, StallDetector

# A Trainer log dict (real format, from dsdoctor/logs/formats/hf-trainer.yaml's samples)
DICT = "{'loss': 1.6228, 'grad_norm': 9.305521011352539, 'learning_rate': 4.9424511162240815e-06, 'epoch': 0.16}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def steps(det: StallDetector, clock: Clock, n: int, every: float, first_step: int = 1) -> None:
    for i in range(n):
        clock.now += every
        det.progress(f"train.log:{i + 1}", DICT, first_step + i)


def test_floor_before_a_few_intervals():
    clock = Clock()
    det = StallDetector(clock=clock)
    assert det.threshold() == (FLOOR_SECONDS, False)
    clock.now += FLOOR_SECONDS - 1
    assert det.check() is None
    clock.now += 1
    change = det.check()
    assert change is not None and change.kind == "stalled"
    assert "no progress line seen yet" in change.status.describe()


def test_adaptive_threshold_is_20x_the_median_interval_with_a_minimum():
    clock = Clock()
    det = StallDetector(clock=clock)
    steps(det, clock, 6, every=10.0)  # 5 intervals of 10 s
    assert det.threshold() == (ADAPTIVE_FACTOR * 10.0, True)
    fast = StallDetector(clock=clock)
    steps(fast, clock, 6, every=0.5)
    assert fast.threshold() == (MIN_ADAPTIVE_SECONDS, True)


def test_stall_fires_once_with_the_last_progress_line_and_clears_on_progress():
    clock = Clock()
    det = StallDetector(stall_after=30, clock=clock)
    steps(det, clock, 3, every=2.0)
    clock.now += 29.9
    assert det.check() is None
    clock.now += 0.2
    change = det.check()
    assert change is not None and change.kind == "stalled"
    assert change.status.idle_seconds == pytest.approx(30.1)
    assert "no progress for 30s" in change.status.describe()
    assert "train.log:3" in change.status.describe()
    clock.now += 100
    assert det.check() is None  # raised once per stall
    assert det.status().stalled
    resumed = det.progress("train.log:4", DICT, 4)
    assert resumed is not None and resumed.kind == "resumed"
    assert resumed.stalled_for == pytest.approx(100)
    assert not det.status().stalled


def test_output_counts_as_progress_only_before_the_first_progress_line():
    clock = Clock()
    det = StallDetector(stall_after=10, clock=clock)
    clock.now += 9
    det.activity()  # startup output (config dump, model loading) keeps it alive
    clock.now += 9
    assert det.check() is None
    det.progress("train.log:1", DICT, 1)
    clock.now += 9
    det.activity()  # after steps are seen, warnings without steps are not progress
    clock.now += 2
    change = det.check()
    assert change is not None and change.kind == "stalled"


def test_events_read_together_are_not_an_interval():
    clock = Clock()
    det = StallDetector(clock=clock)
    for _ in range(10):  # one poll read ten step lines: same clock value
        det.progress("train.log:1", DICT, None)
    assert det.threshold() == (FLOOR_SECONDS, False)


def test_step_rate_from_step_numbers_else_events():
    clock = Clock()
    det = StallDetector(clock=clock)
    steps(det, clock, 5, every=2.0, first_step=10)  # steps 10..14 over 8 s
    assert det.steps_per_second() == pytest.approx(4 / 8)
    det2 = StallDetector(clock=clock)
    for i in range(5):
        clock.now += 4.0
        det2.progress(f"t.log:{i}", DICT, None)
    assert det2.steps_per_second() == pytest.approx(4 / 16)


def test_stall_after_must_be_positive():
    with pytest.raises(ValueError):
        StallDetector(stall_after=0)


def test_the_same_step_from_another_rank_is_not_an_interval():
    clock = Clock()
    det = StallDetector(clock=clock)
    for step in range(1, 7):  # steps 10 s apart, each printed by rank 0 then, 0.5 s later, rank 1
        clock.now += 9.5
        det.progress("rank0.log:1", DICT, step)
        clock.now += 0.5
        det.progress("rank1.log:1", DICT, step)
    # intervals: 9.5 s between steps only (the 0.5 s rank-to-rank gaps are not counted)
    assert det.threshold() == (ADAPTIVE_FACTOR * 9.5, True)
