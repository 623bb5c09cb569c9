"""`dsdoctor report` does not identify the user or the cluster by default (issue 14, item 3):
user names, home paths, host names and IPs become stable placeholders that keep the structure;
--keep-paths / --keep-hosts keep them."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.redact import Redactor

# Real formats: the DeepSpeed launcher's cmd line and pdsh's "host: " prefix on a multi-node run,
# NCCL's bootstrap line, a torch traceback frame (as in tests/test_report.py and sample_logs/).
LOG = [
    "[2026-11-21 11:40:09,632] [INFO] [runner.py:618:main] cmd = /usr/bin/python3 -u -m "
    "deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 --master_addr=gpu-node-07 "
    "--master_port=29500 /home/alice/proj/train.py --deepspeed ds_config.json",
    "gpu-node-07: [2026-11-21 11:40:12,101] [INFO] [comm.py:652:init_distributed] cdb=None",
    "gpu-node-08: NCCL INFO Bootstrap : Using eth0:10.1.2.4<0>",
    "gpu-node-08: NCCL INFO cudnn 8.9.7.29 nccl 2.18.1 loopback 127.0.0.1",
    "gpu-node-08: Traceback (most recent call last):",
    'gpu-node-08:   File "/home/alice/proj/train.py", line 89, in worker',
    "gpu-node-08:     engine.step()",
    "gpu-node-08: RuntimeError: connect to 10.1.2.3:29500 failed (user alice@example.com)",
]


def _report(tmp_path: Path, *flags: str) -> str:
    log = tmp_path / "train.log"
    log.write_text("\n".join(LOG) + "\n", encoding="utf-8")
    out = tmp_path / "issue.md"
    with contextlib.redirect_stderr(io.StringIO()):
        # --force: -o overwrites the body of an earlier call in this test
        assert main(["report", str(log), "-o", str(out), "--force", *flags]) == 0
    return out.read_text(encoding="utf-8")


def test_report_hides_user_and_cluster_by_default(tmp_path: Path) -> None:
    body = _report(tmp_path)
    for name in ("alice", "gpu-node-07", "gpu-node-08", "10.1.2.4", "10.1.2.3"):
        assert name not in body, name
    assert "/home/<user>/proj/train.py" in body  # the structure stays
    assert "<user>@example.com" in body
    # stable placeholders: the same node is the same <host-N> on every line
    hosts = set(re.findall(r"<host-\d+>", body))
    assert len(hosts) == 2, hosts
    assert re.search(r"(<host-\d+>): NCCL INFO Bootstrap : Using eth0:<ip-\d+>", body)
    assert re.search(r"<ip-\d+>:29500", body)
    # what is not an identity stays: versions, loopback, the error itself
    for kept in ("8.9.7.29", "2.18.1", "127.0.0.1", "RuntimeError: connect to"):
        assert kept in body, kept


def test_keep_flags_keep_them(tmp_path: Path) -> None:
    body = _report(tmp_path, "--keep-paths", "--keep-hosts")
    for name in ("/home/alice/proj/train.py", "gpu-node-08", "10.1.2.4"):
        assert name in body, name
    body = _report(tmp_path, "--keep-hosts")
    assert "gpu-node-08" in body and "alice" not in body


def test_old_redact_flags_are_still_accepted(tmp_path: Path) -> None:
    body = _report(tmp_path, "--redact-paths", "--redact-hosts")
    assert "alice" not in body and "gpu-node-08" not in body


def test_this_machine_user_and_host_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "dgx-box42.corp.example")
    monkeypatch.setattr(getpass, "getuser", lambda: "jdoe7")
    red = Redactor(paths=True, hosts=True, this_machine=True)
    out = red.text("jdoe7 ran on dgx-box42 (dgx-box42.corp.example): /data/jdoe7/run")
    assert "jdoe7" not in out and "dgx-box42" not in out
    assert Redactor().text("jdoe7 on dgx-box42") == "jdoe7 on dgx-box42"  # off unless asked


def test_host_and_user_keys_of_an_env_snapshot_are_learned() -> None:
    red = Redactor(paths=True, hosts=True)
    env = red.env({"MASTER_ADDR": "trainhost3", "USER": "bobsmith", "NCCL_DEBUG": "INFO"})
    text = red.text("ssh trainhost3 as bobsmith")
    assert "trainhost3" not in text + str(env) and "bobsmith" not in text + str(env)
    assert env["NCCL_DEBUG"] == "INFO"


def test_world_info_hosts_are_learned_and_the_blob_re_encoded() -> None:
    import base64
    import json

    blob = base64.b64encode(json.dumps({"trn-box": [0, 1], "worker-a7": [0, 1]}).encode()).decode()
    text = (f"cmd = /usr/bin/python3 -u -m deepspeed.launcher.launch --world_info={blob} "
            "--master_port=29500 train.py\nRuntimeError: boom on trn-box\n")
    red = Redactor(hosts=True)
    red.learn(text)
    out = red.text(text)
    assert "trn-box" not in out and blob not in out
    new_blob = re.search(r"--world_info=(\S+)", out).group(1)
    world = json.loads(base64.b64decode(new_blob))
    assert sorted(world) == ["<host-1>", "<host-2>"] and list(world.values()) == [[0, 1], [0, 1]]
    assert re.search(r"boom on <host-\d>", out)


@pytest.mark.parametrize("line", [
    "srun: error: node107: task 0: Out Of Memory",  # ../shared/real_logs: the cpu-oom slurm log
    "slurmstepd: error: *** JOB 4242 ON node107 CANCELLED AT 2024-03-01T10:00:00 ***",
    "  host      : node107",  # torch elastic's failure summary
])
def test_slurm_and_elastic_host_names(line: str) -> None:
    red = Redactor(hosts=True)
    red.learn(line)
    out = red.text(line + "\nlater node107 again")
    assert "node107" not in out and "<host-1>" in out
