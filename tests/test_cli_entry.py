"""The console script's exit (cli.main.entry): it skips the interpreter's teardown, and loses
nothing on the way: the whole output, the exit code, the exit handlers and temporary directories'
finalizers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "fp16_loss_scale_collapse"

PROBE = """
import atexit, sys, tempfile, weakref
marker = sys.argv[1]
atexit.register(lambda: open(marker, "a").write("atexit ran\\n"))
tmp = tempfile.TemporaryDirectory()  # its finalizer runs at exit
open(marker, "a").write(tmp.name + "\\n")
sys.argv = ["dsdoctor", *sys.argv[2:]]
from dsdoctor.cli.main import entry
entry()
"""


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    marker = tmp_path / "marker"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(marker), *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    return proc, marker.read_text().splitlines()


def test_entry_keeps_output_exit_code_and_exit_handlers(tmp_path: Path) -> None:
    proc, lines = _run(tmp_path, "analyze", str(SAMPLE / "train.log"), "--config",
                       str(SAMPLE / "ds_config.json"), "--format", "json")
    assert proc.returncode == 1  # the sample's run failed
    report = json.loads(proc.stdout)  # the whole JSON arrived through the pipe
    assert report["verdict"]["fate"] == "failed"
    tmpdir, ran = lines
    assert ran == "atexit ran"
    assert not Path(tmpdir).exists()  # the TemporaryDirectory finalizer ran


def test_entry_exits_2_on_bad_input(tmp_path: Path) -> None:
    proc, lines = _run(tmp_path, "analyze", str(tmp_path / "missing.log"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "dsdoctor: error:" in proc.stderr
    assert lines[-1] == "atexit ran"


def test_module_and_console_script_use_entry() -> None:
    assert (ROOT / "dsdoctor" / "__main__.py").read_text().strip().endswith("entry()")
    assert 'dsdoctor = "dsdoctor.cli.main:entry"' in (ROOT / "pyproject.toml").read_text()


def test_a_profiled_run_exits_the_ordinary_way(tmp_path: Path) -> None:
    # python -m cProfile writes its figures after the module returns: no teardown skip there
    out = tmp_path / "prof.out"
    proc = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "dsdoctor",
                           "rules"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
