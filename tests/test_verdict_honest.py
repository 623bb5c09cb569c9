"""Issue 19: silence is not health. The verdict says what the log shows, and no more.

The logs here are real: a real DeepSpeed run (sample_logs/healthy_zero2_trainer) cut where a run
that hung, was killed without a word, or is still running would stop, and lines copied from
public threads (their sources in tests/data/real_logs_extra/README.md and the format files)
appended the way the failing runs printed them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.fingerprint import fingerprint, signature
from dsdoctor.diagnose.pipeline import run_analysis

REPO = Path(__file__).resolve().parents[1]
HEALTHY = REPO / "sample_logs" / "healthy_zero2_trainer" / "train.log"
EXTRA = REPO / "tests" / "data" / "real_logs_extra"
#: the last line of the healthy run's training progress (a Trainer dict), before its end lines
LAST_PROGRESS = 230


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def _write(tmp_path: Path, lines: list[str], name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cut_healthy(n: int) -> list[str]:
    lines = _lines(HEALTHY)
    assert "'loss'" in lines[n - 1] or "it/s" in lines[n - 1], "the cut must fall in training"
    return lines[:n]


def test_the_whole_healthy_run_is_healthy_because_it_says_it_finished() -> None:
    rep = run_analysis([str(HEALTHY)], engine="python")
    assert rep.verdict.fate == "healthy"
    assert "finished" in rep.verdict.sentence
    assert rep.exit_code == 0


def test_a_whole_log_that_stops_mid_run_is_not_called_healthy(tmp_path: Path) -> None:
    """The launcher's start is in the log, progress, then nothing: ended mid-run (exit 0)."""
    rep = run_analysis([str(_write(tmp_path, _cut_healthy(LAST_PROGRESS)))], engine="python")
    assert rep.verdict.fate == "ended-mid-run", rep.verdict.sentence
    assert "watch --pid" in rep.verdict.sentence
    assert "written" in rep.verdict.sentence  # a local file: how long ago it was written
    assert rep.exit_code == 0


def test_an_excerpt_of_progress_without_its_start_is_healthy(tmp_path: Path) -> None:
    """A pasted piece of a training log with progress and no error after it is positive
    evidence; it has no launcher start, so nothing says it should have had an end."""
    lines = _lines(HEALTHY)[200:LAST_PROGRESS]
    rep = run_analysis([str(_write(tmp_path, lines))], engine="python")
    assert rep.verdict.fate == "healthy", rep.verdict.sentence


def test_no_progress_and_no_failure_is_unknown_not_healthy(tmp_path: Path) -> None:
    lines = _lines(HEALTHY)[5:100]  # the engine's config dump, no launcher start, no step
    rep = run_analysis([str(_write(tmp_path, lines))], engine="python")
    assert rep.verdict.fate == "unknown", rep.verdict.sentence
    assert rep.exit_code == 0


def test_a_failure_no_pattern_knows_is_failed_with_its_last_error_line(tmp_path: Path) -> None:
    """A segfault after progress (Cadene/vqa.pytorch#47's line): failed, the line quoted with
    its place and a fingerprint, exit 1."""
    segfault = _lines(EXTRA / "gpu-oom__vqa47-thcudacheck-error-2-out-of-memory-segfault.log")[1]
    assert segfault == "Segmentation fault (core dumped)"
    log = _write(tmp_path, [*_cut_healthy(LAST_PROGRESS), segfault])
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "failed", rep.verdict.sentence
    assert "not recognized" in rep.verdict.sentence
    assert f"train.log:{LAST_PROGRESS + 1}" in rep.verdict.sentence
    assert "Segmentation fault" in rep.verdict.sentence
    assert rep.verdict.fingerprint == fingerprint(segfault)
    assert rep.exit_code == 1
    assert [p.cause for p in rep.problems][:1] == ["error-line"]


def test_error_lines_before_progress_that_went_on_do_not_fail_the_run(tmp_path: Path) -> None:
    segfault = "Segmentation fault (core dumped)"
    lines = _lines(HEALTHY)
    log = _write(tmp_path, [*lines[:150], segfault, *lines[150:]])
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "healthy", rep.verdict.sentence


def test_a_suggestive_error_record_alone_is_unknown_not_failed(tmp_path: Path) -> None:
    """A logger's ERROR record (databrickslabs/dolly#139's Metaflow line) after progress: the log
    does not show a failure, nor that the run went on."""
    record = ("2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] "
              "[09c561ee-a44c-4795-967c-7183a83b3160] 2023-04-29 06:01:12 ERROR [__main__] main failed")
    rep = run_analysis([str(_write(tmp_path, [*_lines(HEALTHY)[200:LAST_PROGRESS], record]))],
                       engine="python")
    assert rep.verdict.fate == "unknown", rep.verdict.sentence
    assert "ERROR [__main__] main failed" in rep.verdict.sentence
    assert rep.exit_code == 0


