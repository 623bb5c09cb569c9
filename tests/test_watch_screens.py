"""Snapshot tests of the TUI's main screens (dsdoctor/watch/app.py) on a real sample log.

Textual's Pilot renders the app in a fixed terminal (110x45, and the main screen at 80x24,
120x40 and 200x60 too); the screen's text (what the
compositor draws, styles dropped) is compared with ``tests/golden/watch/<screen>.txt``. The
clock of the stall detector and the machine's sampler are injected and the paths are relative
to the repository, so the goldens hold no time of day and no path of this machine. Refresh them
with ``pytest tests/test_watch_screens.py --update-golden`` and read ``git diff`` before
committing.
"""

from __future__ import annotations

import asyncio
import datetime
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.machine import GIB, MachineSample

textual = pytest.importorskip("textual")

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests/golden/watch"
SCENARIO = "sample_logs/fp16_loss_scale_collapse"  # a real 2-rank run whose fp16 scale collapsed
SIZE = (110, 45)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def full_ram() -> MachineSample:
    """A machine near its limit (what the RAM finding is for); a fixed one, for the golden."""
    return MachineSample(int(30.5 * GIB), 32 * GIB, GIB // 2, 8 * GIB, (), "no GPU")


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """The screen as text: the compositor's full render, as App.export_screenshot draws it."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system=None, record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))
    return "\n".join(line.rstrip() for line in console.export_text(styles=False).splitlines())


def check_golden(name: str, text: str, update: bool) -> None:
    # the log's own timestamps are fixed text; today's date would be this run's
    assert datetime.date.today().isoformat() not in text, "this run's date on the screen"
    # (the sample's recorded lines hold the paths of the run that made it, which may be this
    # checkout's: the path the app was given is what must not show)
    assert str(REPO / "sample_logs") not in text and "/tmp/" not in text, "a path of this machine"
    path = GOLDEN / f"{name}.txt"
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        return
    assert path.exists(), f"{path} missing: run pytest {Path(__file__).name} --update-golden"
    want = path.read_text(encoding="utf-8").rstrip("\n")
    assert text == want, (f"the {name} screen changed: run pytest tests/test_watch_screens.py "
                          "--update-golden and review git diff")


def run_screens(monkeypatch: pytest.MonkeyPatch,
                scenario: Callable[..., Awaitable[None]], size: tuple[int, int] = SIZE,
                **follower_kw) -> None:  # type: ignore[no-untyped-def]
    from dsdoctor.watch.app import WatchApp

    monkeypatch.chdir(REPO)  # relative paths: the goldens name sample_logs/..., not this clone
    log = f"{SCENARIO}/train.log"
    inputs = AnalysisInputs.of(logs=[log], configs=[f"{SCENARIO}/ds_config.json"])
    clock = Clock()
    follower = Follower([log], inputs, clock=clock, **follower_kw)
    # the whole log is read before the app starts: its first refresh shows all of it at once,
    # so what the screen says does not depend on how the worker's reads were cut
    while follower.poll():
        pass
    follower.flush(final=True)

    async def main() -> None:
        # py-spy or not: the screens do not depend on this host
        app = WatchApp(follower, poll=0.05, machine=full_ram, py_spy_note=lambda: None)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: "WATCH-RAM" in screen_text(app) and
                           "DS102" in screen_text(app), "the findings")
            await scenario(app, pilot, clock)
            await pilot.press("q")

    asyncio.run(main())


async def wait_for(pilot, cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(100):
        await pilot.pause(0.05)
        if cond():
            await settle(pilot)
            return
    raise AssertionError(f"timed out waiting for {what}")


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    """Until two looks at the screen, a few refreshes apart, see the same text."""
    last = ""
    for _ in range(40):
        await pilot.pause(0.15)
        now = screen_text(pilot.app)
        if now == last:
            return
        last = now
    raise AssertionError("the screen does not settle")


def test_main_screen(monkeypatch, update_golden):
    async def scenario(app, pilot, clock):  # type: ignore[no-untyped-def]
        text = screen_text(app)
        # most severe first, the machine's warning after the run's errors
        assert text.index("DS102") < text.index("WATCH-RAM")
        assert "WATCH-RAM host-ram-near-limit:" in text
        assert "following the end" in text
        assert "267  [2026-11-21 11:40:24,539] [ERROR] [launch.py:259:sigkill_handler]" in text
        check_golden("main", text, update_golden)

    run_screens(monkeypatch, scenario)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_leads_with_the_diagnosis(monkeypatch, update_golden, size):
    """Without a key: the newest most severe problem selected, its fix and evidence in view;
    the loss scale plotted beside the loss; the overflow lines counted as skipped steps; the
    footer keeps q and r at any width; the header's icon is ASCII."""
    async def scenario(app, pilot, clock):  # type: ignore[no-untyped-def]
        text = screen_text(app)
        lines = text.splitlines()
        assert len(lines) == size[1] and max(map(len, lines)) <= size[0]
        # DS102's evidence ends on line 264, DS103's on an earlier line: DS102 is the newest
        assert app.findings[0].rule == "DS102" and app._auto_key == "DS102:loss-scale-collapse"
        assert "fix:" in text and "DS102 loss-scale-collapse (error)" in text
        # 17 OVERFLOW lines by rank 0; the last step line said skipped=15
        assert "steps 0–17, skipped steps 17" in text
        assert "loss scale" in text and "loss " in text
        footer = lines[-1]
        assert "q quit" in footer and "r report" in footer
        assert lines[0].startswith(" #")
        assert all(ord(ch) < 0x2B00 for ch in lines[0]), lines[0]
        check_golden(f"main-{size[0]}x{size[1]}", text, update_golden)

    run_screens(monkeypatch, scenario, size=size)


def test_selecting_a_finding_jumps_to_its_evidence(monkeypatch, update_golden):
    async def scenario(app, pilot, clock):  # type: ignore[no-untyped-def]
        # the first finding is in full from the start; the log still follows
        assert "fix:" in screen_text(app)
        assert "following the end" in screen_text(app)
        await pilot.press("down", "enter")  # the second: DS103, and its evidence in the log
        await wait_for(pilot, lambda: "DS103 evidence" in screen_text(app), "the jump")
        text = screen_text(app)
        assert "at line 190 (DS103 evidence)" in text
        assert "190> epoch 0 | step 1 | loss nan" in text  # the evidence line, marked
        assert "191  [2026-11-21" in text  # a line that is not evidence, unmarked
        check_golden("finding", text, update_golden)
        await pilot.press("escape")
        await wait_for(pilot, lambda: "following the end" in screen_text(app), "following")

    run_screens(monkeypatch, scenario)


def test_search(monkeypatch, update_golden):
    async def scenario(app, pilot, clock):  # type: ignore[no-untyped-def]
        await pilot.press("slash", *"minimum")
        await wait_for(pilot, lambda: "/minimum: line" in screen_text(app), "a match")
        want = [i + 1 for i, line in enumerate((REPO / SCENARIO / "train.log").read_bytes()
                                              .split(b"\n")) if b"minimum" in line.lower()]
        assert f"/minimum: line {want[0]}" in screen_text(app)
        await pilot.press("enter")  # keep the search, leave the box
        await pilot.press("n")
        await wait_for(pilot, lambda: f"/minimum: line {want[1]}" in screen_text(app), "next")
        await pilot.press("N")
        await wait_for(pilot, lambda: f"/minimum: line {want[0]}" in screen_text(app), "prev")
        text = screen_text(app)
        assert "n next" in text and "N previous" in text  # the footer lists the keys
        check_golden("search", text, update_golden)
        await pilot.press("escape")
        await wait_for(pilot, lambda: "following the end" in screen_text(app), "follow again")
        assert "/minimum" not in screen_text(app)

    run_screens(monkeypatch, scenario)


def test_stall_and_pause(monkeypatch, update_golden):
    async def scenario(app, pilot, clock):  # type: ignore[no-untyped-def]
        clock.now += 31
        await wait_for(pilot, lambda: "POSSIBLE HANG" in screen_text(app), "the stall")
        await pilot.press("p")
        await wait_for(pilot, lambda: "[paused]" in screen_text(app), "paused")
        text = screen_text(app)
        assert "possible hang: no progress for 31s (threshold 30s)" in text
        assert "paused: the logs are not read until p is pressed again" in text
        assert "dsdoctor watch — PAUSED | " in text  # first in the header: never cut off
        # the findings stay in view under the banner and the messages
        assert "DS102 loss-scale-collapse" in text and "WATCH-RAM" in text
        check_golden("stall", text, update_golden)

    run_screens(monkeypatch, scenario, stall_after=30)
