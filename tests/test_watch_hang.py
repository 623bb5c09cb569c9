"""watch keeps what it learned (dsdoctor/watch/hang.py): a stall and the ranks' stacks become the
WATCH-HANG finding that key r's report, the summary on exit and the exit code carry; py-spy's
absence is said at start. Stalls come from a hand-moved clock, never from waiting; the stacks are
real py-spy 0.4.3 dumps (tests/data/pyspy, the 2-rank ZeRO-3 generate hang)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch import hang, plain, stacks
from dsdoctor.watch.follow import Follower
from dsdoctor.watch.plain import PlainWatch, RankStacks
from dsdoctor.watch.progress import StallStatus

DATA = Path(__file__).parent / "data"
# Trainer log dicts: the real format of transformers' Trainer (hf-trainer.yaml's samples)
DICT = ("{'loss': 1.6228, 'grad_norm': 9.305521011352539, 'learning_rate': 4.9424511162240815e-06,"
        " 'epoch': 0.16}\n")
# a DeepSpeed step line (deepspeed-engine.yaml's sample): progress with a step number
STEP = ("[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] step={n}, skipped=0, "
        "lr=[0.05], mom=[(0.9, 0.999)]\n")


class Clock:
    now = 500.0

    def __call__(self) -> float:
        return self.now


def zero3_stacks() -> list[stacks.RankStack]:
    """The real 2-rank ZeRO-3 generate hang's stacks (py-spy 0.4.3 dumps)."""
    def rank(r: int) -> stacks.RankStack:
        text = (DATA / "pyspy" / f"zero3_generate_rank{r}.txt").read_text()
        return stacks.RankStack(r, 100 + r, stacks.main_stack(stacks.parse_dump(text)))
    return [rank(0), rank(1)]


def zero3_lines() -> tuple[str, ...]:
    """What stacks.explain says of the real 2-rank ZeRO-3 generate hang."""
    return stacks.explain(zero3_stacks()).lines


@pytest.fixture
def fake_stacks(monkeypatch):
    """py-spy's dump of the ranks, as watch shows it (prefixed); the pids asked for, recorded."""
    asked: list[tuple] = []

    def dump(root_pid=None, procs=()):  # type: ignore[no-untyped-def]
        asked.append((root_pid, tuple(procs)))
        return RankStacks(tuple("rank stacks: " + line for line in zero3_lines()), True)

    monkeypatch.setattr(plain, "rank_stacks", dump)
    return asked


def stalled_plain(tmp_path: Path, pid: int | None = 4242) -> tuple[PlainWatch, list[str], Clock]:
    path = tmp_path / "train.log"
    path.write_text("".join(STEP.format(n=n) for n in (1, 2, 3)))
    clock = Clock()
    said: list[str] = []
    watch = PlainWatch(Follower([str(path)], AnalysisInputs(), stall_after=30, clock=clock),
                       pid=pid, out=said.append)
    while watch.follower.poll():
        watch.report()
    clock.now += 31
    watch.report()
    return watch, said, clock


def test_a_stall_with_stacks_becomes_an_error_finding(tmp_path, fake_stacks):
    watch, said, clock = stalled_plain(tmp_path)
    assert fake_stacks == [(4242, ())]
    assert any(line.startswith("possible hang: no progress for 31s") for line in said)
    clock.now += 9  # the stall goes on: its length is the time since the last progress
    [found] = watch.watch_extra()
    assert (found.rule, found.name, found.severity) == ("WATCH-HANG", "run-hung", "error")
    assert found.title == "no progress for 40s after step 3: the run looks hung"
    # the last progress line first (the log view and the report's excerpt jump to it), then the
    # stacks grouped, the odd rank named, the advice for its place
    first, *rest = found.evidence
    assert (first.file, first.line) == (str(tmp_path / "train.log"), 3) and "step=3" in first.text
    texts = [ev.text for ev in rest]
    assert texts == list(zero3_lines())
    assert all(ev.file == hang.STACKS_FILE for ev in rest)
    assert any(t.startswith("rank 0 waits in AllGatherHandle.wait") for t in texts)
    assert any("no majority" in t for t in texts) and any("synced_gpus=True" in t for t in texts)
    assert "fixed threshold 30s" in found.message and "rank 0 waits in" in found.message


