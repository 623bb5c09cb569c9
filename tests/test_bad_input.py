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
    # a folder is a node's logs (logs/logdirs.py): one without a log file is one clear line
    (tmp_path / "ds_config.json").write_text("{}")
    assert_one_line_error(run_cli("analyze", str(tmp_path)), "no log file in it or its sub-folders")


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


# ------------------------------------------------------------------ issue 14: reads and formats
# Real formats: the DeepSpeed logger line above (test_truncated_gzip...) and the torch OOM line of
# ms-swift#5943 (tests/test_reader.py).
STEP = (b"[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] step=1, skipped=0, "
        b"lr=[0.05]\n")
OOM = b"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
LOG = STEP + OOM


def assert_oom_found(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "DS105" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("codec", ["gzip", "bz2", "lzma", "zstd"])
def test_compressed_logs_are_read(tmp_path, codec):
    if codec == "zstd":
        zstandard = pytest.importorskip("zstandard")
        blob = zstandard.ZstdCompressor().compress(LOG)
    else:
        blob = __import__(codec).compress(LOG)
    p = tmp_path / f"train.log.{codec}"
    p.write_bytes(blob)
    assert_oom_found(run_cli("analyze", str(p)))


def test_multi_member_gzip_and_trailing_garbage(tmp_path):
    p = tmp_path / "train.log.gz"
    p.write_bytes(gzip.compress(STEP) + gzip.compress(OOM) + b"\x00garbage after the stream")
    proc = run_cli("analyze", str(p))
    assert_oom_found(proc)
    assert "trailing data after the gzip stream ignored" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                                      "utf-32-be"])
def test_utf16_and_utf32_logs_are_read(tmp_path, encoding):
    # PowerShell's "> file" writes UTF-16LE with a BOM; the -le/-be codecs write no BOM
    p = tmp_path / "train.log"
    p.write_bytes(LOG.decode().encode(encoding))
    assert_oom_found(run_cli("analyze", str(p)))


def test_nul_runs_of_a_crashed_writer_are_skipped(tmp_path):
    p = tmp_path / "train.log"
    p.write_bytes(STEP + b"\x00" * 300_000 + OOM)
    assert_oom_found(run_cli("analyze", str(p)))


def test_random_binary_is_refused(tmp_path):
    import random

    p = tmp_path / "train.log"
    p.write_bytes(random.Random(14).randbytes(100_000))
    assert_one_line_error(run_cli("analyze", str(p)), "does not look like a text log")


def test_non_seekable_logs(tmp_path):
    script = f"{sys.executable} -m dsdoctor analyze <(printf '%s' \"$LOGTEXT\")"
    env = {**__import__("os").environ, "LOGTEXT": LOG.decode()}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env=env)
    assert_oom_found(proc)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "analyze", "/dev/stdin"],
                          input=LOG.decode(), capture_output=True, text=True, timeout=120)
    assert_oom_found(proc)


def test_fifo_without_writer_does_not_hang(tmp_path):
    import os

    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    proc = run_cli("analyze", str(fifo))
    assert proc.returncode == 0, proc.stderr
    assert "empty log" in proc.stdout


