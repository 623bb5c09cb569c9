"""The TUI (dsdoctor/watch/app.py): the stall banner and the progress header, driven by Pilot with
a hand-moved clock for the stall detector."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.follow import Follower

# Trainer log dicts: the real format of transformers' Trainer (hf-trainer.yaml's samples)
DICT = ("{'loss': 1.6228, 'grad_norm': 9.305521011352539, 'learning_rate': 4.9424511162240815e-06,"
        " 'epoch': 0.16}\n")


def args() -> AnalysisInputs:
    return AnalysisInputs()


class Clock:
    now = 500.0

    def __call__(self) -> float:
        return self.now


async def wait_for(pilot, cond, what):
    """Let the app run until ``cond()`` holds (at most 10 s)."""
    for _ in range(100):
        await pilot.pause(0.1)
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_stall_banner_appears_and_clears(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import Static

    from dsdoctor.watch.app import WatchApp

    path = tmp_path / "train.log"
    path.write_text("starting\n" + DICT * 3)
    clock = Clock()
    follower = Follower([str(path)], args(), stall_after=30, clock=clock)

    async def scenario():
        app = WatchApp(follower, poll=0.1)
        async with app.run_test() as pilot:
            banner = app.query_one("#stall", Static)
            await wait_for(pilot, lambda: follower.stall.status().progress_events == 3,
                           "three progress events")
            await wait_for(pilot, lambda: "last progress 0s ago" in app.sub_title, "the header")
            assert not banner.has_class("stalled")
            clock.now += 31
            await wait_for(pilot, lambda: banner.has_class("stalled"), "the stall banner")
            assert banner.display
            text = str(banner.render())
            assert "possible hang: no progress for 31s (threshold 30s)" in text
            assert f"last progress {path}:4" in text
            assert "POSSIBLE HANG" in app.sub_title
            with open(path, "a") as fh:
                fh.write(DICT)
            await wait_for(pilot, lambda: not banner.has_class("stalled"), "the banner to clear")
            assert "POSSIBLE HANG" not in app.sub_title
            # the stall's evidence stays, marked cleared
            await wait_for(pilot, lambda: "stall cleared" in str(banner.render()), "cleared")
            assert banner.has_class("cleared")
            assert "it was: possible hang: no progress for 31s" in str(banner.render())
            await pilot.press("q")

    asyncio.run(scenario())


def test_plots_show_the_loss_and_loss_scale(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import Static

    from dsdoctor.watch.app import WatchApp

    # DeepSpeed step lines (real format, deepspeed-engine.yaml's samples) and Trainer dicts
    path = tmp_path / "train.log"
    path.write_text("[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] "
                    "step=2500, skipped=3, lr=[0.05], mom=[(0.9, 0.999)]\n"
                    + DICT + DICT.replace("1.6228", "1.5"))
    follower = Follower([str(path)], args())

    async def scenario():
        app = WatchApp(follower, poll=0.1)
        async with app.run_test() as pilot:
            plots = app.query_one("#plots", Static)
            for _ in range(60):
                await pilot.pause(0.1)
                if "loss" in str(plots.render()):
                    break
            text = str(plots.render())
            assert "loss              1.5 █▁" in text, text
            await pilot.press("q")

    asyncio.run(scenario())


def _press_r(log: Path, out: Path) -> str:
    """Open the app on ``log``, press r, and return what it said about the issue report."""
    from dsdoctor.watch.app import WatchApp

    said: list[str] = []

    async def scenario():
        app = WatchApp(Follower([str(log)], args()), poll=0.1)
        app.report_path = str(out)
        async with app.run_test() as pilot:
            await pilot.pause(0.3)
            await pilot.press("r")
            for _ in range(300):
                await pilot.pause(0.1)
                if app.last_report:
                    break
            said.append(app.last_report)
            await pilot.press("q")

    asyncio.run(scenario())
    return said[0]


def test_key_r_says_fix_first_when_the_analysis_explains_the_failure(tmp_path):
    pytest.importorskip("textual")
    # the launcher's -9 exit, a real line (DeepSpeed#3232)
    path = tmp_path / "train.log"
    path.write_text("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] "
                    "['/usr/bin/python3', '-u', 'main.py', '--local_rank=0'] exits with return "
                    "code = -9\n")
    out = tmp_path / "issue.md"
    said = _press_r(path, out)
    # a -9 kill is explained (DS106, host RAM) with a fix: triage says fix it first
    assert said.startswith("not writing the issue: the analysis explains"), said
    assert "DS106" in said and not out.exists()


def test_key_r_writes_the_report_of_a_failure_dsdoctor_cannot_fix(tmp_path):
    pytest.importorskip("textual")
    import shutil

    # both ranks died on a NameError (a real log, DeepSpeed#618): a bug report is what is left
    path = tmp_path / "train.log"
    shutil.copy(Path(__file__).parent / "data" / "real_logs_extra"
                / "negative__ds618-launcher-nameerror-returns-zero.log", path)
    out = tmp_path / "issue.md"
    assert _press_r(path, out) == f"wrote the issue report to {out}; review it before filing"
    assert "NameError" in out.read_text(encoding="utf-8")


def test_selecting_a_finding_switches_to_the_log_of_its_evidence(tmp_path):
    """Several logs: Enter on a finding shows its evidence's file, its line marked."""
    pytest.importorskip("textual")
    from textual.widgets import OptionList, Static

    from dsdoctor.watch.app import WatchApp

    first = tmp_path / "rank0.log"
    first.write_text("starting\n" + DICT * 2)
    second = tmp_path / "rank1.log"
    # the launcher's -9 exit, a real line (DeepSpeed#3232), as the 3rd line of the second log
    second.write_text("starting\nloading\n[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:"
                      "sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=0'] "
                      "exits with return code = -9\n")

    async def scenario():
        app = WatchApp(Follower([str(first), str(second)], args()), poll=0.1)
        async with app.run_test(size=(110, 45)) as pilot:
            options = app.query_one("#findings", OptionList)
            await wait_for(pilot, lambda: options.option_count, "the findings")
            assert app.log_pane.view.file == 0 and app.log_pane.view.anchor is None
            index = next(i for i, f in enumerate(app.findings) if f.evidence
                         and f.evidence[0].file == str(second))
            options.highlighted = index
            await pilot.press("enter")
            await pilot.pause(0.3)
            view = app.log_pane.view
            assert (view.file, view.anchor) == (1, 3)
            assert 3 in view.marks
            title = str(app.query_one("#log-title", Static).render())
            assert f"log {second} (2 of 2; f: next file): at line 3" in title
            assert "3> [2023-04-14 13:11:27,885] [ERROR]" in str(app.log_pane.render())
            detail = str(app.query_one("#detail-text", Static).render())
            assert "rank1.log:3: " in detail and "fix: " in detail
            await pilot.press("f")  # the next file: back to the first, following its end
            await pilot.pause(0.2)
            assert (app.log_pane.view.file, app.log_pane.view.anchor) == (0, None)
            await pilot.press("q")

    asyncio.run(scenario())


def test_the_log_view_and_the_finding_never_show_a_secret(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import OptionList, Static

    from dsdoctor.watch.app import WatchApp

    token = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
    path = tmp_path / "train.log"
    # the launcher's -9 exit, a real line (DeepSpeed#3232), with a token on its command line
    path.write_text("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] "
                    f"['/usr/bin/python3', '-u', 'main.py', '--hub_token', '{token}'] exits with "
                    "return code = -9\n")

    async def scenario():
        app = WatchApp(Follower([str(path)], args()), poll=0.1)
        async with app.run_test(size=(200, 45)) as pilot:
            options = app.query_one("#findings", OptionList)
            await wait_for(pilot, lambda: options.option_count, "the findings")
            await pilot.press("down", "enter")
            await pilot.pause(0.3)
            shown = str(app.log_pane.render())
            assert "exits with return code = -9" in shown
            assert "--hub_token" in shown and token not in shown
            assert token not in str(app.query_one("#detail-text", Static).render())
            await pilot.press("q")

    asyncio.run(scenario())
