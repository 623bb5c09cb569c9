"""What the text report says for real logs of the newer failure kinds: the failure named, and a fix
that follows from what this log shows (not a generic one). Logs from tests/data/real_logs_extra."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.cli.main import main

EXTRA = Path(__file__).resolve().parent / "data" / "real_logs_extra"

CASES = [
    # one node: no ssh needed at all (autotuning uses pdsh even there); key for localhost
    ("ssh-failure__ds5709-pdsh-localhost-permission-denied-autotuning.log",
     ["could not ssh to localhost", "single-node run", "ssh-copy-id localhost"],
     ["--no_ssh", "for every host in the hostfile"]),
    # several nodes, ssh's reason hidden by DeepSpeed's check: run the same check by hand
    ("ssh-failure__hpcac2023-1-hostfile-host-not-reachable-via-ssh.log",
     ["gadi-gpu-v100-0011", "Hostfile: /home/552/dz9214/hostfile",
      "ssh -o PasswordAuthentication=no gadi-gpu-v100-0011 hostname", "--no_ssh"],
     ["single-node run"]),
    # sshd not listening on a non-default port
    ("ssh-failure__eva3-no-route-to-host-hostname-i-check.log",
     ["No route to host", "ssh -p 22 175.24.121.148 hostname"], []),
    # Xid 79: hardware, drain the node; Xid 31: the program first
    ("cuda-error__nvsentinel155-dmesg-gpu-fallen-off-the-bus.log",
     ["fell off the bus", "take the node out of the pool"], ["CUDA_LAUNCH_BLOCKING"]),
    ("cuda-error__tfmodels10326-dmesg-nvrm-xid-31-mmu-fault.log",
     ["Xid 31", "MMU fault", "CUDA_LAUNCH_BLOCKING=1"], ["take the node out"]),
    # NCCL ranks disagreeing: the sizes, versions/settings to compare; WARN lines already there
    ("nccl-error__nccl969-ib-collective-mismatch-ip-prefixed-proxy.log",
     ["496640", "65536", "different NCCL versions", "first NCCL WARN (line 1)"],
     ["rerun with NCCL_DEBUG=INFO"]),
    # batch schedulers other than SLURM: their own limits and options
    ("job-time-limit__canu1214-pbs-walltime-exceeded-after-thread-lines.log",
     ["86415", "86400", "#PBS -l walltime="], ["SLURM"]),
    ("job-time-limit__canu444-lsf-term-runlimit-report.log", ["bsub -W"], ["SLURM"]),
    # HCCL timeouts: HCCL's knobs, not NCCL's
    ("hang__llamafactory5071-ascend-hccl-ei0006-socket-timeout-ppo.log",
     ["HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT"], ["NCCL_DEBUG"]),
    # torch elastic exit -7 in a container: /dev/shm
    ("shm-exhausted__axolotl891-elastic-exitcode-minus-7-sigterm-others.log", ["shm"], []),
]


@pytest.mark.parametrize(("name", "says", "never"), CASES, ids=[c[0] for c in CASES])
def test_report_names_failure_and_fix_for_this_run(name, says, never, capsys):
    code = main(["analyze", str(EXTRA / name)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.startswith(("FAILED", "HUNG")), out.splitlines()[0]
    flat = " ".join(out.split())
    for text in says:
        assert text in flat, f"{name}: report lacks {text!r}"
    for text in never:
        assert text not in flat, f"{name}: report should not say {text!r}"