def progress_after_14s(watch: PlainWatch, clock: Clock, tmp_path: Path) -> None:
    """The stalled run writes step 4, 14 s later; watch reads it."""
    clock.now += 14
    with open(tmp_path / "train.log", "a") as fh:
        fh.write(STEP.format(n=4))
    while watch.follower.poll():
        watch.report()
    watch.report()


def test_a_stall_that_cleared_is_kept_as_a_warning(tmp_path, fake_stacks):
    watch, said, clock = stalled_plain(tmp_path)
    progress_after_14s(watch, clock, tmp_path)
    assert "progress resumed after 14s stalled" in said[-1]
    [found] = watch.watch_extra()
    assert (found.name, found.severity) == ("run-stalled", "warning")
    assert found.title == "stalled for 45s after step 3, then progress resumed"
    assert [ev.text for ev in found.evidence[1:]] == list(zero3_lines())  # the stacks stay
    assert hang.exit_code([found]) == 0  # a slow stretch that passed is no failure


def test_a_stall_that_a_timeout_ended_stays_a_hang_when_the_command_failed():
    """Before any progress line (ZeRO-3 generate prints no step), new output ends a stall: on
    the real run the output was gloo's timeout traceback and the launcher's exit. When the
    command then failed, that output was the hang's end: WATCH-HANG stays an error; the same
    stall before a run that went on is a warning."""
    status = StallStatus(stalled=True, idle_seconds=15.0, threshold=15.0, adaptive=False,
                         last=None, progress_events=0, steps_per_second=None)
    seen = hang.StallSeen(status, stacks=zero3_lines()).resumed(45.0, by_output=True)
    failed = hang.hang_finding(seen, failed=True)
    assert (failed.name, failed.severity) == ("run-hung", "error")
    assert failed.title == "no progress for 60s before any progress line: the run hung, then failed"
    assert [ev.text for ev in failed.evidence] == list(zero3_lines())
    went_on = hang.hang_finding(seen, failed=False)
    assert (went_on.name, went_on.severity) == ("run-stalled", "warning")
    # progress (not output) ended it: a slow stretch, even if the command failed later
    stepped = hang.StallSeen(status, stacks=zero3_lines()).resumed(45.0, by_output=False)
    assert hang.hang_finding(stepped, failed=True).severity == "warning"


def test_summary_on_leaving_puts_the_hang_first_and_exits_1(tmp_path, fake_stacks):
    watch, said, _ = stalled_plain(tmp_path)
    with open(tmp_path / "train.log", "a") as fh:  # the launcher's -9 (a real line, DeepSpeed#3232)
        fh.write("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/"
                 "python3', '-u', 'main.py', '--local_rank=0'] exits with return code = -9\n")
    watch.follower.poll()
    del said[:]
    assert watch.leave() == 1
    # the analysis's verdict on the log leads (what analyze prints first), then the findings
    assert said[0].startswith("dsdoctor watch: KILLED: a rank was killed by SIGKILL after step 3")
    at = said.index("dsdoctor watch: 2 problems seen:")
    assert said[at + 1].startswith("  error: WATCH-HANG run-hung: no progress for 31s after step 3")
    assert said[at + 2].endswith(":3: " + STEP.format(n=3).strip())
    assert said[at + 3] == "    " + zero3_lines()[0]
    # the rules' error after it, though it is an error too
    assert any(line.startswith("  error: DS106") for line in said[at + 4:])