def test_sigkill_without_oom_evidence_is_killed_and_says_how_to_tell() -> None:
    """deepspeedai/DeepSpeed#3232 as pasted: `exits with return code = -9` and nothing else."""
    log = REPO.parent / "shared" / "real_logs" / "cpu-oom__ds3232-dschat-opt125m-return-code-9.log"
    if not log.is_file():
        log = EXTRA / "cpu-oom__colossalai3514-elastic-exitcode-9-sigterm-others.log"
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "killed", rep.verdict.sentence
    assert "dmesg" in rep.verdict.sentence and "sacct" in rep.verdict.sentence
    assert rep.exit_code == 1


def test_sigkill_with_oom_evidence_is_a_host_oom() -> None:
    """The kernel's OOM killer named in dmesg: the run was killed (issue 19: host OOM kills read
    KILLED), for the host's RAM, and the OOM's retry answer holds (not a bare SIGKILL's)."""
    log = EXTRA / "cpu-oom__tranx41-dmesg-terminal-wrapped.log"
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "killed", rep.verdict.sentence
    assert "host RAM" in rep.verdict.sentence and "nothing in the log" not in rep.verdict.sentence
    assert rep.verdict.retriable == "no", rep.verdict.retriable_reason


def test_json_says_the_fate_and_its_fingerprint(tmp_path: Path, capsys) -> None:
    log = _write(tmp_path, [*_cut_healthy(LAST_PROGRESS), "Segmentation fault (core dumped)"])
    code = main(["analyze", str(log), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["verdict"]["fate"] == "failed" and doc["verdict"]["error"] is True
    assert doc["verdict"]["fingerprint"] == fingerprint("Segmentation fault (core dumped)")


@pytest.mark.parametrize(("a", "b"), [
    ("[rank3]:[E221 08:45:07.886838878 ProcessGroupGloo.cpp:143] Rank 3 successfully reached "
     "monitoredBarrier", "[rank0]:[E107 10:50:18.780482185 ProcessGroupGloo.cpp:143] Rank 0 "
     "successfully reached monitoredBarrier"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered at /home/a/x.py:33",
     "RuntimeError: CUDA error: an illegal memory access was encountered at /opt/b/y.py:7"),
])
def test_the_same_failure_on_other_ranks_hosts_and_paths_has_one_fingerprint(a: str, b: str) -> None:
    assert signature(a) == signature(b)
    assert fingerprint(a) == fingerprint(b)


def test_different_failures_have_different_fingerprints() -> None:
    assert fingerprint("RuntimeError: CUDA error: an illegal memory access was encountered") != (
        fingerprint("RuntimeError: CUDA error: device-side assert triggered"))


def test_a_cut_traceback_that_training_went_on_after_is_not_fatal(tmp_path: Path) -> None:
    """A logged traceback (here rank 0's first frames from sample_logs/checkpoint_disk_full) with
    progress after it: the run went on; neither failed nor stopped."""
    frames = [ln for ln in _lines(REPO / "sample_logs" / "checkpoint_disk_full" / "train.log")
              if ln.startswith("[rank0]: ")][:3]
    assert frames[0] == "[rank0]: Traceback (most recent call last):"
    lines = _lines(HEALTHY)
    rep = run_analysis([str(_write(tmp_path, [*lines[:150], *frames, *lines[150:]]))],
                       engine="python")
    assert rep.verdict.fate == "healthy", rep.verdict.sentence
    cut = _write(tmp_path, [*_cut_healthy(LAST_PROGRESS), *frames], name="cut.log")
    rep = run_analysis([str(cut)], engine="python")
    assert rep.verdict.fate == "failed" and "cut before" in rep.verdict.sentence, rep.verdict.sentence


def test_an_unrecognized_failure_is_a_problem_even_beside_other_symptoms(tmp_path: Path) -> None:
    """The verdict rests on an error-like line: the problems say it too, even when the log also
    shows a symptom that did not end the run (here the fp16 warm-up sample's recovered
    overflows)."""
    warmup = _lines(REPO / "sample_logs" / "fp16_overflow_warmup" / "train.log")
    progress = [i for i, ln in enumerate(warmup) if ln.startswith("step ")]
    log = _write(tmp_path, [*warmup[:progress[-1] + 1], "Segmentation fault (core dumped)"])
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "failed" and "not recognized" in rep.verdict.sentence
    assert rep.problems[0].cause == "error-line", [p.cause for p in rep.problems]
