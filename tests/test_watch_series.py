"""Text sparklines of the live series (dsdoctor/watch/series.py)."""

from __future__ import annotations

from dsdoctor.watch.series import LiveSeries, sparkline


def test_sparkline_scales_between_min_and_max_and_marks_nonfinite():
    assert sparkline([1.0, 2.0, 3.0, float("nan"), 3.0]) == "▁▅█!█"
    assert sparkline([5.0, 5.0]) == "▅▅"
    assert sparkline([float("inf")]) == "!"
    assert sparkline(list(range(100)), width=4) == "▁▃▆█"


def test_series_lines_with_skipped_steps_and_step_time():
    s = LiveSeries()
    for i in range(4):
        s.add({"loss": 2.0 - i / 10, "loss_scale": 65536.0 / 2 ** i, "skipped": i, "lr": 1e-5})
    lines = s.lines([2.0, 4.0])
    assert lines[0].startswith("loss              1.7 ")
    assert lines[1].startswith("loss scale       8192 (3 skipped) ")
    assert lines[2] == "step time          4s ▁█"
    assert LiveSeries().lines() == []
