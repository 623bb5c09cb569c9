"""The stall detector (dsdoctor/watch/progress.py) with a hand-moved clock: no test sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.progress import (
    ADAPTIVE_FACTOR,
    FLOOR_SECONDS,
    MIN_ADAPTIVE_SECONDS,
    BarTracker,
    StallDetector,
    find_ticks,
)

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


# --- tqdm ticks (progress.find_ticks, BarTracker) -------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
# Real bars, as the runs printed them: Trainer's bar, ticks glued by \r, before a log dict
# (sample_logs/healthy_zero2_trainer/train.log:208)
TRAINER_LINE = (REPO / "sample_logs/healthy_zero2_trainer/train.log").read_bytes().split(b"\n")[207]
# PyTorch Lightning's bar with a postfix (ssbuild/chatglm_finetuning#104)
PTL_TICK = b"Epoch 1:   1%|          | 23/4360 [00:32<1:43:33,  1.43s/it, loss=nan, v_num=0]"
# ms-swift's bar with a description and a slow rate (modelscope/ms-swift#4411)
SWIFT_TICK = ("Train:   5%|██▎                                            | 1/20 [02:03<39:02, "
              "123.31s/it]").encode()
# transformers' weight loading bars (sample_logs/bf16_model_in_fp16/train.log:19)
LOADING_LINE = (REPO / "sample_logs/bf16_model_in_fp16/train.log").read_bytes().split(b"\n")[18]


def test_trainer_bar_glued_ticks_give_the_last_one():
    assert b"\r" in TRAINER_LINE  # the ticks are glued by carriage returns
    ticks = find_ticks(TRAINER_LINE)
    assert len(ticks) == 1  # one bar: only its last tick of the read matters
    tick = ticks[0][1]
    assert (tick.n, tick.total, tick.desc, tick.remaining) == (9, 300, "", "00:30")
    assert tick.rate == pytest.approx(9.69)
    assert tick.training
    assert tick.describe() == "9/300 (3%), 9.69 it/s, ETA 00:30"


def test_seconds_per_iteration_and_a_postfix():
    (_, ptl), = find_ticks(PTL_TICK)
    assert (ptl.n, ptl.total, ptl.desc, ptl.remaining) == (23, 4360, "Epoch 1", "1:43:33")
    assert ptl.rate == pytest.approx(1 / 1.43)
    assert ptl.describe() == "Epoch 1 23/4360 (1%), 1.43 s/it, ETA 1:43:33"
    (_, swift), = find_ticks(SWIFT_TICK)
    assert (swift.n, swift.total, swift.desc) == (1, 20, "Train")


def test_loading_bars_are_not_steps():
    ticks = find_ticks(LOADING_LINE)
    assert [(t.desc, t.n, t.total) for _, t in ticks] == [("Loading weights", 28, 28)]
    bars = BarTracker()
    assert not bars.is_step(ticks[0][1])
    assert bars.main is None


def test_no_bar_no_tick():
    assert find_ticks(b"[2021-11-27 00:36:55,194] [INFO] [stage2.py:1628:step] 50%\n") == []
    assert find_ticks(b"{'loss': 1.6228, 'grad_norm': 9.3, 'epoch': 0.16}\n") == []


def test_the_run_bar_is_the_training_bar_with_the_largest_total():
    bars = BarTracker()
    (_, train), = find_ticks(TRAINER_LINE)
    (_, small), = find_ticks(SWIFT_TICK.replace(b"Train:", b""))  # 1/20: an evaluation-sized bar
    assert bars.is_step(train)
    assert not bars.is_step(small)  # Trainer's evaluation bar does not replace the run's
    assert bars.main == train


def test_a_bar_without_loss_moves_the_stall_clock(tmp_path):
    """Through the follower: ticks alone are progress, with their step, rate and ETA."""
    clock = Clock()
    path = tmp_path / "train.log"
    path.write_bytes(b"starting\n")
    follower = Follower([str(path)], AnalysisInputs(), stall_after=30, clock=clock)
    follower.poll()
    clock.now += 31
    assert [c.kind for c in follower.take_changes()] == ["stalled"]
    with open(path, "ab") as fh:
        fh.write(TRAINER_LINE.split(b"{")[0])  # the ticks only, no loss dict
    clock.now += 1
    follower.poll()
    changes = follower.take_changes()
    assert [c.kind for c in changes] == ["resumed"]
    status = follower.stall.status()
    assert status.last is not None and status.last.location == f"{path}:2"
    assert status.last.step == 9
    assert follower.bar is not None and follower.bar.n == 9


def test_a_tick_cut_by_a_read_is_found_whole(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"x\n" + PTL_TICK[:30])
    follower = Follower([str(path)], AnalysisInputs(), clock=Clock())
    follower.poll()
    assert follower.bar is None
    with open(path, "ab") as fh:
        fh.write(PTL_TICK[30:] + b"\n")
    follower.poll()
    assert follower.bar is not None and (follower.bar.n, follower.bar.total) == (23, 4360)
    assert follower.stall.status().last.location == f"{path}:2"  # type: ignore[union-attr]


def test_only_the_last_ticks_of_a_read_are_parsed_and_each_bar_keeps_its_last():
    # a read at 10,000 lines/s: many ticks of the run's bar, then one of an evaluation bar
    (_, first), = find_ticks(TRAINER_LINE)
    many = b"".join(b"\r" + first.text.replace("9/300", f"{n}/300").encode() for n in range(10, 60))
    ticks = find_ticks(many + b"\r" + SWIFT_TICK.replace(b"Train:", b""))
    assert [(t.n, t.total) for _, t in ticks] == [(59, 300), (1, 20)]


def test_a_backlog_read_in_one_burst_gives_no_step_rate(tmp_path):
    """A finished or long-running log opened with watch: its steps were read at once, so they
    say nothing about the pace; the rate starts from the steps written while watching."""
    clock = Clock()
    path = tmp_path / "train.log"
    path.write_text((DICT + "\n") * 30)
    follower = Follower([str(path)], AnalysisInputs(), clock=clock)
    for _ in range(3):  # several reads of the backlog, microseconds apart
        clock.now += 0.002
        follower.poll()
    status = follower.stall.status()
    assert status.progress_events == 30 and status.last is not None
    assert status.steps_per_second is None and follower.stall.intervals() == []
    for _ in range(3):  # live: one Trainer dict every 4 s
        clock.now += 4.0
        with open(path, "a") as fh:
            fh.write(DICT + "\n")
        follower.poll()
        follower.poll()  # nothing new: the scanner's held-back last line is flushed
    # 3 intervals of 4 s after the last backlog event (about 4 s after it, too)
    assert follower.stall.steps_per_second() == pytest.approx(3 / 12, rel=0.01)


def test_a_hand_written_loop_stalls_within_about_a_minute_of_its_last_step(tmp_path):
    """Issue 19: a loop printing ``step N | loss X`` once a second (no DeepSpeed, no Trainer: a
    generic-progress timeline line) gets the adaptive threshold, 60 s, instead of the 300 s floor.
    Through the follower, as watch reads the file: a poll every 0.5 s, a line every second."""
    clock = Clock()
    path = tmp_path / "train.log"
    path.write_text("starting\n")
    follower = Follower([str(path)], AnalysisInputs(), clock=clock)
    follower.poll()
    follower.poll()  # the backlog is read: its pace says nothing
    for step in range(1, 21):
        clock.now += 0.5
        with open(path, "a") as fh:
            fh.write(f"step {step} | loss {2.5 - step / 100:.4f}\n")
        follower.poll()
        clock.now += 0.5
        follower.poll()
        assert follower.take_changes() == []
    status = follower.stall.status()
    assert status.progress_events == 20
    assert status.last is not None and status.last.step == 20
    assert status.last.location == f"{path}:21"
    assert follower.stall.threshold() == (MIN_ADAPTIVE_SECONDS, True)
    assert status.steps_per_second == pytest.approx(1.0)
    last_step_at = status.last.at  # when watch read step 20
    assert clock.now - 1.0 < last_step_at <= clock.now
    clock.now = last_step_at + MIN_ADAPTIVE_SECONDS - 0.1
    follower.poll()
    assert follower.take_changes() == []  # not before the threshold
    clock.now = last_step_at + MIN_ADAPTIVE_SECONDS + 0.1
    follower.poll()
    changes = follower.take_changes()
    assert [c.kind for c in changes] == ["stalled"]
    stall = changes[0].status
    assert stall.adaptive and stall.threshold == MIN_ADAPTIVE_SECONDS
    assert 60 <= stall.idle_seconds <= 70
    assert f"last progress {path}:21: step 20 | loss 2.3000" in stall.describe()
