"""Issue 24 (hardening, round 3): files never changed, bad numbers and streams as one line and
exit 2, bounded work and memory, logs read in every console encoding, output files that fail
loudly. Each test reproduces the defect with a generated input first; work and memory are
counted (bytes read, peak RSS of a child from /proc), never timed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
       "capacity of 79.15 GiB of which 1.2 GiB is free.")


def dsdoctor(*argv: str, cwd: Path, timeout: float = 120, stdin=subprocess.DEVNULL,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child (generous timeout: a hang fails the test instead of the suite)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "dsdoctor", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, stdin=stdin, env=full)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- your files changed ------------------------------------------------------------------------

def test_watch_log_file_never_appends_to_an_input(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1}')
    (tmp_path / "soft.log").symlink_to(log)
    os.link(log, tmp_path / "hard.log")
    before = digest(log), digest(cfg)
    for target in ("train.log", "soft.log", "hard.log", "ds.json"):
        r = dsdoctor("watch", "train.log", "--plain", "--env", "none", "--config", "ds.json",
                     "--log-file", target, "--exit-on-idle", "1", "--", "echo", "planted",
                     cwd=tmp_path)
        assert r.returncode == 2, (target, r.stderr)
        assert "is one of the input files" in r.stderr and "Traceback" not in r.stderr
    assert (digest(log), digest(cfg)) == before


# --- numbers from the command line ---------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--exit-on-idle", "nan"], ["--exit-on-idle", "inf"], ["--exit-on-idle", "-1"],
    ["--stall-after", "nan"], ["--pid", "9" * 30], ["--pid", "0"], ["--pid", "-5"],
])
def test_watch_absurd_numbers_are_one_line(tmp_path: Path, capsys, argv: list[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["watch", str(log), "--plain", "--env", "none", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[0] in err
