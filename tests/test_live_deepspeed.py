"""Live runs of the sample scenarios with the installed DeepSpeed, analyzed by dsdoctor.

These catch format drift: if a DeepSpeed (or torch/Transformers) release changes what it prints, the
freshly produced log no longer yields what ``expected.json`` says. Marked ``deepspeed``: skipped with
the reason when no Python with torch + deepspeed + transformers is available (``--ds-python`` or
``DSDOCTOR_DS_PYTHON`` names one; by default this interpreter). Nothing is installed here.

Each run takes 10-60 s on 2 CPU cores (the hang scenario waits for its 20 s gloo timeout; the first
DeepSpeed run on a machine also JIT-builds DeepSpeed's small shm comm op, about 40 s, then cached).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import sample_check  # noqa: E402

# The collapse and the hang (+ its twin) run by default: they are short and cover the loss scaler,
# the launcher, tracebacks and gloo timeouts; so do the runs that end without a failure of their
# own (issue 19: a desync hang, SIGTERM, Ctrl-C, kill -9), whose launcher lines drift between
# releases; so do the runs whose culprit rank the per-rank table must name (one rank fails first,
# one stalls in its data loader). DSDOCTOR_LIVE_SCENARIOS=all (or a comma list) runs more.
DEFAULT_LIVE = ["fp16_loss_scale_collapse", "zero3_generate_hang", "zero3_generate_synced",
                "hang_desync_allreduce", "stopped_sigterm", "stopped_ctrl_c", "killed_sigkill",
                "rank_failed_first", "dataloader_stall"]
ALL_LIVE = sorted(p.stem for p in (REPO / "scripts" / "scenarios").glob("*.py")
                  if not p.name.startswith("_"))
_wanted = os.environ.get("DSDOCTOR_LIVE_SCENARIOS", "")
LIVE = ALL_LIVE if _wanted == "all" else [s for s in _wanted.split(",") if s] or DEFAULT_LIVE


@pytest.mark.deepspeed
@pytest.mark.parametrize("scenario", LIVE)
def test_live_scenario(scenario: str, ds_python: str, tmp_path: Path) -> None:
    out = tmp_path / "live" / scenario
    proc = subprocess.run(
        [ds_python, str(REPO / "scripts" / "scenarios" / f"{scenario}.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    log_tail = "".join(p.read_text(errors="replace")[-3000:] for p in out.glob("*.log"))
    assert proc.returncode == 0, (f"scenario run failed ({proc.returncode}):\n{proc.stdout}\n"
                                  f"{proc.stderr[-3000:]}\n--- log tail ---\n{log_tail}")

    # The driver writes expected.json for the live run; it must say what the committed sample says.
    live_expected = sample_check.Expected.load(out)
    assert live_expected == sample_check.Expected.load(REPO / "sample_logs" / scenario)

    if live_expected.scripts:  # scripts are named relative to the repository
        data = json.loads((out / "expected.json").read_text())
        data["scripts"] = [str(REPO / s) for s in data["scripts"]]
        (out / "expected.json").write_text(json.dumps(data))

    code, stdout, stderr = sample_check.run_analyze(out)
    assert code in (0, 1), f"analyze exited {code}: {stderr}"
    found = sample_check.problems(json.loads(stdout), live_expected)
    assert not found, f"{scenario} (live run with {ds_python}): " + "; ".join(found)
