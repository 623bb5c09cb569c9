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
    assert lines[1].startswith("loss scale       8192 ")  # skipped steps: in the status line
    assert s.skipped == 3
    assert lines[2] == "step time          4s ▁█"
    assert LiveSeries().lines() == []


# DeepSpeed's scaler lines (deepspeed-loss-scaler.yaml's samples, DeepSpeed#931) as the scanner
# hands them over: the printing rank and the scales
HYSTERESIS = {"rank": 0, "attempted_scale": 65536.0, "hysteresis": 2}
HALVED = {"rank": 0, "attempted_scale": 65536.0, "next_scale": 32768.0}


def test_overflow_lines_are_skipped_steps_and_the_scale():
    s = LiveSeries()
    s.add({"step": 0, "skipped": 0, "loss": 2.0})
    s.overflow(0, HYSTERESIS)  # skipped too: the step is not taken while hysteresis drops
    s.overflow(0, HALVED)
    assert s.skipped == 2  # before any step line says skipped=2
    assert list(s.values["loss_scale"]) == [65536.0, 32768.0]
    s.add({"step": 25, "skipped": 8})  # the step line knows more (lines not seen): it wins
    assert s.skipped == 8


def test_one_event_printed_by_two_ranks_is_one_skip():
    s = LiveSeries()
    for rank in (0, 1, 0, 1):
        s.overflow(rank, HALVED)
    assert s.skipped == 2
    assert len(s.values["loss_scale"]) == 2  # the scale from one rank only


def test_loss_scale_sparkline_is_on_a_log_scale():
    halvings = [65536.0 / 2 ** i for i in range(8)]
    # a straight descent, one bar step per halving: not a cliff then a floor
    assert sparkline(halvings, log=True) == "█▇▆▅▄▃▂▁"
    assert sparkline(halvings) == "█▄▂▁▁▁▁▁"  # linear: the last halvings are invisible


def test_layout_puts_the_series_side_by_side_within_the_width():
    s = LiveSeries()
    s.add({"loss": 2.0, "grad_norm": 1.0, "throughput": 180.0})  # one point: still plotted
    s.overflow(0, HALVED)
    for columns in (78, 118, 198):
        lines = s.layout([0.5], columns)
        assert all(len(line) <= columns for line in lines), lines
        text = " ".join(lines)
        for label in ("loss", "grad norm", "loss scale", "samples/s", "step time"):
            assert label in text
    assert len(s.layout([0.5], 198)) == 1 and len(s.layout([0.5], 78)) == 3
    assert LiveSeries().layout([], 100) == []
