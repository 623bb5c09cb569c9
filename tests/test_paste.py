"""Paste damage "a whole log on one line": real logs flattened the way pasting loses newlines.

Copying a rendered GitHub comment (or a Slack message) turns every newline into a space; a web
form that strips them joins the lines with nothing. The logs flattened here are real ones from
``tests/data/real_logs_extra`` (sources in its README); one of them was already pasted flat.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.logs import paste
from dsdoctor.logs.scan import scan_files

EXTRA = Path(__file__).resolve().parent / "data" / "real_logs_extra"
ROWS = {r["file"]: r for r in csv.DictReader((EXTRA / "labels.tsv").open(encoding="utf-8"),
                                             delimiter="\t")}
# Varied formats: rank prefixes, DeepSpeed timestamps, NCCL INFO/WARN, tracebacks, SLURM lines.
FLATTENED = [
    "nccl-error__nccl1029-multinode-prefixed-internal-error.log",
    "hang__llamafactory7396-torch25-watchdog-allreduce-viewer-line-numbers.log",
    "disk-full__llamafactory1223-streamwriter-after-checkpoint-save.log",
    "job-time-limit__submitit1613-preemption-then-store-barrier-timeout.log",
    "shm-exhausted__nccltests166-failed-to-extend-dev-shm.log",
    "cuda-error__dsexamples592-illegal-memory-access-what-frames.log",
    "gpu-oom__vllm-ascend1127-npu-oom-ray-worker-prefix.log",
    "hang__mmdetection12392-communicator-aborted-allreduce.log",
    "negative__ds4781-healthy-trainer-dicts-before-checkpoint.log",
]


def _kinds(text: str) -> set[str]:
    return {k for k in text.split(",") if k}


def _flatten(name: str, sep: str) -> str:
    lines = (EXTRA / name).read_text(encoding="utf-8").split("\n")
    return sep.join(line.rstrip("\r") for line in lines if line.strip()) + "\n"


@pytest.mark.parametrize("name", FLATTENED)
def test_github_flattened_real_log_keeps_its_labels(tmp_path, name):
    path = tmp_path / name
    path.write_text(_flatten(name, " "), encoding="utf-8")
    result = scan_files([str(path)])
    row = ROWS[name]
    got = set(result.symptoms)
    assert _kinds(row["expected_classes"]) <= got
    assert not (_kinds(row["must_not_classes"]) & got)
    note = [n for n in result.notes if "pasted on one line" in n]
    assert note and "physical line 1 = lines 1-" in note[0]
    repaired = result.files[0].lines
    assert repaired > 1, "line count is the repaired text's"
    for sym in result.symptoms.values():
        assert 1 <= sym.first.line <= repaired


@pytest.mark.parametrize("name", FLATTENED[:4])
def test_newlines_dropped_without_space_still_split(tmp_path, name):
    path = tmp_path / name
    path.write_text(_flatten(name, ""), encoding="utf-8")
    result = scan_files([str(path)])
    assert _kinds(ROWS[name]["expected_classes"]) <= set(result.symptoms)


def test_real_flattened_paste_evidence_points_into_repaired_text():
    # DeepSpeed#1897 was pasted flat: its frames are split back, the note maps the lines.
    result = scan_files([str(EXTRA / "op-build-failure__ds1897-flattened-paste-fused-adam.log")])
    assert any("physical line 1 = lines 1-6" in n for n in result.notes)
    assert result.symptoms["op-build-failure"].first.line == 7  # physical line 2, after lines 1-6


def test_split_cuts_before_each_line_start():
    text = _flatten("disk-full__llamafactory1223-streamwriter-after-checkpoint-save.log", " ")
    original = [ln for ln in (EXTRA / "disk-full__llamafactory1223-streamwriter-after-checkpoint-save.log")
                .read_text(encoding="utf-8").split("\n") if ln.strip()]
    pieces = paste.split_line(text.rstrip("\n"))
    starts = [ln.strip() for ln in original if ln.lstrip().startswith(("Traceback", "File \""))]
    assert starts and all(any(p.strip() == s or p.strip().startswith(s) for p in pieces)
                          for s in starts)


@pytest.mark.parametrize("name", [
    "nccl-error__nccl1029-multinode-prefixed-internal-error.log",  # pdsh host prefix on every line
    "checkpoint-error__ds5570-size-mismatch-rank-prefixed.log",  # [rankN]: on every line
    "hang__ofa271-torch1x-watchdog-no-numel.log",  # torch 1.x [E ProcessGroupNCCL.cpp:N] lines
    "fp16-overflow__cogvideo233-deepspeed-overflow-recovers.log",  # DeepSpeed timestamps
])
def test_prefixed_lines_come_back_exactly(name):
    # Where every line carries a launcher's or logger's prefix, the split restores the lines.
    original = [ln.strip() for ln in (EXTRA / name).read_text(encoding="utf-8").split("\n")
                if ln.strip()]
    assert [p.strip() for p in paste.split_line(_flatten(name, " ").rstrip("\n"))] == original


@pytest.mark.parametrize("line", [
    # A real DeepSpeed config dump (one long line, one start): sample_logs, printed by the engine.
    max((Path(__file__).resolve().parents[1] / "sample_logs" / "healthy_zero2_trainer" / "train.log")
        .read_text(encoding="utf-8").split("\n"), key=len),
    # One Megatron MoE line with a rank prefix, a timestamp and 'iteration' (FlagAI-Open/OpenSeek).
    (EXTRA / "negative__openseek-readme-megatron-moe-load-balancing-loss-num-zeros.log")
    .read_text(encoding="utf-8").strip(),
    # Ray prefix, vLLM logger and the exception on one real line (vllm-project/vllm-ascend#1127).
    (EXTRA / "gpu-oom__vllm-ascend1127-npu-oom-ray-worker-prefix.log")
    .read_text(encoding="utf-8").split("\n")[2],
    # A tqdm bar redrawn with \r holds many starts but is not a flattened log.
    "\r".join(["{'loss': 1.0, 'learning_rate': 1e-05, 'epoch': 0.1} 10%|#| 1/10 [00:01<00:09]"] * 20),
])
def test_long_real_lines_are_not_flattened_logs(line):
    assert len(line) > paste.MIN_FLATTENED_CHARS
    assert not paste.is_flattened(line)


def test_multi_line_real_logs_are_left_alone():
    for path in EXTRA.glob("*.log"):
        if "flattened" in path.name:
            continue
        _, repairs = paste.repair_text(path.read_text(encoding="utf-8", errors="replace"))
        # (lines of several ranks glued into one are cut apart: tests/test_paste_damage.py)
        assert not [r for r in repairs if r.kind != "interleaved"], path.name


def test_logs_over_the_repair_cap_pass_unchanged(tmp_path, monkeypatch):
    name = FLATTENED[0]
    path = tmp_path / name
    path.write_text(_flatten(name, " "), encoding="utf-8")
    monkeypatch.setattr(paste, "MAX_REPAIR_BYTES", 100)
    result = scan_files([str(path)])
    assert result.files[0].lines == 1
    assert not any("pasted on one line" in n for n in result.notes)


def test_flattened_failure_is_failed_exit_1(tmp_path, capsys):
    name = FLATTENED[0]
    path = tmp_path / name
    path.write_text(_flatten(name, " "), encoding="utf-8")
    code = main(["analyze", str(path)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("FAILED")
    assert "split back into" in out