@pytest.mark.parametrize("option", ["--config", "--env", "--script", "--model"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_fifo_or_device_as_input_file_is_refused_without_reading(tmp_path, option, kind):
    import os

    log = tmp_path / "t.log"
    log.write_bytes(LOG)
    if kind == "fifo":
        target = str(tmp_path / "in.json")
        os.mkfifo(target)
    else:
        target = "/dev/zero"
    proc = run_cli("analyze", str(log), option, target)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_device_as_log_is_refused():
    assert_one_line_error(run_cli("analyze", "/dev/zero"), "device")


def test_printed_config_reread_is_bounded(tmp_path):
    # DeepSpeed prints the user config as "json = {" (runtime/config.py print); a gzip that
    # inflates to one huge line right after it must not be held in memory whole.
    import resource

    head = (b"[2023-01-15 19:09:55,100] [INFO] [config.py:1000:print] json = {\n"
            b'    "train_batch_size": 8, \n')
    p = tmp_path / "train.log.gz"
    with gzip.open(p, "wb", compresslevel=1) as gz:
        gz.write(head)
        chunk = b"x" * (1 << 20)
        for _ in range(600):  # 600 MiB without a newline
            gz.write(chunk)
        gz.write(b"\n}\n")
    # VmHWM is this process's own peak; ru_maxrss can carry the forking parent's peak across
    # exec on Linux (a big pytest process made this test fail with a 320 MiB 'peak').
    code = ("import resource, sys; from dsdoctor.facts.logfacts import read_json_block; "
            f"read_json_block({str(p)!r}, 1); "
            "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')] "
            "if sys.platform == 'linux' else []; "
            "print(int(hwm[0].split()[1]) if hwm else "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < 300_000, f"peak RSS {int(proc.stdout) // 1024} MiB"
    del resource


# ------------------------------------------------------------------ issue 14, item 7: tracebacks
@pytest.mark.parametrize(("name", "text", "needle"), [
    ("big.json", '{"train_batch_size": ' + "9" * 5000 + "}", "5000 digits"),
    ("big.yaml", "compute_environment: LOCAL_MACHINE\nnum_processes: " + "9" * 5000 + "\n", "int"),
    ("merge.yaml", "base: &b\n  x: 1\ncompute_environment: LOCAL_MACHINE\ndeepspeed_config:\n"
                   "  <<: *b\n  zero_stage: 2\n", "merge keys"),
    ("tagged.yaml", "compute_environment: LOCAL_MACHINE\n!!python/name:os.system x: 1\n", "tag"),
    ("intabc.yaml", "compute_environment: LOCAL_MACHINE\nnum_processes: !!int abc\n", "abc"),
    ("deep.yaml", "a: " + "[" * 20000 + "]" * 20000 + "\n", "nested"),
])
def test_hostile_config_is_one_line(tmp_path, name, text, needle):
    p = tmp_path / name
    p.write_text(text)
    assert_one_line_error(run_cli("analyze", "--config", str(p)), needle)


@pytest.mark.parametrize("option", ["--env", "--model"])
def test_huge_integer_in_json_inputs_is_one_line(tmp_path, option):
    p = tmp_path / "in.json"
    p.write_text('{"hidden_size": ' + "9" * 5000 + "}")
    log = tmp_path / "t.log"
    log.write_bytes(LOG)
    assert_one_line_error(run_cli("analyze", str(log), option, str(p)))


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_lone_surrogates_in_a_config_are_written(tmp_path, fmt):
    import json

    p = tmp_path / "ds.json"
    p.write_text('{"train_batch_size": 8, "optimizer": {"type": "Adam\\ud800"}, "x\\udc00": 1}')
    proc = run_cli("analyze", "--config", str(p), "--format", fmt)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    if fmt == "json":
        json.loads(proc.stdout)


def test_stdout_on_a_full_device_is_one_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(LOG * 200)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", "analyze", str(log)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_closed_stdout_is_one_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(LOG)
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m dsdoctor analyze {log} >&-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_non_utf8_stdout(tmp_path, encoding):
    import os

    log = tmp_path / "t.log"
    log.write_bytes(LOG + "Ошибка: 损失 nan ✓\n".encode())
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "analyze", str(log)],
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": encoding})
    assert proc.returncode == 1, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert b"DS105" in proc.stdout


@pytest.mark.parametrize("sizes", [
    '"hidden_size": 0, "num_hidden_layers": 32, "vocab_size": 32000',
    '"hidden_size": 99999999999999999999999999999, "num_hidden_layers": 99999999999999, '
    '"vocab_size": 32000',
])
def test_estimate_on_absurd_or_zero_sizes_is_one_line(tmp_path, sizes):
    # the keys of a Llama config.json (transformers LlamaConfig), sizes made absurd
    p = tmp_path / "config.json"
    p.write_text("{" + sizes + ', "num_attention_heads": 32, "num_key_value_heads": 8, '
                 '"intermediate_size": 11008, "model_type": "llama"}')
    assert_one_line_error(run_cli("estimate", "--model", str(p)), "parameters")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_rules_meeting_nan_or_infinity_do_not_crash(tmp_path, value):
    p = tmp_path / "ds.json"
    p.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": '
                 + value + ', "offload_optimizer": {"device": "cpu"}}, "fp16": {"enabled": true}}')
    proc = run_cli("analyze", "--config", str(p))
    assert proc.returncode in (0, 1), proc.stderr
    assert "could not run" not in proc.stdout


# ------------------------------------------------------------------ issue 14, item 9: output
def test_output_never_overwrites_an_input(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(LOG)
    assert_one_line_error(run_cli("analyze", str(log), "-o", str(log)), "input")
    assert_one_line_error(run_cli("analyze", str(log), "-o", str(log), "--force"), "input")
    assert log.read_bytes() == LOG
    assert_one_line_error(run_cli("report", str(log), "-o", str(log), "--force"), "input")
    assert log.read_bytes() == LOG


def test_output_replaces_an_existing_file_as_grep_and_ruff_do(tmp_path):
    """Issue 23: ``-o FILE`` replaces FILE (grep, ruff, curl), never an input or a link to one."""
    log = tmp_path / "t.log"
    log.write_bytes(LOG)
    out = tmp_path / "out.txt"
    out.write_text("replace me")
    assert run_cli("analyze", str(log), "-o", str(out)).returncode == 1
    assert "DS105" in out.read_text() and "replace me" not in out.read_text()
    assert run_cli("env", "--no-ops", "--timeout", "5", "-o", str(out)).returncode == 0
    assert "DS105" not in out.read_text()
    link = tmp_path / "link.txt"
    link.symlink_to(log)
    assert_one_line_error(run_cli("analyze", str(log), "-o", str(link)), "input")
    assert log.read_bytes() == LOG


# Terminal controls a hostile log may carry: full reset, charset switch, OSC title, 8-bit CSI
# and OSC (C1), bell, a lone ESC.
HOSTILE = ("torch.cuda.OutOfMemoryError: CUDA out of memory.\x1bc\x1b(0\x1b]0;pwned\x07"
           "\u009b2J\u009d0;x\u009c\x07 Tried to allocate 2.00 GiB\x1b\n").encode()


def _raw_controls(text: str) -> list[str]:
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # our own colours
    return re.findall(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_control_sequences_never_reach_the_output(tmp_path, fmt):
    log = tmp_path / "t\x1b]0;title\x07\u009b.log"
    log.write_bytes(STEP + HOSTILE)
    proc = run_cli("analyze", str(log), "--format", fmt, "--color", "always")
    assert proc.returncode == 1, proc.stderr
    assert "DS105" in proc.stdout
    assert not _raw_controls(proc.stdout), _raw_controls(proc.stdout)


def test_control_sequences_never_reach_report_or_watch(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(STEP + HOSTILE)
    proc = run_cli("report", str(log), "--force")  # --force: written although DS105 explains it
    assert proc.returncode == 0, proc.stderr
    assert not _raw_controls(proc.stdout) and not _raw_controls(proc.stderr)
    proc = run_cli("watch", str(log), "--plain", "--exit-on-idle", "0.5")
    assert "gpu-oom" in proc.stdout, proc.stdout + proc.stderr
    assert not _raw_controls(proc.stdout)


def test_file_name_with_a_newline_keeps_one_line_output(tmp_path):
    log = tmp_path / "evil\nerror: DS999 fake.log"
    log.write_bytes(STEP + OOM)
    proc = run_cli("watch", str(log), "--plain", "--exit-on-idle", "0.5")
    lines = proc.stdout.splitlines()
    assert lines and all(": " in ln for ln in lines)
    assert not any(ln.startswith("error: DS999") for ln in lines), lines
    missing = tmp_path / "nope\nsecond line.log"
    assert_one_line_error(run_cli("analyze", str(missing)), "no such file")


def test_report_on_a_fifo_without_writer_does_not_hang(tmp_path):
    import os

    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    proc = run_cli("report", str(fifo))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("codec", ["bz2", "lzma", "zstd"])
def test_cut_or_padded_compressed_logs_are_read_with_a_note(tmp_path, codec):
    if codec == "zstd":
        zstandard = pytest.importorskip("zstandard")
        compress = zstandard.ZstdCompressor().compress
    else:
        compress = __import__(codec).compress
    p = tmp_path / "train.log.z"
    p.write_bytes(compress(LOG * 3000) + b"garbage after the stream")
    proc = run_cli("analyze", str(p))
    assert_oom_found(proc)
    assert "trailing data after the" in " ".join(proc.stdout.split())
