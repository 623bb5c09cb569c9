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


# --- tracebacks ----------------------------------------------------------------------------------

LLAMA = ('{{"model_type": "llama", "hidden_size": {h}, "vocab_size": {v}, "num_hidden_layers": '
         '{n}, "num_attention_heads": 32, "intermediate_size": 11008}}')


@pytest.mark.parametrize("h,v,n,said", [
    ("1" + "0" * 400, "32000", "32", "hidden_size is a 401-digit number"),
    ("4096", "1" + "0" * 400, "32", "vocab_size is a 401-digit number"),
    ("4096", "32000", "1e300", "num_hidden_layers is missing or not a whole number"),
])
def test_estimate_absurd_model_sizes_are_one_line(tmp_path: Path, capsys, h, v, n, said) -> None:
    model = tmp_path / "config.json"
    model.write_text(LLAMA.format(h=h, v=v, n=n))
    assert main(["estimate", "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
    # analyze takes the same config without a traceback or a note that a rule broke
    assert main(["analyze", "--model", str(model), "--format", "json"]) in (0, 1)
    out = capsys.readouterr().out
    assert "could not run" not in out and "Infinity" not in out and "NaN" not in out


def test_config_numbers_past_floats_range_break_no_rule(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "ds.json"
    huge = "1" + "0" * 400
    cfg.write_text(f'{{"train_micro_batch_size_per_gpu": {huge}, "zero_optimization": {{"stage": '
                   f'3, "reduce_bucket_size": 1e400, "stage3_prefetch_bucket_size": {huge}}}}}')
    model = tmp_path / "config.json"
    model.write_text(LLAMA.format(h=4096, v=32000, n=32))
    assert main(["analyze", "--config", str(cfg), "--model", str(model)]) in (0, 1)
    out = capsys.readouterr().out
    assert "could not run" not in out and "infx" not in out and "Traceback" not in out


@pytest.mark.parametrize("what", ["string", "duplicates"])
def test_report_on_a_huge_one_line_config(tmp_path: Path, capsys, what: str) -> None:
    cfg = tmp_path / "ds.json"
    if what == "string":  # one 10 MB line: the redactor recursed on it without end
        cfg.write_text('{"train_batch_size": 8, "x": "' + "a" * 10_000_000 + '"}')
    else:  # 10^5 duplicate keys: one finding (and one rendered paragraph) each before
        cfg.write_text("{" + ",".join(f'"train_batch_size": {i}' for i in range(100_000)) + "}")
    out = tmp_path / "issue.md"
    assert main(["report", "--config", str(cfg), "-o", str(out), "--force"]) == 0
    body = out.read_text()
    assert len(body) < 65_536 and "attach the file for the rest" in body
    assert main(["analyze", "--config", str(cfg), "--format", "json"]) in (0, 1)
    import json

    findings = json.loads(capsys.readouterr().out)["findings"]
    assert len(findings) <= 60
    if what == "duplicates":
        assert any("99,949 more keys are written more than once" in f["message"]
                   for f in findings)


def test_a_deeply_nested_world_info_is_no_launch_fact(tmp_path: Path, capsys) -> None:
    import base64

    deep = '{"a":' * 3000 + "1" + "}" * 3000
    blob = base64.urlsafe_b64encode(deep.encode()).decode()
    log = tmp_path / "train.log"
    log.write_text("[2024-01-01 00:00:00,000] [INFO] [runner.py:568:main] cmd = /usr/bin/python3 "
                   f"-u -m deepspeed.launcher.launch --world_info={blob} --master_addr=127.0.0.1 "
                   "--master_port=29500 train.py\n" + OOM + "\n")
    assert main(["analyze", str(log)]) == 1
    assert main(["report", str(log), "-o", str(tmp_path / "r.md"), "--force"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_standard_input_closed_or_given_twice(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", "import os, runpy, sys; os.close(0); sys.stdin = None;"
                        "sys.argv = ['dsdoctor', 'analyze', '-']; runpy.run_module('dsdoctor', "
                        "run_name='__main__')"], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 2 and "standard input ('-') is closed" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "dsdoctor", "analyze", "-", "-", "--format", "json"],
        input=OOM + "\n", capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and '"gpu-oom"' in r.stdout and "read once" in r.stderr


# --- env: tools from absolute PATH entries only, child output bounded ---------------------------

def _peak_kib_of_env(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    """``dsdoctor env`` in a fresh child; its peak resident memory from /proc (VmHWM), and what
    it printed. A child of its own: ru_maxrss would carry the forking parent's peak."""
    code = ("import sys; from dsdoctor.cli.main import main; code = main(['env', '--no-ops', "
            "'--format', 'json', '-o', 'snap.json']);\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1];"
            "print('HWM', hwm)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=300)
    assert r.returncode == 0, r.stderr
    peak = int(r.stdout.split("HWM")[1].split()[0])
    return peak, (tmp_path / "snap.json").read_text()


@pytest.mark.parametrize("path_of", [lambda d: f".{os.pathsep}{os.environ['PATH']}",
                                     lambda d: f"{os.pathsep}{os.environ['PATH']}",
                                     lambda d: f"{os.environ['PATH']}{os.pathsep}"])
def test_env_never_runs_an_nvcc_from_the_working_directory(tmp_path: Path, path_of) -> None:
    ran = tmp_path / "ran"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho planted > {ran}\necho 'Cuda compilation tools, release 99.9'\n")
    nvcc.chmod(0o755)
    _, snap = _peak_kib_of_env(tmp_path, {"PATH": path_of(tmp_path), "CUDA_HOME": "relative"})
    assert not ran.exists() and "99.9" not in snap


def test_env_reads_a_flooding_nvcc_and_interpreter_with_a_bound(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    flood = "#!/bin/sh\nyes 0123456789abcdef | head -c 1500000000\necho 'release 12.4'\n"
    (tools / "nvcc").write_text(flood)
    (tools / "nvcc").chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(flood)
    (venv / "bin" / "python").chmod(0o755)
    peak, snap = _peak_kib_of_env(tmp_path, {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
                                             "VIRTUAL_ENV": str(venv)})
    # 1.5 GB of output each: before, all of it was held (GiBs); now 1 MiB of each at most
    assert peak < 400 * 1024, peak
    assert "more than 1,048,576 bytes" in snap


def test_a_probe_printing_a_json_number_after_its_marker_is_a_probe_error(tmp_path: Path) -> None:
    from dsdoctor.facts import env_child

    proc = subprocess.Popen([sys.executable, "-c", "print('@@DSDOCTOR@@42')"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with pytest.raises(RuntimeError, match="no JSON object"):
        env_child.finish_probe(proc, "torch", timeout=60)


# --- hangs: work bounded ---------------------------------------------------------------------------

def test_many_small_logs_share_one_scan_buffer(tmp_path: Path, monkeypatch, capsys) -> None:
    """100,000 log arguments: each allocated (and zero-filled) an 8 MiB buffer of its own."""
    from dsdoctor.logs import scan

    big = []

    class CountingBytearray(bytearray):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            if len(self) >= scan.CHUNK_BYTES:
                big.append(len(self))

    monkeypatch.setattr(scan, "bytearray", CountingBytearray, raising=False)
    logs = []
    for i in range(300):
        p = tmp_path / f"rank{i}.log"
        p.write_text(OOM + "\n" if i == 7 else "step\n")
        logs.append(str(p))
    assert main(["analyze", *logs, "--format", "json"]) == 1
    assert '"gpu-oom"' in capsys.readouterr().out
    assert len(big) <= 1, big


# gzip is not among them: deflate cannot pass about 1032:1, so only the absolute bound holds it
@pytest.mark.parametrize("kind", ["bz2", "xz", "zst"])
def test_a_decompression_bomb_stops_at_its_bound_with_a_note(tmp_path: Path, monkeypatch,
                                                             capsys, kind: str) -> None:
    import bz2
    import lzma

    from dsdoctor.logs import streams

    zstandard = pytest.importorskip("zstandard") if kind == "zst" else None

    monkeypatch.setattr(streams, "DECOMPRESSED_FREE_BYTES", 4 << 20)
    line = b"[2024-01-01 00:00:00,000] [INFO] step 1 loss 2.0\n"
    block = line * ((1 << 20) // len(line))
    compress = {"bz2": bz2.compress, "xz": lzma.compress,
                "zst": zstandard and zstandard.ZstdCompressor().compress}[kind]
    member = compress(block * 16)  # 16 MiB of one line: thousands to one
    bomb = tmp_path / f"train.log.{kind}"
    bomb.write_bytes(member * 64 + compress(OOM.encode() + b"\n"))  # 1 GiB, the OOM last
    produced = []
    real_readinto = streams.Decompressed.readinto

    def counted(self, b):
        n = real_readinto(self, b)
        produced.append(n)
        return n

    monkeypatch.setattr(streams.Decompressed, "readinto", counted)
    assert main(["analyze", str(bomb), "--format", "json"]) in (0, 1)
    out = capsys.readouterr().out
    assert "a decompression bomb?" in out and "analyzed the first" in out
    # the bound: the free 4 MiB, then 1000:1 to the 64 KiB pieces read (and one piece more)
    assert sum(produced) <= (4 << 20) + 1000 * (64 << 10) * 2 + (1 << 20), sum(produced)


def test_an_honest_compressed_log_is_read_whole(tmp_path: Path, monkeypatch, capsys) -> None:
    import gzip
    import random

    from dsdoctor.logs import streams

    monkeypatch.setattr(streams, "DECOMPRESSED_FREE_BYTES", 1 << 20)
    rng = random.Random(5)
    text = "".join(f"[2024-01-01 00:00:{i % 60:02d},{rng.randrange(1000):03d}] step {i} loss "
                   f"{rng.random():.6f} lr {rng.random():.3e}\n" for i in range(100_000)) + OOM
    log = tmp_path / "train.log.gz"
    log.write_bytes(gzip.compress(text.encode()))
    assert main(["analyze", str(log), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert "decompression bomb" not in out and '"gpu-oom"' in out


# --- memory: peak resident memory of a child, from /proc ---------------------------------------

def _peak_kib_of_analyze(tmp_path: Path, script: Path) -> tuple[int, int, str]:
    code = ("import sys; from dsdoctor.cli.main import main\n"
            f"code = main(['analyze', '--script', {str(script)!r}, '--format', 'json', '-o', "
            "'out.json', '--force'])\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print('HWM', hwm, code)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    _, peak, rc = r.stdout.split()
    return int(peak), int(rc), r.stderr


@pytest.mark.parametrize("shape", ["one-expression", "unbalanced"])
def test_a_script_too_big_to_parse_is_one_line_in_bounded_memory(tmp_path: Path,
                                                                 shape: str) -> None:
    script = tmp_path / "train.py"
    if shape == "one-expression":  # 7 MiB: 2.96 GiB peak before
        script.write_text("x = [" + "1, " * (7 * 2**20 // 3) + "]\n")
    else:  # 2 MiB, never closed: 1.82 GiB before the SyntaxError
        script.write_text("import torch\nx = [" + "1," * 2**20 + "\n")
    peak, rc, err = _peak_kib_of_analyze(tmp_path, script)
    assert rc == 2 and "tokens at once to bound its memory" in err and err.count("\n") == 1
    assert peak < 300 * 1024, peak


def test_a_big_script_of_many_statements_is_still_read(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    body = "".join(f"def f{i}(a, b):\n    return a @ b + {i}\n\n" for i in range(60_000))
    script.write_text("import deepspeed\n" + body + "engine, opt, _, _ = deepspeed.initialize("
                      "model=m, config='ds.json')\n")
    peak, rc, err = _peak_kib_of_analyze(tmp_path, script)
    assert rc in (0, 1), err
    assert peak < 400 * 1024, peak
    from dsdoctor.facts.scriptcheck import check_script

    assert check_script(script).ds_initialize  # the facts past the first pieces are seen


# --- wrong answers -------------------------------------------------------------------------------

def _oom_found(capsys, path: Path) -> dict:
    import json

    assert main(["analyze", str(path), "--format", "json"]) == 1, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert "gpu-oom" in {s["kind"] for s in report["symptoms"]}, report["symptoms"]
    return report


@pytest.mark.parametrize("encoding,chatter", [
    ("gbk", "训练开始，正在加载模型……第 {i} 步，损失 2.31"),
    ("shift_jis", "トレーニングを開始します。ステップ {i}、損失 2.31"),
])
def test_chinese_and_japanese_console_logs_are_read(tmp_path: Path, capsys, encoding: str,
                                                    chatter: str) -> None:
    log = tmp_path / "train.log"
    lines = [chatter.format(i=i) for i in range(200)] + [OOM, chatter.format(i=999)]
    log.write_bytes("\n".join(lines).encode(encoding) + b"\n")
    report = _oom_found(capsys, log)
    assert any("text, read as such" in n for n in report["notes"])


def test_a_latin1_byte_in_a_utf8_log_is_no_legacy_encoding() -> None:
    from dsdoctor.logs.streams import legacy_encoding_of

    assert legacy_encoding_of(b"step 1 loss 2.0 caf\xe9 au lait\n" * 50) is None
    assert legacy_encoding_of("训练".encode() * 100) is None  # UTF-8


@pytest.mark.parametrize("damage", ["ansi-chars", "ansi-words", "nul-in-word", "nul-in-literal"])
def test_an_oom_is_found_through_ansi_codes_and_nuls(tmp_path: Path, capsys, damage: str) -> None:
    if damage == "ansi-chars":
        line = "".join(f"\x1b[1m{c}\x1b[0m" for c in OOM)
    elif damage == "ansi-words":
        line = " ".join(f"\x1b[31m{w}\x1b[0m" for w in OOM.split(" "))
    elif damage == "nul-in-word":
        line = OOM.replace("memory", "mem\x00ory")
    else:
        line = OOM.replace("CUDA", "CU\x00DA")
    log = tmp_path / "train.log"
    log.write_text("step 1\n" * 10 + line + "\n" + "step 2\n")
    report = _oom_found(capsys, log)
    oom = next(s for s in report["symptoms"] if s["kind"] == "gpu-oom")
    assert oom["evidence"][0]["line"] == 11


def test_hidden_candidates_search_each_mark_once_per_chunk() -> None:
    """A log coloured on every line: the search for an absent NUL ran to the end of the chunk
    once per line (quadratic); count the bytes the searches walk."""
    from dsdoctor.logs import hidden

    class Buf(bytes):
        walked = 0

        def find(self, sub, start=0, end=None):  # type: ignore[override]
            at = super().find(sub, start, end)
            Buf.walked += (at if at >= 0 else (end if end is not None else len(self))) - start
            return at

    class NoEngine:
        def candidates(self, data, limit):
            return []

    data = Buf(b"\x1b[32m[INFO]\x1b[0m step 1 loss 2.0\n" * 20_000)
    hidden.hidden_candidates(NoEngine(), data, len(data), [])
    assert Buf.walked <= 3 * len(data), Buf.walked


@pytest.mark.parametrize("where", ["first", "between", "last"])
def test_zstd_skippable_frames_are_skipped(tmp_path: Path, capsys, where: str) -> None:
    import struct

    zstandard = pytest.importorskip("zstandard")
    c = zstandard.ZstdCompressor()
    skip = struct.pack("<II", 0x184D2A50, 16) + b"\x00" * 16
    parts = [c.compress(b"step 1\n"), c.compress(OOM.encode() + b"\n")]
    at = {"first": 0, "between": 1, "last": 2}[where]
    parts.insert(at, skip)
    log = tmp_path / "train.log.zst"
    log.write_bytes(b"".join(parts))
    report = _oom_found(capsys, log)
    assert not report["notes"]


def test_a_fifo_whose_writer_comes_late_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-m", "dsdoctor", "analyze", str(fifo), "--format",
                               "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    # the writer opens the FIFO only once the reader is waiting on it (its note says so)
    assert reader.stderr is not None
    assert "no writer yet" in reader.stderr.readline()
    with open(fifo, "w") as w:
        w.write("step 1\n")
        w.flush()
        w.write(OOM + "\n")
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 1 and '"gpu-oom"' in out


# --- output files --------------------------------------------------------------------------------

def test_output_files_are_never_a_device_a_directory_a_link_or_an_input(tmp_path: Path,
                                                                      capsys) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    link = tmp_path / "out.md"
    link.symlink_to(victim)
    loglink = tmp_path / "log.md"
    loglink.symlink_to(log)
    for target, said in (("/dev/full", "not a regular file"), (str(tmp_path), "is a directory"),
                         (str(loglink), "is one of the input files")):
        assert main(["analyze", str(log), "-o", target, "--force"]) == 2
        assert said in capsys.readouterr().err
    assert main(["analyze", str(log), "-o", str(link), "--force"]) == 1
    assert victim.read_text() == "keep\n" and not link.is_symlink()  # replaced, not written through
    assert "gpu-oom" in link.read_text() and log.read_text() == OOM + "\n"


@pytest.mark.parametrize("umask,want", [(0o000, 0o644), (0o077, 0o600), (0o027, 0o640)])
def test_output_mode_follows_the_umask_but_is_never_group_or_other_writable(
        tmp_path: Path, umask: int, want: int) -> None:
    import stat

    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    code = (f"import os; os.umask({umask}); from dsdoctor.cli.main import main; "
            f"raise SystemExit(main(['analyze', 'train.log', '-o', 'out.md']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 1, r.stderr
    assert stat.S_IMODE((tmp_path / "out.md").stat().st_mode) == want


def test_a_full_disk_is_an_error_and_leaves_the_old_file_whole(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM + "\n")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "dsdoctor", "analyze", str(log)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "No space left on device" in r.stderr


# A child that counts, per log named on the command line, the opens (audit events, whatever
# opens it: open(), os.open, fdopen) and the stat/fstat calls of one analyze.
_COUNT_SYSCALLS = r"""
import collections, os, sys
logs = set(sys.argv[1:])
opens = collections.Counter()
stats = collections.Counter()
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0] in logs:
        opens[args[0]] += 1
sys.addaudithook(hook)
real_stat, real_fstat = os.stat, os.fstat
def counted_stat(path, *a, **k):
    if isinstance(path, str) and path in logs:
        stats["stat"] += 1
    return real_stat(path, *a, **k)
def counted_fstat(fd):
    stats["fstat"] += 1
    return real_fstat(fd)
os.stat, os.fstat = counted_stat, counted_fstat
from dsdoctor.cli.main import main
try:
    main(["analyze", *sys.argv[1:], "--format", "json", "-o",
          os.path.join(os.path.dirname(sys.argv[1]), "out.json")])
except SystemExit:
    pass
print(max(opens.values()), sum(opens.values()), stats["stat"], stats["fstat"])
"""


def test_each_log_argument_is_opened_twice_and_stat_bounded(tmp_path: Path) -> None:
    """100,000 log arguments cost about 0.6 ms each: every log was stat'ed for a folder, stat'ed
    again and opened through a buffered file (fstat, ioctl, lseek, two reads) for a Flight
    Recorder dump, stat'ed again by the reader for a folder. Counted per log: two opens (the
    dump check's and the scan's), three stats (folder, -o against the inputs, the run's age)."""
    n = 200
    logs = []
    for i in range(n):
        p = tmp_path / f"rank{i}.log"
        p.write_text(OOM + "\n" if i == 7 else "hello world\n")
        logs.append(str(p))
    r = subprocess.run([sys.executable, "-c", _COUNT_SYSCALLS, *logs], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    most, opens, stats, fstats = map(int, r.stdout.split())
    assert most == 2 and opens == 2 * n, r.stdout
    assert stats <= 3 * n, r.stdout  # was 4 per log
    assert fstats <= 2 * n + 50, r.stdout  # the dump check's and the reader's


def test_distinct_oom_values_cost_one_segment_and_one_size_parse_each(tmp_path: Path,
                                                                        monkeypatch) -> None:
    """10^6 OOM lines, each with its own size, took about 0.3 ms each: each of the line's seven
    candidate patterns looked its segment up again, and every size ("79.15 GiB", the same on
    every line) was parsed by a regex again. Counted: one segment look-up per line, one size
    parse per distinct size; the symptom still counts every line and keeps a bounded handful."""
    from dsdoctor.logs import aggregate, scan
    from dsdoctor.logs import formats as fmt

    n = 3000
    log = tmp_path / "oom.log"
    log.write_text("".join(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {i + 1} MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.2 GiB is free.\n" for i in range(n)))
    segments = []
    real_segment_at = scan._segment_at

    def counted_segment_at(*a, **k):
        segments.append(1)
        return real_segment_at(*a, **k)

    parses = []

    class CountedSizeRe:
        def match(self, text: str):
            parses.append(text)
            return real_size_re.match(text)

    real_size_re = fmt._SIZE_RE
    monkeypatch.setattr(scan, "_segment_at", counted_segment_at)
    monkeypatch.setattr(fmt, "_SIZE_RE", CountedSizeRe())
    fmt._bytes_value.cache_clear()  # sizes parsed by earlier tests
    result = scan.scan_files([str(log)])
    oom = next(s for s in result.symptoms.values() if s.kind == "gpu-oom")
    assert oom.count == n and len(oom.evidence) <= aggregate.MAX_EVIDENCE
    assert oom.values["tried_bytes"]["max"] == n * 1024 ** 2
    assert len(segments) <= n + 10, len(segments)  # was 9 per line
    assert len(parses) <= n + 10, len(parses)  # was 3 per line: total and free repeat


def test_lines_differing_only_in_numbers_run_each_regex_once_per_shape(tmp_path: Path,
                                                                       monkeypatch) -> None:
    """10^6 OOM lines, each with its own size, ran about seven precise regexes on every line
    (two of them refusing it, about 5 us each). A regex that tells no digit from another
    (formats/digits.py) runs once per line shape (digits masked); each line's values are read
    at the spans found. Counted: regex searches per log, not per line; every count and value
    stays exact."""
    from collections import Counter

    from dsdoctor.logs import scan
    from dsdoctor.logs.formats import Pattern

    n = 3000
    log = tmp_path / "oom.log"
    log.write_text("".join(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {i + 1} MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.2 GiB is free.\n" for i in range(n)))
    searches: Counter[str] = Counter()
    compiled = Pattern.regex.fget

    class CountedRegex:
        def __init__(self, pattern_id: str, regex) -> None:
            self.pattern_id, self.regex = pattern_id, regex

        def search(self, text: str):
            searches[self.pattern_id] += 1
            return self.regex.search(text)

        def __getattr__(self, name: str):
            return getattr(self.regex, name)

    monkeypatch.setattr(Pattern, "regex", property(lambda p: CountedRegex(p.id, compiled(p))))
    result = scan.scan_files([str(log)], jobs=1)
    kinds = {s.kind: s for s in result.symptoms.values()}
    assert {k: kinds[k].count for k in ("gpu-oom", "python-exception", "error-line")} == {
        "gpu-oom": n, "python-exception": n, "error-line": n}
    oom = kinds["gpu-oom"].values
    assert oom["tried_bytes"]["min"] == 1024 ** 2 and oom["tried_bytes"]["max"] == n * 1024 ** 2
    assert oom["tried_bytes"]["last"] == n * 1024 ** 2 and oom["tried_bytes"]["count"] == n
    assert {"error-exception-bare", "error-line-prefix", "torch-cuda-oom"} <= set(searches)
    # sizes of 1 to 4 digits: 4 shapes, each regex once per shape (was once per line: 21,000)
    assert max(searches.values()) == 4 and sum(searches.values()) <= 40, searches


def _with_other_digits(text: str) -> str:
    return text.translate(str.maketrans("0123456789", "7894561230"))


def test_digit_blind_patterns_read_the_same_values_at_a_sibling_lines_spans() -> None:
    """The shape cache's premise, on every real sample: a digit-blind pattern matches a line
    with other digits in the same places alike, and the values read at those spans are the
    ones its own match gives."""
    from dsdoctor.logs.formats import load_patterns

    checked = 0
    for pat in load_patterns():
        if not pat.digit_blind:
            continue
        for sample in pat.samples:
            line = sample["line"]
            for other in (_with_other_digits(line), line.translate(str.maketrans(
                    "123456789", "000000000"))):
                spans = pat.spans(other)
                assert (spans is None) == (pat.match(line) is None), (pat.id, line)
                if spans is not None:
                    assert pat.values_at(line, pat.plan(spans)) == pat.match(line), (pat.id, line)
                    checked += 1
    assert checked > 200


@pytest.mark.parametrize(("regex", "blind"), [
    (r"Tried to allocate (?P<n>\d+(?:\.\d+)?) [KMG]iB", True),
    (r"[\w.]+Error: (?P<m>.*\S)", True),
    (r"exit status [1-9]", False),  # 0 is refused, 1 is not
    (r"rank 0\b", False),
    (r"[^0-5]x", False),
    (r"(\d)\1", False),  # a back-reference compares the digits themselves
    (r"(?<!\d)[0-9a-f]{8}(?=\s)", True),
])
def test_digit_blindness_is_decided_from_the_regex(regex: str, blind: bool) -> None:
    from dsdoctor.logs.formats.digits import is_digit_blind

    assert is_digit_blind(regex) is blind


def test_more_shapes_than_kept_give_the_same_findings(tmp_path: Path, monkeypatch) -> None:
    """Past MAX_SHAPES the oldest half of the shapes goes: their lines are matched afresh, with
    the same counts and values as with every shape kept."""
    from dsdoctor.logs import scan

    log = tmp_path / "oom.log"
    log.write_text("".join(  # 1 to 5 digits in two places: 25 shapes
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {10 ** (i % 5) + i} MiB. "
        f"GPU {10 ** (i // 5 % 5)} has a total capacity of 79.15 GiB of which 1.2 GiB is free.\n"
        for i in range(500)))

    def summary() -> dict:
        result = scan.scan_files([str(log)], jobs=1)
        return {s.kind: (s.count, s.values) for s in result.symptoms.values()}

    every = summary()
    monkeypatch.setattr(scan, "MAX_SHAPES", 4)
    assert summary() == every
    assert every["gpu-oom"][0] == 500
