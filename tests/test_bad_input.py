"""Bad input: one clear line on stderr and exit 2, or a clean result; never a traceback."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys

import pytest

from dsdoctor.cli.main import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsdoctor", *args], capture_output=True,
                          text=True, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("analyze", str(tmp_path / "nope.log")), "nope.log",
                          "no such file")


def test_directory(tmp_path):
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "is a directory")


def test_pickle_is_refused_and_never_loaded(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    p = tmp_path / "model.pkl"
    p.write_bytes(pickle.dumps(Evil(), protocol=4))
    assert_one_line_error(run_cli("analyze", str(p)), "pickle")
    assert not marker.exists()


def test_binary_garbage(tmp_path):
    p = tmp_path / "garbage.log"
    p.write_bytes(bytes(range(0, 9)) * 20000)
    assert_one_line_error(run_cli("analyze", str(p)), "does not look like a text log")


def test_torch_checkpoint_zip(tmp_path):
    p = tmp_path / "pytorch_model.bin"
    p.write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    assert_one_line_error(run_cli("analyze", str(p)), "zip")


def test_empty_file_is_a_clean_result(tmp_path, capsys):
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    assert main(["analyze", str(p), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert '"symptoms": []' in out
    assert "empty log" in out


def test_truncated_gzip_is_a_clean_partial_result(tmp_path):
    data = b"".join(b"[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] "
                    b"step=%d, skipped=0, lr=[0.05]\n" % i for i in range(20000))
    blob = gzip.compress(data)
    p = tmp_path / "train.log.gz"
    p.write_bytes(blob[: len(blob) // 3])
    proc = run_cli("analyze", str(p))
    assert proc.returncode == 0, proc.stderr
    assert "truncated gzip" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_corrupt_gzip_header(tmp_path):
    p = tmp_path / "bad.log.gz"
    p.write_bytes(b"\x1f\x8b" + b"\xff" * 50)
    proc = run_cli("analyze", str(p))
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2)


def test_nothing_to_analyze():
    assert_one_line_error(run_cli("analyze"), "nothing to analyze")


def test_unknown_option():
    proc = run_cli("analyze", "--frobnicate")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_unwritable_output(tmp_path):
    p = tmp_path / "t.log"
    p.write_text("hello\n")
    assert_one_line_error(run_cli("analyze", str(p), "--output", str(tmp_path / "no" / "x")),
                          "cannot write")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_nul_and_invalid_utf8_log_renders(tmp_path, fmt):
    p = tmp_path / "t.log"
    p.write_bytes(b"\x00\x00ok line\n\xff\xfe\xfd broken utf8\n\x1b[31mred\x1b[0m\n")
    proc = run_cli("analyze", str(p), "--format", fmt)
    assert proc.returncode == 0, proc.stderr


def test_analyze_never_prints_a_secret_from_the_log(tmp_path):
    # the DeepSpeed launcher prints the full command line (DeepSpeed#3232 format), tokens included
    token = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
    line = ("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
            f"'-u', 'main.py', '--local_rank=0', '--hub_token', '{token}'] exits with return code = -9\n")
    p = tmp_path / "t.log"
    p.write_text(line)
    for fmt in ("text", "json", "markdown"):
        proc = run_cli("analyze", str(p), "--format", fmt)
        assert proc.returncode in (0, 1), proc.stderr
        assert "return code" in proc.stdout or "cpu-oom" in proc.stdout
        assert token not in proc.stdout
