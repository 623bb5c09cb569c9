"""``dsdoctor watch --plain [--stall-after S] -- CMD``: a real process that prints progress, goes
quiet, resumes and fails; several LOGs; Ctrl-C stops the command's process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from dsdoctor.watch.stacks import find_py_spy

# Trainer log dicts: the real format of transformers' Trainer (hf-trainer.yaml's samples)
TRAINER = r"""
import sys, time

def log(i):
    print("{'loss': %.4f, 'grad_norm': 9.305521011352539, 'learning_rate': 4.9424511162240815e-06, 'epoch': %.2f}" % (2.0 - i / 10, i / 10), flush=True)

def wait_for_the_data_loader(seconds):
    time.sleep(seconds)

for i in range(4):
    log(i)
    time.sleep(0.2)
wait_for_the_data_loader(float(sys.argv[1]))
log(4)
sys.exit(int(sys.argv[2]))
"""


def watch(tmp_path: Path, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsdoctor", "watch", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path)


def test_stall_is_raised_with_the_last_progress_line_then_cleared(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    log = tmp_path / "run.log"
    proc = watch(tmp_path, "--plain", "--stall-after", "2", "--log-file", str(log), "--",
                 sys.executable, str(script), "6", "3")
    out = proc.stdout
    assert "Traceback" not in proc.stderr
    assert f"its output goes to {log}" in proc.stderr
    stall = next(line for line in out.splitlines() if line.startswith("possible hang"))
    assert "no progress for 2s (threshold 2s)" in stall
    assert f"last progress {log}:4: {{'loss': 1.7000" in stall
    assert "progress resumed after" in out and f"({log}:5)" in out
    assert out.index("possible hang") < out.index("progress resumed")
    # the launched command's own process is "the rank": its stack names where it waits
    stack = next(line for line in out.splitlines() if line.startswith("rank stacks:"))
    if find_py_spy():
        assert "is in wait_for_the_data_loader (train.py:8)" in stack, stack
    else:
        assert "pip install py-spy" in stack
    assert "command ended: exit status 3" in out
    # the summary after the command: the stall is kept (cleared: a warning), its stacks under it
    summary = out[out.index("command ended"):]
    assert "  warning: WATCH-HANG run-stalled: stalled for " in summary
    if find_py_spy():
        assert "    pid " in summary and "wait_for_the_data_loader (train.py:8)" in summary
    assert proc.returncode == 1  # a failed command is never called clean
    assert log.read_text().count("'loss'") == 5  # the tee is byte for byte


def test_a_run_that_keeps_stepping_raises_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    proc = watch(tmp_path, "--plain", "--stall-after", "5", "--", sys.executable, str(script),
                 "0.5", "0")
    assert "possible hang" not in proc.stdout
    assert "command ended: exit status 0" in proc.stdout
    assert proc.returncode == 0
    logs = list(tmp_path.glob("dsdoctor-watch-*.log"))  # the default place: the current directory
    assert len(logs) == 1 and "'loss'" in logs[0].read_text()


# Real lines: the loss scaler's overflow (DeepSpeed#931) and the launcher's -9 (DeepSpeed#3232)
OVERFLOW = ("[2023-04-28 06:51:31,392] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384\n")
KILLED = ("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
          "'-u', 'main.py', '--local_rank=0'] exits with return code = -9\n")


def test_several_logs_are_followed_together(tmp_path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text("starting\n" + OVERFLOW)
    b.write_text("starting\n" + KILLED)
    proc = watch(tmp_path, str(a), str(b), "--plain", "--exit-on-idle", "2")
    assert f"{a}:2: fp16-overflow:" in proc.stdout
    assert f"{b}:2: " in proc.stdout and "exits with return code = -9" in proc.stdout
    assert "DS106" in proc.stdout  # a finding from the second log, in the one analysis


SLEEPER = r"""
import time
print("started", flush=True)
time.sleep(120)
"""


def test_ctrl_c_stops_the_command_group(tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text(SLEEPER)
    log = tmp_path / "run.log"
    # As from a terminal: Ctrl-C's default action. A test run started in the background by a
    # non-interactive shell has SIGINT ignored, and an ignored signal stays ignored in children.
    watcher = subprocess.Popen([sys.executable, "-m", "dsdoctor", "watch", "--plain", "--log-file",
                                str(log), "--", sys.executable, str(script)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # safety nets only, not timings: after Ctrl-C watch stops the group and analyzes the log
        # (patterns compiled, the rules run), which took over 30 s on CI's loaded 2 cores
        deadline = time.monotonic() + 300
        while "started" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.1)
        child = psutil.Process(watcher.pid).children()[0]
        assert os.getpgid(child.pid) == child.pid != os.getpgid(watcher.pid)  # its own group
        watcher.send_signal(signal.SIGINT)  # what the terminal's Ctrl-C sends to dsdoctor
        out, err = watcher.communicate(timeout=300)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert "stopping the command (SIGINT" in err
    assert "command ended:" in out
    assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
    assert "Traceback" not in err, err


def test_launch_errors_are_one_line(tmp_path):
    proc = watch(tmp_path, "--plain", "--", str(tmp_path / "no-such-launcher"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "cannot start" in proc.stderr
    proc = watch(tmp_path, "--plain")
    assert proc.returncode == 2 and "nothing to watch" in proc.stderr
    proc = watch(tmp_path, "--plain", "--pid", "1", "--", "true")
    assert proc.returncode == 2 and "give one" in proc.stderr


# A rank that writes its own log (as `--log_file`-style trainers do), then waits in a function.
RANK_WRITING_LOG = r"""
import sys, time
with open(sys.argv[1], "a") as fh:
    for i in range(3):
        fh.write("{'loss': %.4f, 'grad_norm': 9.305521011352539, 'learning_rate': 4.9424511162240815e-06, 'epoch': %.2f}\n" % (2.0 - i / 10, i / 10))
        fh.flush()
        time.sleep(0.2)

