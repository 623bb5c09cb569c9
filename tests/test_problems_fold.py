"""A symptom that only re-reads another cause's lines is that cause's, not a problem of its own.

Real log: tests/data/real_logs_extra/shm-exhausted__megatron878-... (NVIDIA/Megatron-LM#878):
multiprocessing's SemLock fails with "OSError: [Errno 28] No space left on device" in a container
without --shm-size. The ENOSPC line is also a disk-full symptom; DS116 explains it as /dev/shm.
"""

from __future__ import annotations

from pathlib import Path

from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.facts.inputs import AnalysisInputs

LOG = (Path(__file__).resolve().parent / "data" / "real_logs_extra"
       / "shm-exhausted__megatron878-semlock-errno-28-docker.log")


def test_enospc_of_dev_shm_is_one_problem():
    report = analyze(AnalysisInputs.of(logs=[str(LOG)]))
    assert {"shm-exhausted", "disk-full"} <= {s.kind for s in report.symptoms}
    assert "DS117" not in {f.rule for f in report.findings}
    (problem,) = report.problems
    assert problem.rules[0] == "DS116"
    assert {"shm-exhausted", "disk-full"} <= set(problem.symptoms)
