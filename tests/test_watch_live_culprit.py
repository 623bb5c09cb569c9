"""The four real 2-rank CPU desyncs of issue 21, launched under ``dsdoctor watch --plain -- ...``:
watch names the culprit rank and its frame while the run hangs (py-spy's stacks, on a stall),
and the summary it prints when the command ends carries it (analyze's verdict and per-rank
table, WATCH-HANG with the stacks) with exit code 1.

Marked ``deepspeed`` (skipped with the reason when no Python with torch + deepspeed +
transformers is available); each run takes 1-3 minutes of CPU. Nothing is timed: the
assertions are on the lines watch printed and their order; the timeouts are only a safety net.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "scenarios"))

import _common  # noqa: E402
import _lm  # noqa: E402
import dataloader_stall  # noqa: E402
import hang_desync_allreduce  # noqa: E402
import rank_failed_first  # noqa: E402
import zero3_generate_hang  # noqa: E402

STALL_AFTER_S = 15  # watch's fixed stall threshold: well inside the process-group timeout
ENDED = "command ended: "


@dataclass(frozen=True)
class Watched:
    returncode: int
    live: list[str]  # stdout lines before "command ended"
    summary: list[str]  # from "command ended" on
    context: str  # for assertion messages


def line_of(module: ModuleType, text: str) -> int:
    """The line number of the first source line containing ``text`` (the culprit's frame)."""
    lines = Path(module.__file__ or "").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def watch_scenario(ds_python: str, tmp_path: Path, module: ModuleType, gloo_timeout: int) -> Watched:
    """``dsdoctor watch --plain -- deepspeed <scenario> --worker ...`` on 2 CPU ranks; the run's
    /dev/shm buffers are removed afterwards."""
    config = getattr(module, "CONFIG", _lm.ZERO2_CONFIG)
    (tmp_path / "ds_config.json").write_text(json.dumps(config))
    port = _common.free_port()
    launcher = [ds_python, "-m", "deepspeed.launcher.runner", "--num_gpus=2",
                f"--master_port={port}", str(module.SCRIPT), "--worker",
                "--deepspeed_config", "ds_config.json", "--timeout", str(gloo_timeout)]
    log = tmp_path / "run.log"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dsdoctor", "watch", "--plain", "--env", "none",
             "--stall-after", str(STALL_AFTER_S), "--config", "ds_config.json",
             "--log-file", str(log), "--", *launcher],
            capture_output=True, text=True, timeout=gloo_timeout * 4 + 600, cwd=tmp_path,
            env=_common.launcher_env())
    finally:
        _common.remove_shm_buffers(port)
    lines = proc.stdout.splitlines()
    context = (f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-2000:]}\nlog tail:\n"
               f"{log.read_text()[-3000:] if log.exists() else ''}")
    assert "Traceback" not in proc.stderr, context
    ended = next((i for i, line in enumerate(lines) if line.startswith(ENDED)), None)
    assert ended is not None, context
    return Watched(proc.returncode, lines[:ended], lines[ended:], context)


def summary_verdict(w: Watched) -> str:
    """The summary's first analysis line: ``dsdoctor watch: HUNG: ...``."""
    verdicts = [line for line in w.summary if line.startswith("dsdoctor watch: ") and
                line.split(": ", 2)[1] in ("HUNG", "FAILED", "KILLED", "STOPPED")]
    assert verdicts, w.context
    return verdicts[0]


def culprit_row(w: Watched) -> str:
    rows = [line for line in w.summary if line.endswith("← culprit")]
    assert len(rows) == 1, w.context
    return rows[0]


def stack_line(w: Watched, prefix: str) -> str:
    found = [line for line in w.live if line.startswith("rank stacks: " + prefix)]
    assert found, w.context
    return found[-1]  # the last stall's: earlier stalls may be startup (a JIT op build)


