"""Issue 23, item 2: the text output's counts agree with its problems and verdict, one problem per
cause, no line told twice, evidence fitted to the terminal keeping the message."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.model import TimelinePoint
from dsdoctor.render.analysis import timeline_summary
from dsdoctor.render.text import WIDTH, fit_evidence, terminal_width

GOLDEN = Path(__file__).resolve().parent / "golden"
TEXTS = sorted(GOLDEN.glob("*.txt"))
HEADING = re.compile(r"^problem \d+ of \d+ · (error|warning|info) · ", re.M)
SUMMARY = re.compile(r"^(\d+) problems? (?:\(([^)]*)\) )?from \d+ findings? and \d+ symptom kinds?",
                     re.M)
# A real gloo line (sample_logs/cpu_offload_oom_killed/train.log:85), as the rank printed it.
GLOO = ("[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
        " Connection closed by peer [127.0.0.1]:8099")


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_summary_counts_are_the_problems_shown(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    shown = HEADING.findall(text)
    m = SUMMARY.search(text)
    assert m, f"{path.name}: no summary line"
    assert int(m.group(1)) == len(shown)
    counted = {sev: int(n) for n, sev in re.findall(r"(\d+) (error|warning|info)s?", m.group(2) or "")}
    assert counted == {sev: shown.count(sev) for sev in set(shown)}
    fate = text.split(":", 1)[0]
    if fate in ("FAILED", "HUNG", "NOT-LEARNING", "KILLED", "STOPPED"):
        assert shown and shown[0] == "error", f"{path.name}: a {fate} run whose first problem is no error"


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_no_line_is_printed_twice(path: Path) -> None:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    repeated = {ln for ln in lines if lines.count(ln) > 1}
    assert not repeated


def test_the_healthy_timeline_says_what_it_spans() -> None:
    text = (GOLDEN / "healthy_zero2_trainer.txt").read_text(encoding="utf-8")
    assert "steps 0–0" not in text
    assert "Timeline: 31 points, epochs 0.03906–1.172, loss 4.642 → 1.172" in text


def test_timeline_summary_gives_a_range_only_when_there_is_one() -> None:
    one_step = (TimelinePoint("a.log", 1, "ds-step", step=0),
                TimelinePoint("a.log", 2, "hf", loss=2.0), TimelinePoint("a.log", 3, "hf", loss=1.0))
    assert timeline_summary(one_step) == "3 points, step 0, loss 2 → 1"
    steps = (TimelinePoint("a.log", 1, "ds-step", step=10), TimelinePoint("a.log", 2, "ds-step", step=20))
    assert timeline_summary(steps) == "2 points, steps 10–20"


def test_one_collapse_printed_by_two_ranks_is_not_two() -> None:
    text = " ".join((GOLDEN / "fp16_loss_scale_collapse.txt").read_text(encoding="utf-8").split())
    assert "scale at its minimum on 2 ranks (line 246)" in text
    assert "minimum 2×" not in text and "minimum 2 time(s)" not in text


def test_the_logs_assertion_and_the_configs_arithmetic_are_one_problem(tmp_path, capsys) -> None:
    # the world-size line is sample_logs/healthy_zero2_trainer/train.log:8; the assertion is
    # DS110's own fire example (DeepSpeed's runtime/config.py message)
    log = tmp_path / "train.log"
    log.write_text(
        "[2026-11-21 11:47:59,175] [INFO] [launch.py:170:main] dist_world_size=2\n"
        "[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal "
        "to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 2 \n")
    cfg = tmp_path / "ds.json"
    cfg.write_text('{\n  "train_batch_size": 8,\n  "train_micro_batch_size_per_gpu": 2,\n'
                   '  "gradient_accumulation_steps": 1\n}\n')
    assert main(["analyze", str(log), "--config", str(cfg), "--format", "text"]) == 1
    out = capsys.readouterr().out
    assert len(HEADING.findall(out)) == 1
    assert "problem 1 of 1 · error · batch-size · DS110, DS309" in out
    assert "train.log:2 [rank 0]: AssertionError" in out  # the log's evidence
    assert "why: train_batch_size is 8 but" in " ".join(out.split())  # the config's arithmetic
    assert "also:" not in out  # the same fix, once


def test_a_long_line_keeps_its_message_not_its_path() -> None:
    fitted = fit_evidence(GLOO, 80)
    assert fitted.startswith("[rank1]: RuntimeError: [pair.cc:553] Connection closed by peer")
    assert len(fitted) <= 80
    assert fit_evidence("short", 80) == "short"
    assert fit_evidence("x" * 100, 10) == "x" * 9 + "…"


def test_the_golden_evidence_shows_the_gloo_message() -> None:
    text = (GOLDEN / "cpu_offload_oom_killed.txt").read_text(encoding="utf-8")
    assert "RuntimeError: [pair.cc:553] Connection closed by peer" in text
    assert "/__w/pytorch" not in text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_takes_the_terminals_width(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    assert terminal_width(_Tty()) == 220
    assert terminal_width(io.StringIO()) == WIDTH  # a pipe or file: the same text everywhere
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal_width(_Tty()) == 60


def test_a_wide_terminal_shows_the_whole_evidence_line(monkeypatch) -> None:
    repo = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(repo)
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.setenv("NO_COLOR", "1")
    out = _Tty()
    monkeypatch.setattr(sys, "stdout", out)
    main(["analyze", "sample_logs/cpu_offload_oom_killed/train.log", "--engine", "python"])
    line = next(ln for ln in out.getvalue().splitlines() if "pair.cc" in ln)
    assert "Connection closed by peer [127.0.0.1]:8099. This is typically caused by a remote worker" \
        " crashing." in line and len(line) > WIDTH  # not cut at 100 columns