def test_summary_without_problems_and_exit_0(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("starting\n" + DICT)
    said: list[str] = []
    watch = PlainWatch(Follower([str(path)], AnalysisInputs()), out=said.append)
    watch.follower.poll()
    assert watch.leave() == 0
    assert said[-2] == "dsdoctor watch: no problem found in what was read"
    assert said[-1] == "dsdoctor watch: exit 0 (no error finding)"


def test_ctrl_c_in_plain_prints_the_summary(tmp_path, fake_stacks, capsys):
    """Ctrl-C (a KeyboardInterrupt in the loop) after a stall: the summary, exit 1."""
    path = tmp_path / "train.log"
    path.write_text(DICT * 3)
    clock = Clock()
    follower = Follower([str(path)], AnalysisInputs(), stall_after=30, clock=clock)
    said: list[str] = []
    watch = PlainWatch(follower, pid=4242, out=said.append)
    real_poll = follower.poll
    calls = iter(range(1000))

    def poll() -> bool:
        n = next(calls)
        if n == 0:
            return real_poll()
        if n == 1:
            clock.now += 31  # the run goes quiet
            return False
        raise KeyboardInterrupt

    follower.poll = poll  # type: ignore[method-assign]
    assert watch.run() == 1
    assert any(line.startswith("possible hang") for line in said)
    head = said.index("dsdoctor watch: 1 problem seen:")
    assert said[head + 1].startswith("  error: WATCH-HANG run-hung: no progress for 31s")


def test_py_spy_missing_is_said_at_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    path = tmp_path / "train.log"
    path.write_text("starting\n")
    watch = PlainWatch(Follower([str(path)], AnalysisInputs()), out=lambda s: None)
    calls = iter(range(10))
    watch.follower.poll = lambda: next(calls) < 0 or (_ for _ in ()).throw(KeyboardInterrupt)  # type: ignore[method-assign]
    watch.run()
    err = capsys.readouterr().err
    # one line, before any stall: what is missing and how to get it
    assert "dsdoctor: py-spy is not installed: a stall will show no rank stacks; pip install " \
           "py-spy\n" in err
    monkeypatch.setattr(stacks, "find_py_spy", lambda: "/x/py-spy")
    assert plain.py_spy_note() is None


def test_cli_summary_after_the_tui(capsys):
    from dsdoctor.cli.watch import _summarize
    from dsdoctor.model import Finding

    lint = Finding("DS999", "x", "warning", "a warning", "")
    assert _summarize([lint]) == 0
    assert capsys.readouterr().out == ("dsdoctor watch: 1 problem seen:\n"
                                       "  warning: DS999 x: a warning\n"
                                       "dsdoctor watch: exit 0 (no error finding)\n")
    error = Finding("DS998", "y", "error", "an error", "")
    assert _summarize([error, lint]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "dsdoctor watch: exit 1 (1 error finding)"


def test_findings_cross_to_the_report_process_intact(tmp_path, fake_stacks):
    watch, _, _ = stalled_plain(tmp_path)
    extra = tuple(watch.watch_extra())
    assert hang.findings_from_json(hang.findings_json(extra)) == extra


# ------------------------------------------------------------------------------------- the TUI

async def wait_for(pilot, cond, what):  # type: ignore[no-untyped-def]
    for _ in range(150):
        await pilot.pause(0.1)
        if cond():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_tui_lists_the_hang_and_key_r_reports_it_with_the_stacks(tmp_path, fake_stacks):
    pytest.importorskip("textual")
    from textual.widgets import OptionList

    from dsdoctor.watch.app import WatchApp

    # both ranks died on a NameError (a real log, DeepSpeed#618): a report is written, not triaged
    path = tmp_path / "train.log"
    shutil.copy(DATA / "real_logs_extra" / "negative__ds618-launcher-nameerror-returns-zero.log",
                path)
    with open(path, "a") as fh:
        fh.write(DICT * 2)
    out = tmp_path / "issue.md"
    clock = Clock()
    follower = Follower([str(path)], AnalysisInputs(), stall_after=30, clock=clock)
    summary: list = []

    async def scenario():
        app = WatchApp(follower, poll=0.1, pid=4242, py_spy_note=lambda: None)
        app.report_path = str(out)
        async with app.run_test(size=(110, 45)) as pilot:
            await wait_for(pilot, lambda: follower.stall.status().progress_events >= 2, "progress")
            clock.now += 31
            options = app.query_one("#findings", OptionList)
            await wait_for(pilot, lambda: app.findings and app.findings[0].rule == "WATCH-HANG",
                           "the hang listed first")
            assert options.option_count == len(app.findings)
            await pilot.press("r")
            await wait_for(pilot, lambda: app.last_report, "the report")
            assert app.last_report.startswith("wrote the issue report"), app.last_report
            summary.extend(app.summary_findings())
            await pilot.press("ctrl+c")  # leaves like q
            await wait_for(pilot, lambda: not app.is_running, "the app to exit")

    asyncio.run(scenario())
    body = out.read_text(encoding="utf-8")
    assert "**WATCH-HANG run-hung** (error): no progress for 31s" in body
    assert "rank 0 waits in AllGatherHandle.wait" in body and "synced_gpus=True" in body
    assert "py-spy dump:" not in body  # the stacks are shown, not a pseudo file:line
    assert summary[0].rule == "WATCH-HANG" and hang.exit_code(summary) == 1
    assert fake_stacks == [(4242, ())]


def test_tui_hang_leads_and_empty_panes_give_their_room(tmp_path, fake_stacks):
    """A quiet run that hangs: no symptom, no event, so no bottom panes; the hang selected and in
    full without a key; the stacks wrapped in the banner, none cut at the right edge."""
    pytest.importorskip("textual")
    from textual.widgets import Static

    from dsdoctor.watch.app import WatchApp

    path = tmp_path / "train.log"
    path.write_text(STEP.format(n=1) + STEP.format(n=2))
    clock = Clock()
    follower = Follower([str(path)], AnalysisInputs(), stall_after=30, clock=clock)
    width = 100

    async def scenario():
        app = WatchApp(follower, poll=0.1, pid=4242, py_spy_note=lambda: None)
        async with app.run_test(size=(width, 48)) as pilot:
            await wait_for(pilot, lambda: follower.stall.status().progress_events >= 2, "progress")
            assert app.query_one("#bottom").has_class("empty")  # nothing to show: no room taken
            assert app.query_one("#top").has_class("empty")  # no finding yet
            clock.now += 31
            await wait_for(pilot, lambda: app.findings and app.findings[0].rule == "WATCH-HANG",
                           "the hang listed first")
            await wait_for(pilot, lambda: "WATCH-HANG run-hung (error)" in str(
                app.query_one("#detail-text", Static).render()), "the hang in full")
            detail = str(app.query_one("#detail-text", Static).render())
            assert "fix: start with the odd rank out" in detail
            assert not app.query_one("#top").has_class("empty")
            assert app.query_one("#bottom").has_class("empty")
            assert app.query_one("#bottom").region.height == 0
            banner = app.query_one("#stall", Static)
            assert banner.has_class("roomy") and banner.region.width == width
            # every stack line on screen in full: wrapped, not run off the right edge
            await wait_for(pilot, lambda: banner.region.height > 5, "the stacks")
            shown = "".join(line.text for line in banner.render_lines(banner.region.reset_offset))
            flat = "".join(shown.split())
            for line in zero3_lines()[:4]:
                assert "".join(line.split()) in flat, line
            await pilot.press("q")

    asyncio.run(scenario())


def test_tui_says_py_spy_missing_at_start(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import Static

    from dsdoctor.watch.app import WatchApp

    path = tmp_path / "train.log"
    path.write_text("starting\n")
    seen: list[str] = []

    async def scenario():
        app = WatchApp(Follower([str(path)], AnalysisInputs()), poll=0.1,
                       py_spy_note=lambda: "py-spy is not installed: pip install py-spy")
        async with app.run_test() as pilot:
            await pilot.pause(0.2)
            seen.append(str(app.query_one("#note", Static).render()))
            await pilot.press("q")

    asyncio.run(scenario())
    assert seen == ["py-spy is not installed: pip install py-spy"]


def test_summary_leaves_out_a_stop_that_watch_itself_made() -> None:
    """A Ctrl-C (or q) in watch stops the command with SIGINT; the log's verdict then reads
    "STOPPED: the run received SIGINT ...; a retry carries on" (the real stopped_ctrl_c sample),
    which is watch's own doing, not the run's fate: left out when watch stopped it."""
    from dsdoctor.diagnose.pipeline import run_analysis

    log = Path(__file__).resolve().parents[1] / "sample_logs" / "stopped_ctrl_c" / "train.log"
    report = run_analysis(logs=(str(log),))
    assert report.verdict is not None and report.verdict.fate == "stopped"
    assert hang.analysis_lines(report)[0].startswith("dsdoctor watch: STOPPED: ")
    assert hang.analysis_lines(report, stopped_by_watch=True) == []


def test_cli_summary_after_the_tui_leads_with_the_culprit(capsys):
    """After q in the TUI the logs' analysis leads the summary: on the real rank_failed_first
    sample, rank 1 died first at its frame and rank 0 only waited; a failed verdict exits 1
    even when watch's own findings hold no error."""
    from dsdoctor.cli.watch import _summarize
    from dsdoctor.diagnose.pipeline import run_analysis
    from dsdoctor.model import Finding

    log = Path(__file__).resolve().parents[1] / "sample_logs" / "rank_failed_first" / "train.log"
    report = run_analysis(logs=(str(log),))
    lint = Finding("DS999", "x", "warning", "a warning", "")
    assert _summarize([lint], report) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dsdoctor watch: FAILED: rank 1 died first on ValueError: batch 6 on "
                             "rank 1")
    assert "rank 0 only waited" in out[0]
    assert out[1] == "  ranks (2, by state):"
    assert out[2].lstrip().startswith("rank 1 ") and out[2].endswith("← culprit")
    assert "rank_failed_first.py:" in out[2] and "in check_batch" in out[2]
    # the exit line says the exit code the process gets, and why
    assert out[-1] == "dsdoctor watch: exit 1 (no error finding; the logs' verdict: failed)"


def _zero3_dump(root_pid=None, procs=()):  # type: ignore[no-untyped-def]
    """rank_stacks as it returns the real ZeRO-3 generate dumps: lines and each rank's frames."""
    ranks = zero3_stacks()
    return RankStacks(tuple("rank stacks: " + line for line in zero3_lines()), True,
                      tuple((s.rank, stacks.log_frames(s)) for s in ranks))


def test_the_final_analysis_reads_where_the_stacks_put_each_rank(tmp_path, monkeypatch):
    """The summary's analysis gets the last stall's stacks: a rank the log says nothing of is
    placed by its stack (rank 0 in generate's all-gather, rank 1 in the barrier)."""
    monkeypatch.setattr(plain, "rank_stacks", _zero3_dump)
    watch, _said, _clock = stalled_plain(tmp_path)
    report = watch.analysis()
    assert report is not None and report.ranks is not None
    rows = {r.rank: r for r in report.ranks.ranks}
    assert rows[0].from_stack and rows[0].entered == "generate"
    assert rows[1].from_stack and rows[1].collective == "barrier"
    assert rows[1].call_site is not None and rows[1].call_site.short.startswith(
        "zero3_generate_hang.py:87 in worker")


def test_a_stall_that_progress_cleared_leaves_the_final_analysis_to_the_log(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(plain, "rank_stacks", _zero3_dump)
    watch, _said, clock = stalled_plain(tmp_path)
    progress_after_14s(watch, clock, tmp_path)
    report = watch.analysis()
    assert report is not None and report.ranks is None  # the log names no rank
