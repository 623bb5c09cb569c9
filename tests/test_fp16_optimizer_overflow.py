"""One fp16 overflow of DeepSpeed's non-ZeRO FP16_Optimizer counts once per printing line of its
release's own message, on every release.

Up to 0.19.7 an overflow printed "Grad overflow on iteration N" and "Reducing dynamic loss scale
from X to Y" on every rank and "[Rank 0] Overflow detected. Skipping step" once (fused_optimizer.py
log_dist, ranks=[0]); the last is the one counted. 0.19.8 dropped it (0.19.7
fused_optimizer.py:269), leaving the per-rank "Reducing dynamic loss scale" lines
(0.19.8 fused_optimizer.py:414), which then count, one per rank like ZeRO's per-rank OVERFLOW lines.
"""

from __future__ import annotations

from pathlib import Path

from dsdoctor.logs.scan import scan_files, scan_text

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"

# deepspeedai/DeepSpeed#2069 (DeepSpeed 0.6-era fused_optimizer, 4 ranks in one stream): one
# overflow at iteration 9. Copied as posted, without the tqdm bar in front of the first line.
DS_2069_ONE_OVERFLOW = """\
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:382:_update_scale]
Grad overflow on iteration 9
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:382:_update_scale]
Grad overflow on iteration 9
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:382:_update_scale]
Grad overflow on iteration 9
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:382:_update_scale]
Grad overflow on iteration 9
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:383:_update_scale] Reducing dynamic loss scale from 8388608.0 to 4194304.0
[2022-07-05 16:30:10,796] [INFO] [fused_optimizer.py:383:_update_scale] Reducing dynamic loss scale from 8388608.0 to 4194304.0
[2022-07-05 16:30:10,797] [INFO] [fused_optimizer.py:383:_update_scale] Reducing dynamic loss scale from 8388608.0 to 4194304.0
[2022-07-05 16:30:10,797] [INFO] [fused_optimizer.py:383:_update_scale] Reducing dynamic loss scale from 8388608.0 to 4194304.0
[2022-07-05 16:30:10,797] [INFO] [logging.py:69:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8388608.0, reducing to 4194304.0
"""

# The same four ranks' per-rank lines alone: what 0.19.8 prints for that overflow.
RANK_LINES_ONLY = "".join(
    line + "\n" for line in DS_2069_ONE_OVERFLOW.splitlines() if "Overflow detected" not in line)


def test_a_0197_style_overflow_counts_once_as_before():
    sym = scan_text(DS_2069_ONE_OVERFLOW).symptoms["fp16-overflow"]
    assert sym.count == 1
    assert sym.patterns == {"ds-overflow-legacy": 1}
    assert sym.first.line == 13
    assert sym.values["attempted_scale"]["first"] == 8388608.0
    assert sym.values["next_scale"]["last"] == 4194304.0


def test_without_the_rank_0_line_each_rank_line_counts():
    sym = scan_text(RANK_LINES_ONLY).symptoms["fp16-overflow"]
    assert sym.count == 4  # one per printing rank, as ZeRO's per-rank OVERFLOW lines are counted
    assert sym.patterns == {"ds-fp16-optimizer-scale-reduced": 4}
    assert sym.values["attempted_scale"]["first"] == 8388608.0
    assert sym.values["next_scale"]["min"] == 4194304.0


def test_the_rank_0_line_in_another_file_still_vetoes(tmp_path):
    # one file per rank: rank 0's file has the "Overflow detected" line, the others only theirs
    rank0, rank1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    lines = DS_2069_ONE_OVERFLOW.splitlines()
    rank0.write_text("\n".join(lines[8:9] + lines[12:]) + "\n")
    rank1.write_text("\n".join(lines[9:10]) + "\n")
    sym = scan_files([str(rank1), str(rank0)]).symptoms["fp16-overflow"]
    assert sym.count == 1
    assert sym.patterns == {"ds-overflow-legacy": 1}


def test_other_overflow_lines_combine_with_the_rank_lines():
    # two runs in one log: a ZeRO run's OVERFLOW line (deepspeedai/DeepSpeed#931), then 0.19.8
    # stage-0 lines; both count, first and last are the earliest and latest lines
    zero = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n")
    sym = scan_text(zero + RANK_LINES_ONLY).symptoms["fp16-overflow"]
    assert sym.count == 5
    assert sym.first.line == 1 and sym.last.line == 13
    assert sym.values["attempted_scale"]["first"] == 65536
    assert sym.values["attempted_scale"]["max"] == 8388608.0
    assert sym.values["next_scale"]["min"] == 32768
    assert sym.values["next_scale"]["last"] == 4194304.0


def test_the_0198_sample_counts_its_overflows():
    log = (SAMPLES / "fp16_overflow_zero0" / "train.log").read_text()
    want = log.count("Reducing dynamic loss scale from")
    sym = scan_files([str(SAMPLES / "fp16_overflow_zero0" / "train.log")]).symptoms[
        "fp16-overflow"]
    assert want > 0 and "Overflow detected" not in log
    assert sym.count == want
