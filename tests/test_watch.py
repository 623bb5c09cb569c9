"""dsdoctor watch: the tailer follows a growing file; the TUI shows symptoms as they appear."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import Scanner, TailScanner, scan_files
from tests.comparable import comparable

# Real formats: DeepSpeed loss scaler (DeepSpeed#931) and the launcher's -9 exit (DeepSpeed#3232)
OVERFLOW = ("[2023-04-28 06:51:31,392] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384\n")
KILLED = ("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
          "'-u', 'main.py', '--local_rank=0'] exits with return code = -9\n")


def args(**kw):
    return AnalysisInputs.of(**kw)


def test_tail_scanner_equals_batch_scan(tmp_path):
    lines = [f"noise {i}\n" for i in range(50)]
    lines[10] = OVERFLOW
    lines[40] = KILLED
    data = "".join(lines).encode()
    path = tmp_path / "t.log"
    path.write_bytes(data)
    batch = scan_files([str(path)])
    tail = TailScanner(str(path), Scanner())
    for i in range(0, len(data), 37):  # arbitrary, line-splitting pieces
        tail.feed(data[i:i + 37])
    tail.flush(final=True)
    got = tail.result()
    assert comparable(got.symptoms) == comparable(batch.symptoms)
    assert tail.lines_read == 50


def test_watch_plain_follows_a_growing_log(tmp_path):
    path = tmp_path / "live.log"
    path.write_text("starting\n")

    def writer():
        time.sleep(1.0)
        with open(path, "a") as fh:
            fh.write(OVERFLOW)
            fh.flush()
            time.sleep(0.5)
            fh.write(KILLED)

    t = threading.Thread(target=writer)
    t.start()
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(path), "--plain",
                           "--exit-on-idle", "3"], capture_output=True, text=True, timeout=60)
    t.join()
    assert "Traceback" not in proc.stderr
    assert ":2: fp16-overflow:" in proc.stdout
    assert ":3: cpu-oom:" in proc.stdout or ":3: launcher-nonzero-exit:" in proc.stdout


def test_watch_bad_input_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(tmp_path / "no.log")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1


def test_tui_shows_symptoms_live(tmp_path):
    pytest.importorskip("textual")
    from textual.widgets import DataTable

    from dsdoctor.watch.app import WatchApp
    from dsdoctor.watch.follow import Follower

    path = tmp_path / "live.log"
    path.write_text("starting\n")

    async def scenario():
        app = WatchApp(Follower([str(path)], args()), poll=0.1)
        async with app.run_test() as pilot:
            await pilot.pause(0.3)
            with open(path, "a") as fh:
                fh.write(OVERFLOW * 3 + "x\n" * 10)
            table = app.query_one("#symptoms", DataTable)
            for _ in range(60):
                await pilot.pause(0.1)
                if table.row_count:
                    break
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            assert any(r[0] == "fp16-overflow" and r[1] == "3" for r in rows), rows
            await pilot.press("p")
            assert app.paused
            await pilot.press("q")

    asyncio.run(scenario())


def test_watch_plain_never_echoes_a_secret(tmp_path):
    token = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
    path = tmp_path / "live.log"
    path.write_text(KILLED.replace("'--local_rank=0'", f"'--local_rank=0', '--hub_token', '{token}'"))
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(path), "--plain",
                           "--exit-on-idle", "1"], capture_output=True, text=True, timeout=60)
    assert "exits with return code" in proc.stdout
    assert token not in proc.stdout


def test_env_is_local_by_default_and_none_turns_it_off():
    import argparse

    from dsdoctor.cli.watch import _env_choice

    for given, env, polled in ((None, "local", True), ("none", None, False),
                               ("local", "local", True), ("env.json", "env.json", False)):
        ns = argparse.Namespace(env=given)
        assert _env_choice(ns) is polled
        assert ns.env == env


def test_watch_plain_with_env_none(tmp_path):
    path = tmp_path / "live.log"
    path.write_text("starting\n" + OVERFLOW)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "watch", str(path), "--plain",
                           "--env", "none", "--exit-on-idle", "1"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert ":2: fp16-overflow:" in proc.stdout


def test_local_env_reaches_the_rules_once_collected(tmp_path, monkeypatch):
    """--env local: the logs are read without waiting for this machine's snapshot (seconds with
    torch installed); the rules get it as soon as a thread has collected it."""
    from dsdoctor.cli.watch import _local_env_later
    from dsdoctor.facts import envinfo
    from dsdoctor.facts.inputs import AnalysisInputs
    from dsdoctor.watch.follow import Follower

    release = threading.Event()
    monkeypatch.setattr(envinfo, "load_snapshot", lambda spec: release.wait(10) and {})
    path = tmp_path / "live.log"
    path.write_text("starting\n")
    follower = Follower([str(path)], AnalysisInputs(env="local"))
    _local_env_later(follower)
    assert follower.inputs.env is None
    assert follower.poll()  # reading does not wait
    release.set()
    for _ in range(100):
        if follower.inputs.env == "local":
            break
        time.sleep(0.05)
    assert follower.inputs.env == "local"