def wait_in_all_reduce():
    time.sleep(120)

print("waiting", flush=True)
wait_in_all_reduce()
"""


def test_pid_attaches_and_reads_the_rank_from_the_environment(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_WRITING_LOG)
    log = tmp_path / "rank3.log"
    env = dict(os.environ, RANK="3", LOCAL_RANK="3")
    job = subprocess.Popen([sys.executable, str(script), str(log)], stdout=subprocess.PIPE,
                           text=True, env=env)
    try:
        assert job.stdout.readline().strip() == "waiting"
        proc = watch(tmp_path, str(log), "--plain", "--pid", str(job.pid), "--stall-after", "2",
                     "--exit-on-idle", "8")
    finally:
        job.kill()
        job.wait()
    out = proc.stdout
    assert f"last progress {log}:3:" in out
    stack = next(line for line in out.splitlines() if line.startswith("rank stacks:"))
    if find_py_spy():
        assert stack.startswith("rank stacks: rank 3 is in wait_in_all_reduce (rank.py:10)"), stack
    else:
        assert "pip install py-spy" in stack


# A hand-written loop as users write it: print() without flush, into watch's pipe
UNFLUSHED = r"""
import os, sys, time
print("step 1 | loss 2.4900")
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_print_without_flush_reaches_the_log_while_the_command_runs(tmp_path, monkeypatch):
    """Python block-buffers stdout into a pipe: without PYTHONUNBUFFERED the line would reach the
    log only when the script exits, and a loop printing a step a second would look hung."""
    from dsdoctor.watch.launch import Launched  # noqa: PLC0415

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    script, go, log = tmp_path / "loop.py", tmp_path / "go", tmp_path / "run.log"
    script.write_text(UNFLUSHED)
    launched = Launched([sys.executable, str(script), str(go)], str(log))
    seen_while_running = False
    while launched.poll() is None:
        if not seen_while_running and "step 1 | loss" in log.read_text():
            seen_while_running = True
            go.touch()  # the script ends once its line has been seen
        time.sleep(0.05)
    assert seen_while_running
    assert launched.poll() == launched.wait() and launched.proc.returncode == 0


def test_a_pythonunbuffered_the_user_set_is_kept():
    from dsdoctor.watch.launch import child_environment  # noqa: PLC0415

    assert child_environment({"PATH": "/bin"}) == {"PATH": "/bin", "PYTHONUNBUFFERED": "1"}
    assert child_environment({"PYTHONUNBUFFERED": ""})["PYTHONUNBUFFERED"] == ""
