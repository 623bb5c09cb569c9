"""DS234/DS235 with the input that would settle them missing: a note names it, no finding."""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.diagnose import engine
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import ScanResult, scan_files

NVME = {"train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/dev/shm/x"}}}
# EleutherAI/gpt-neox#750
MISSING = ("main: [WARNING] [engine.py:1656:_get_all_zero_checkpoints] The following zero checkpoints "
           "paths are missing: ['checkpoints/global_step9000/zero_pp_rank_8_mp_rank_00_optim_states.pt', "
           "'checkpoints/global_step9000/zero_pp_rank_9_mp_rank_00_optim_states.pt', ...]\n")


def _run(tmp: Path, config: dict, env: dict | None = None, log: str | None = None) -> tuple[list, list]:
    cfg = tmp / "ds.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    env_path = None
    if env is not None:
        env_path = str(tmp / "env.json")
        Path(env_path).write_text(json.dumps(env), encoding="utf-8")
    logs = []
    if log is not None:
        (tmp / "train.log").write_text(log, encoding="utf-8")
        logs.append(str(tmp / "train.log"))
    ctx = build_context(AnalysisInputs.of(logs=logs, configs=[str(cfg)], env=env_path),
                        scan_files(logs) if logs else ScanResult())
    return engine.evaluate(ctx, strict=True), ctx.notes


def test_ds234_without_disks_asks_for_a_current_snapshot(tmp_path: Path) -> None:
    old_snapshot = {"cpu": {"count": 8, "ram_total_bytes": 2**34}}
    findings, notes = _run(tmp_path, NVME, old_snapshot)
    assert not [f for f in findings if f.rule == "DS234"]
    assert any(n.startswith("DS234: give --env") and "dsdoctor env" in n for n in notes)


def test_ds234_no_note_when_the_snapshot_answers(tmp_path: Path) -> None:
    env = {"cpu": {"count": 8, "ram_total_bytes": 2**34},
           "disks": [{"mountpoint": "/dev/shm", "device": "tmpfs", "fstype": "tmpfs"}]}
    findings, notes = _run(tmp_path, NVME, env)
    assert [f.rule for f in findings].count("DS234") == 1
    assert not any(n.startswith("DS234") for n in notes)


def test_ds235_without_node_count_asks_for_it(tmp_path: Path) -> None:
    findings, notes = _run(tmp_path, {"train_micro_batch_size_per_gpu": 1}, log=MISSING)
    assert not [f for f in findings if f.rule == "DS235"]
    assert any(n.startswith("DS235: give the launcher log or --env") for n in notes)
