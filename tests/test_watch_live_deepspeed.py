"""The real 2-rank ZeRO-3 ``generate`` hang (scripts/scenarios/zero3_generate_hang.py) launched
under ``dsdoctor watch --plain --stall-after 20 -- ...``: the hang is flagged, the odd rank and its
``generate`` frame are named, before gloo's own timeout fires. Marked ``deepspeed`` (skipped with
the reason when no Python with torch + deepspeed + transformers is available); ~1-2 min of CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "scenarios"))

import _common  # noqa: E402
import zero3_generate_hang as scenario  # noqa: E402

GLOO_TIMEOUT_S = 60  # the scenario's 20 s would race the 20 s stall threshold; 60 s does not


@pytest.mark.deepspeed
def test_watch_names_the_rank_stuck_in_generate(ds_python: str, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    (tmp_path / "ds_config.json").write_text(json.dumps(scenario.CONFIG))
    launcher = [ds_python, "-m", "deepspeed.launcher.runner", "--num_gpus=2",
                f"--master_port={_common.free_port()}", str(scenario.SCRIPT), "--worker",
                "--deepspeed_config", "ds_config.json", "--timeout", str(GLOO_TIMEOUT_S)]
    log = tmp_path / "generate.log"
    proc = subprocess.run(
        [sys.executable, "-m", "dsdoctor", "watch", "--plain", "--stall-after", "20",
         "--config", "ds_config.json", "--log-file", str(log), "--", *launcher],
        capture_output=True, text=True, timeout=GLOO_TIMEOUT_S * 4 + 240, cwd=tmp_path,
        env=_common.launcher_env())
    out = proc.stdout
    context = f"stdout:\n{out}\nstderr:\n{proc.stderr[-2000:]}\nlog tail:\n{log.read_text()[-3000:]}"
    assert "Traceback" not in proc.stderr, context
    lines = out.splitlines()
    advice = [i for i, line in enumerate(lines) if "what to do (rank 0 in generate)" in line]
    assert advice, context
    assert "synced_gpus=True" in lines[advice[0]]
    rank0 = next(line for line in lines if line.startswith("rank stacks: rank 0 waits in"))
    assert "inside generate (transformers/generation/utils.py:" in rank0, context
    assert "zero3_generate_hang.py:83" in rank0, context
    assert any(line.startswith("rank stacks: rank 1 waits in barrier") for line in lines), context
    stall = max(i for i, line in enumerate(lines[:advice[0]]) if line.startswith("possible hang"))
    # gloo's own timeout (the `hang` symptom) comes only after dsdoctor named the rank
    gloo = [i for i, line in enumerate(lines) if ": hang: " in line]
    assert gloo and gloo[0] > advice[0] > stall, context
    assert "command ended: exit status 1" in out
    assert proc.returncode == 1
