"""The finite divergence of the not-learning fate (diagnose/divergence.py).

The rising series is artidoro/qlora#78's logged losses (tests/data/real_logs_wild/not-learning__
qlora78-*.log, one Trainer dict every 10 steps); the others are shapes healthy runs show."""

from __future__ import annotations

from dsdoctor.diagnose.divergence import diverged
from dsdoctor.model import TimelinePoint

QLORA78 = [2.183, 3.3851, 9.2042, 50.7927]


def series(losses, file="train.log", rank=None, first_line=1, step=10):
    return [TimelinePoint(file, first_line + 3 * i, "hf-log-dict", step=step * (i + 1),
                          loss=v, rank=rank) for i, v in enumerate(losses)]


def test_qlora78_losses_diverge():
    found = diverged(series(QLORA78))
    assert found is not None
    assert (found.low, found.last, found.points) == (2.183, 50.7927, 4)
    assert (found.low_at.line, found.last_at.line) == (1, 10)
    assert "2.183" in found.phrase() and "50.7927" in found.phrase()


def test_a_falling_loss_does_not():
    assert diverged(series([4.642, 3.1, 2.2, 1.9, 1.5, 1.172])) is None


def test_too_few_points_say_nothing():
    assert diverged(series(QLORA78[1:])) is None


def test_a_spike_that_came_back_down_recovered():
    assert diverged(series([2.1, 2.0, 9.0, 40.0, 12.0])) is None


def test_one_late_spike_is_not_a_trend():
    assert diverged(series([2.2, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 30.0])) is None


def test_small_losses_wandering_are_not_judged_by_ratio():
    # RL and distillation losses near zero: 0.01 -> 0.2 is 20x but no divergence
    assert diverged(series([0.01, 0.02, 0.05, 0.1, 0.2])) is None
    assert diverged(series([-0.3, 0.1, 2.5, 4.0, 9.0])) is None


def test_ranks_are_not_mixed_into_one_series():
    # rank 1's higher losses interleaved with rank 0's falling ones are no rise
    pts = series([3.0, 2.5, 2.0, 1.8], rank=0) + series([9.0, 8.5, 8.0, 7.5], rank=1, first_line=2)
    assert diverged(pts) is None
    assert diverged(series(QLORA78, rank=0) + series([2.0, 1.9, 1.8, 1.7], rank=1,
                                                     first_line=2)) is not None


def test_each_file_is_its_own_run():
    pts = series([2.0, 1.9], file="a.log") + series([9.0, 20.0, 40.0], file="b.log")
    assert diverged(pts) is None
    assert diverged(series([2.0, 1.9], file="a.log") + series(QLORA78, file="b.log")) is not None
