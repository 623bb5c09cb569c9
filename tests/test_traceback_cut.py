"""DS121: a traceback cut before its exception line, on real logs cut the way a paste cuts them.

The logs are real (tests/data/real_logs_extra, sources in its README; sample_logs from real
DeepSpeed runs); the cut is done here: the paste stops inside the traceback's frames.
"""

from __future__ import annotations

from pathlib import Path

from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.facts.inputs import AnalysisInputs

ROOT = Path(__file__).resolve().parents[1]
LVSM = ROOT / "tests" / "data" / "real_logs_extra" / (
    "python-exception__lvsm19-gradscaler-unscale-twice-rank0-after-custom-step-line.log")


def _report(path: Path):
    return analyze(AnalysisInputs.of(logs=[str(path)]))


def _ds121(report):
    return [f for f in report.findings if f.rule == "DS121"]


def test_complete_traceback_is_not_cut():
    report = _report(LVSM)
    assert not _ds121(report)
    assert report.verdict.fate == "failed" and "unscale_()" in report.verdict.sentence


def test_traceback_cut_before_its_exception_line(tmp_path):
    lines = LVSM.read_text(encoding="utf-8").split("\n")
    cut_at = next(i for i, ln in enumerate(lines) if ln.startswith("[rank0]: RuntimeError:"))
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines[:cut_at]) + "\n", encoding="utf-8")
    report = _report(path)
    (found,) = _ds121(report)
    assert "cut.log:4 (rank 0) has no exception line" in found.message
    assert f"ends at line {cut_at}" in found.message
    assert "up to and including its last line" in found.fix
    assert found.evidence[0].line == 4 and found.evidence[0].rank == 0
    # no exception is made up (none is named), but a traceback after the last progress line is a
    # rank that raised one: the run failed (issue 19), and the verdict says its name is cut off
    assert report.verdict.fate == "failed", report.verdict.sentence
    assert "cut before the line that names it" in report.verdict.sentence
    (exc,) = [s for s in report.symptoms if s.kind == "python-exception"]
    assert set(exc.patterns) == {"traceback-start"} and exc.count == 1  # one traceback
    assert not exc.values.get("exc_type")


def test_log_going_on_after_the_traceback_is_not_cut(tmp_path):
    """A progress line after the traceback means the log went on: its end is there (a Trainer
    line from tests/data/real_logs_extra/negative__ds4781-...)."""
    lines = LVSM.read_text(encoding="utf-8").split("\n")
    cut_at = next(i for i, ln in enumerate(lines) if ln.startswith("[rank0]: RuntimeError:"))
    progress = "{'loss': 0.9225, 'learning_rate': 6.5000000000000004e-06, 'epoch': 0.03}"
    path = tmp_path / "went_on.log"
    path.write_text("\n".join(lines[:cut_at] + [progress]) + "\n", encoding="utf-8")
    assert not _ds121(_report(path))


def test_each_rank_judged_on_its_own(tmp_path):
    """Rank 1's traceback complete, rank 0's cut (real run: sample_logs/checkpoint_disk_full)."""
    lines = (ROOT / "sample_logs" / "checkpoint_disk_full" / "train.log").read_text(
        encoding="utf-8").split("\n")
    r0 = lines[181:186]  # rank 0: Traceback and its first frames
    r1 = lines[208:214]  # rank 1: a whole traceback, to its RuntimeError line
    assert r0[0].startswith("[rank0]: Traceback") and r1[-1].startswith("[rank1]: RuntimeError")
    path = tmp_path / "ranks.log"
    path.write_text("\n".join(r0 + r1) + "\n", encoding="utf-8")
    report = _report(path)
    # rank 1 names its exception: the cut traceback of rank 0 is not what is missing
    assert not _ds121(report)
    path.write_text("\n".join(r1[:3] + r0) + "\n", encoding="utf-8")
    assert _ds121(_report(path))


def test_report_excerpt_names_the_cut_not_the_traceback_header(tmp_path):
    from dsdoctor.render.issue_log import first_error_excerpt

    lines = LVSM.read_text(encoding="utf-8").split("\n")
    cut_at = next(i for i, ln in enumerate(lines) if ln.startswith("[rank0]: RuntimeError:"))
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines[:cut_at]) + "\n", encoding="utf-8")
    ex = first_error_excerpt([str(path)])
    assert ex is not None and ex.has_traceback and not ex.traceback_complete
    assert ex.error.startswith("a traceback cut before its exception line (its last frame: File")
    assert "grad_scaler.py" in ex.error
    # the whole log still names its exception
    full = first_error_excerpt([str(LVSM)])
    assert full is not None and full.error.startswith("RuntimeError: unscale_()")
