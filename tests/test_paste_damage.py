"""Paste damage other than "a whole log on one line", applied to real logs.

The logs are real ones from ``tests/data/real_logs_extra`` (sources in its README) and a sample
from a real DeepSpeed run (sample_logs/checkpoint_disk_full); the damage is done here the way a
terminal, a web form or a log collector does it: a hard wrap at a fixed column, several ranks'
lines written into one, markdown around lines, a collector's prefix on every line.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from dsdoctor.logs import paste
from dsdoctor.logs.reader import normalize
from dsdoctor.logs.scan import scan_files

ROOT = Path(__file__).resolve().parents[1]
EXTRA = ROOT / "tests" / "data" / "real_logs_extra"
ROWS = {r["file"]: r for r in csv.DictReader((EXTRA / "labels.tsv").open(encoding="utf-8"),
                                             delimiter="\t")}
# Logs whose failure line is longer than 80 columns, with more than one long line.
WRAPPED = [
    "fp16-overflow__chinese-llama534-overflows-between-trainer-dicts.log",
    "port-in-use__ms-swift3988-eaddrinuse-29500.log",
    "shm-exhausted__nccltests166-failed-to-extend-dev-shm.log",
    "job-time-limit__zetta671-job-and-step-cancelled.log",
    "cpu-oom__ompi2661-mpirun-rank-exited-on-signal-9.log",
    "config-mismatch__pickscore18-accelerate-updates-ds-grad-accum.log",
    "fp16-overflow__mistral36-zero1-fp16-dynamic-loss-scale-overflow.log",
    "hang__llamafactory3698-nccl-uniqueid-socket-timeout.log",
]
# Real logs that were already pasted hard-wrapped (their labels name it).
ALREADY_WRAPPED = {
    "cuda-error__genhpf17-device-assert-wrapped-after-epoch-bar.log",
    "port-in-use__distkd10-torch1x-socket-cpp-warn-then-error-custom-port.log",
}


def _kinds(text: str) -> set[str]:
    return {k for k in text.split(",") if k}


def _lines(name: str) -> list[str]:
    return [ln.rstrip("\r") for ln in (EXTRA / name).read_text(encoding="utf-8").split("\n")]


def _hard_wrap(lines: list[str], width: int) -> str:
    out = []
    for line in lines:
        while len(line) > width and "\r" not in line:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


def _assert_labels(path: Path, name: str) -> set[str]:
    got = set(scan_files([str(path)]).symptoms)
    row = ROWS[name]
    assert _kinds(row["expected_classes"]) <= got, name
    assert not (_kinds(row["must_not_classes"]) & got), name
    return got


# At 120 columns mistral36 has one wrapped message (repeated): one wrapped shape is no evidence
# of a wrap (a repeated long message looks the same), so it is left as it is.
@pytest.mark.parametrize("name,width", [(n, 80) for n in WRAPPED] + [
    (n, 120) for n in WRAPPED if "mistral36" not in n])
def test_hard_wrapped_real_log_keeps_its_labels(tmp_path, name, width):
    path = tmp_path / name
    path.write_text(_hard_wrap(_lines(name), width), encoding="utf-8")
    result = scan_files([str(path)])
    if any(len(ln) > width for ln in _lines(name)) and paste.wrap_width(
            path.read_text(encoding="utf-8").split("\n")) == width:
        assert any(f"hard-wrapped at {width} columns" in n for n in result.notes)
    _assert_labels(path, name)


def test_hard_wrap_repair_is_what_finds_the_symptoms(tmp_path, monkeypatch):
    """Without the repair, wrapped logs lose symptoms (the test above could fail)."""
    monkeypatch.setattr(paste, "MIN_WRAPPED_LINES", 10**6)
    lost = 0
    for name in WRAPPED:
        path = tmp_path / name
        path.write_text(_hard_wrap(_lines(name), 80), encoding="utf-8")
        got = set(scan_files([str(path)]).symptoms)
        lost += not _kinds(ROWS[name]["expected_classes"]) <= got
    assert lost >= len(WRAPPED) // 2


def test_real_logs_are_not_taken_for_hard_wrapped():
    """Only the logs that were pasted wrapped are rejoined: panels (rich), separators, dmesg and
    repeated messages of one width are not wraps."""
    found = set()
    for path in EXTRA.glob("*.log"):
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        if paste.wrap_width(lines) is not None:
            found.add(path.name)
    assert found == ALREADY_WRAPPED


def test_wrapped_lines_are_joined_back_exactly():
    name = "shm-exhausted__nccltests166-failed-to-extend-dev-shm.log"
    lines = [ln for ln in _lines(name) if ln]
    text, repairs = paste.repair_text(_hard_wrap(lines, 80), 80)
    assert text.split("\n") == lines
    assert repairs and all(r.kind == "wrapped" and r.pieces == 1 and r.joined >= 2 for r in repairs)


# ---- several ranks' lines in one line ---------------------------------------------------------

def _interleave(lines: list[str]) -> str:
    """Ranks 0 and 1's tracebacks from the real sample, alternating line by line, every third
    pair written into one line (no newline between the ranks)."""
    r0 = [ln for ln in lines[181:208]]
    r1 = [ln for ln in lines[208:235]]
    out = []
    for i, (a, b) in enumerate(zip(r0, r1)):
        out.append(a + b if i % 3 == 0 else a + "\n" + b)
    return "\n".join(lines[:181] + out + lines[235:])


def test_interleaved_ranks_each_keep_their_exception(tmp_path):
    sample = ROOT / "sample_logs" / "checkpoint_disk_full" / "train.log"
    lines = sample.read_text(encoding="utf-8").split("\n")
    assert lines[181].startswith("[rank0]: Traceback") and lines[208].startswith("[rank1]: Traceback")
    path = tmp_path / "train.log"
    path.write_text(_interleave(lines), encoding="utf-8")
    result = scan_files([str(path)])
    assert any("several ranks" in n for n in result.notes)
    exc = result.symptoms["python-exception"]
    assert exc.ranks == (0, 1)
    assert result.symptoms["disk-full"].ranks == (0, 1)
    assert {ev.rank for ev in exc.evidence if ev.text.startswith("RuntimeError:")} == {0, 1}
    # each rank's exception line is its own line again, its rank prefix peeled
    texts = path.read_text(encoding="utf-8")
    assert "last):[rank1]: Traceback" in texts


@pytest.mark.parametrize("line", [
    # real line starts whose prefixes chain (nothing to cut)
    "[default0]:[rank0]: Traceback (most recent call last):",
    "> [rank0]:     pg, pg_store = _new_process_group_helper(",
    "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught",
    "(NPURayWorkerWrapper pid=44419) [rank7]:[W609 06:57:47.819535026 compiler_depend.ts:877]",
    "i.pretrain/0 [default2]:[rank2]: torch.OutOfMemoryError: CUDA out of memory.",
])
def test_prefix_chains_are_not_cut(line):
    assert paste.interleaved_cuts(line) == []


def test_mpirun_tagged_lines_written_into_one_are_cut():
    # SageMaker smddp output (pacman100/accelerate-aws-sagemaker README), two ranks' lines joined
    a = "[1,mpirank:0,algo-1]<stderr>:INFO:root:Reducer buckets have been rebuilt in this iteration."
    b = "[1,mpirank:3,algo-1]<stderr>:INFO:root:Reducer buckets have been rebuilt in this iteration."
    assert paste.interleaved_cuts(a + b) == [len(a)]
    assert paste.interleaved_cuts(a) == []


def test_rank_line_after_a_progress_bar_is_cut():
    # tests/data/real_logs_extra/nan-loss__faithdiff34-...: the bar and the traceback share a line
    line = ("Steps:   0%|▏          | 17/6000 [00:58<4:50:05,  2.91s/it, lr=0, noise_step_loss=nan]"
            "[rank0]: Traceback (most recent call last):")
    cuts = paste.interleaved_cuts(line)
    assert len(cuts) == 1 and line[cuts[0]:].startswith("[rank0]: Traceback")


# ---- markdown and log-collector prefixes ------------------------------------------------------

MARKED = [
    "gpu-oom__vllm-ascend1127-npu-oom-ray-worker-prefix.log",
    "disk-full__llamafactory1223-streamwriter-after-checkpoint-save.log",
    "cuda-error__dsexamples592-illegal-memory-access-what-frames.log",
    "nccl-error__nccl1029-multinode-prefixed-internal-error.log",
]


def _marked(lines: list[str], how: str) -> str:
    lines = [ln for ln in lines if ln.strip()]
    if how == "bold":
        lines = [f"**{ln}**" for ln in lines]
    elif how == "backticks":
        lines = [f"`{ln}`" for ln in lines]
    elif how == "fence":  # the fence glued to the first and last lines
        lines = [f"```text {lines[0]}", *lines[1:-1], lines[-1] + "```"]
    elif how == "quote-first":
        lines = ["> " + lines[0], *lines[1:]]
    elif how == "cri":  # Kubernetes CRI log file (kubelet's format: time, stream, P/F tag)
        lines = [f"2024-05-01T12:00:{i % 60:02d}.123456789Z stderr F {ln}" for i, ln in enumerate(lines)]
    elif how == "sagemaker":  # SageMaker's mpirun --tag-output with the host
        lines = [f"[1,mpirank:3,algo-1]<stderr>:{ln}" for ln in lines]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("how", ["bold", "backticks", "fence", "quote-first", "cri", "sagemaker"])
@pytest.mark.parametrize("name", MARKED)
def test_marked_up_real_log_keeps_its_labels(tmp_path, name, how):
    path = tmp_path / name
    path.write_text(_marked(_lines(name), how), encoding="utf-8")
    _assert_labels(path, name)


@pytest.mark.parametrize("raw,text,rank,host", [
    (b"**RuntimeError: CUDA error: an illegal memory access was encountered**",
     "RuntimeError: CUDA error: an illegal memory access was encountered", None, None),
    (b"`[rank1]: torch.OutOfMemoryError: CUDA out of memory.`",
     "torch.OutOfMemoryError: CUDA out of memory.", 1, None),
    (b"```python Traceback (most recent call last):", "Traceback (most recent call last):", None, None),
    (b"```Traceback (most recent call last):", "Traceback (most recent call last):", None, None),
    (b"OSError: [Errno 28] No space left on device```", "OSError: [Errno 28] No space left on device",
     None, None),
    # a message's own backticks stay (only a pair around the whole line is markup)
    (b"ValueError: `--mixed_precision` arg cannot be set to `fp16`",
     "ValueError: `--mixed_precision` arg cannot be set to `fp16`", None, None),
    # SageMaker smddp output, pacman100/accelerate-aws-sagemaker README (real job log)
    (b"[1,mpirank:0,algo-1]<stdout>:algo-1:79:1300 [0] NCCL INFO Launch mode Parallel",
     "algo-1:79:1300 [0] NCCL INFO Launch mode Parallel", 0, "algo-1"),
    # the CRI log format's example in Grafana Loki's docs (promtail "cri" stage)
    (b"2019-04-30T02:12:41.8443515Z stdout F message", "message", None, None),
])
def test_normalize_peels_markup_and_collector_prefixes(raw, text, rank, host):
    seg = normalize(raw)
    assert (seg.text, seg.rank, seg.host) == (text, rank, host)


# ---- the report says what was repaired ----------------------------------------------------------

def test_report_excerpt_maps_repaired_lines_to_physical_ones(tmp_path):
    from dsdoctor.render.issue_body import build_issue
    from dsdoctor.render.issue_log import first_error_excerpt

    sample = ROOT / "sample_logs" / "checkpoint_disk_full" / "train.log"
    path = tmp_path / "train.log"
    path.write_text(_interleave(sample.read_text(encoding="utf-8").split("\n")), encoding="utf-8")
    ex = first_error_excerpt([str(path)])
    assert ex is not None
    assert "lines 182-183 are physical line 182 (several ranks' lines written into one line)" in (
        ex.paste_note)
    body = build_issue(target="deepspeed", report=None, logs=[str(path)], excerpt=ex).body
    assert ex.paste_note in body
    # an undamaged log's excerpt says nothing of the kind
    plain = first_error_excerpt([str(sample)])
    assert plain is not None and plain.paste_note == ""