@pytest.mark.deepspeed
def test_rank0_only_all_reduce(ds_python: str, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    w = watch_scenario(ds_python, tmp_path, hang_desync_allreduce, gloo_timeout=60)
    at = line_of(hang_desync_allreduce, "dist.all_reduce(mean)")
    # live: rank 0's stack is in the all_reduce that only it entered, at its call site
    rank0 = stack_line(w, "rank 0 waits in all_reduce")
    assert f"hang_desync_allreduce.py:{at})" in rank0, w.context
    assert "rank 1 waits in" in stack_line(w, "rank 1 ")
    # the summary: analyze's verdict names rank 0 and the frame, rank 1 only waited
    verdict = summary_verdict(w)
    assert verdict.startswith("dsdoctor watch: HUNG: rank 0 waited alone in the all_reduce at "
                              f"hang_desync_allreduce.py:{at}"), w.context
    assert "rank 1 only waited" in verdict
    assert culprit_row(w).lstrip().startswith("rank 0 ")
    hang = [line for line in w.summary if "WATCH-HANG run-hung" in line]
    assert hang and hang[0].startswith("  error: "), w.context
    assert any(f"hang_desync_allreduce.py:{at})" in line for line in w.summary), w.context
    assert w.returncode == 1


@pytest.mark.deepspeed
def test_zero3_generate_desync(ds_python: str, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    w = watch_scenario(ds_python, tmp_path, zero3_generate_hang, gloo_timeout=60)
    rank0 = stack_line(w, "rank 0 waits in")
    assert "inside generate (transformers/generation/utils.py:" in rank0, w.context
    assert "zero3_generate_hang.py:83)" in rank0, w.context
    assert any("what to do (rank 0 in generate)" in line and "synced_gpus=True" in line
               for line in w.live), w.context
    # the stall ended on the timeout's output, then the command failed: still a hang, an error
    hang = [line for line in w.summary if "WATCH-HANG" in line]
    assert hang and hang[0].startswith("  error: WATCH-HANG run-hung:"), w.context
    assert hang[0].endswith("the run hung, then failed"), w.context
    assert any("inside generate" in line and "zero3_generate_hang.py:83)" in line
               for line in w.summary), w.context
    assert summary_verdict(w).startswith("dsdoctor watch: HUNG: "), w.context
    assert w.returncode == 1


@pytest.mark.deepspeed
def test_rank_failed_first(ds_python: str, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    w = watch_scenario(ds_python, tmp_path, rank_failed_first, gloo_timeout=60)
    # live: the first exception event is rank 1's own error, named as rank 1's as it arrives,
    # before rank 0's lost peer
    exceptions = [line for line in w.live if ": python-exception: " in line]
    assert exceptions and ": python-exception: [rank 1] ValueError: batch 6 on rank 1" in \
        exceptions[0], w.context
    assert any(": [rank 0] " in line and "Connection closed by peer" in line
               for line in exceptions[1:]), w.context
    # the summary: rank 1 died first at its frame; rank 0 only waited
    verdict = summary_verdict(w)
    at = line_of(rank_failed_first, "raise ValueError(")
    assert verdict.startswith("dsdoctor watch: FAILED: rank 1 died first on ValueError"), w.context
    assert "rank 0 only waited" in verdict
    row = culprit_row(w)
    assert row.lstrip().startswith("rank 1 ") and "failed: ValueError" in row, w.context
    assert f"at rank_failed_first.py:{at} in check_batch" in row, w.context
    assert w.returncode == 1


@pytest.mark.deepspeed
def test_rank_sleeping_in_the_data_loader(ds_python: str, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    # 40 s: shorter than the sample's 60 s sleep (STALL_S), longer than the 15 s stall threshold
    w = watch_scenario(ds_python, tmp_path, dataloader_stall, gloo_timeout=40)
    at = line_of(dataloader_stall, "time.sleep(STALL_S)")
    rank1 = stack_line(w, "rank 1 is in ")
    assert f"dataloader_stall.py:{at})" in rank1 and "inside the data loader" in rank1, w.context
    assert any("what to do (rank 1 in the data loader)" in line for line in w.live), w.context
    verdict = summary_verdict(w)
    assert verdict.startswith("dsdoctor watch: HUNG: rank 1 never entered all_reduce"), w.context
    assert "rank 0 only waited" in verdict
    assert culprit_row(w).lstrip().startswith("rank 1 ")
    hang = [line for line in w.summary if "WATCH-HANG run-hung" in line]
    assert hang and hang[0].startswith("  error: "), w.context
    assert any(f"dataloader_stall.py:{at})" in line for line in w.summary), w.context
    assert w.returncode == 1
