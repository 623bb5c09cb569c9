"""dsdoctor env: the snapshot, its probes' isolation, its renderers and load_snapshot()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dsdoctor.cli.main import main
from dsdoctor.errors import UsageError
from dsdoctor.facts import env_child, envinfo
from dsdoctor.redact import REDACTED
from dsdoctor.render.env import gpu_summary, render_markdown

REPO = Path(__file__).resolve().parents[1]


class FakeNVML:
    """Stand-in for pynvml with the same call names and return shapes (bytes or str names)."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices: list[tuple[bytes | str, int, tuple[int, int]]], fail_init: bool = False):
        self.devices = devices
        self.fail_init = fail_init
        self.shutdown_called = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes | str:
        return self.devices[h][0]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.devices[h][1], free=0, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self.devices[h][2]


def test_snapshot_has_the_keys_analyze_reads() -> None:
    snap = envinfo.collect(ops=False)
    assert snap["schema_version"] == 1
    assert isinstance(snap["cpu"]["count"], int) and snap["cpu"]["count"] >= 1
    assert snap["cpu"]["ram_total_bytes"] >= snap["cpu"]["ram_available_bytes"] > 0
    assert isinstance(snap["gpus"], list)
    for name in ("torch", "deepspeed", "transformers", "accelerate", "peft", "trl", "bitsandbytes",
                 "flash-attn", "apex", "nvidia-ml-py"):
        assert name in snap["packages"]
    assert snap["packages"]["nvidia-ml-py"]  # installed as a dsdoctor dependency
    assert set(snap) >= {"python", "os", "cuda", "deepspeed_ops", "env_vars", "errors", "notes"}
    json.dumps(snap)  # serializable as is
    assert envinfo.validate_snapshot(snap) is snap


def test_no_gpu_is_a_value_and_a_note_not_a_crash() -> None:
    notes: list[str] = []
    gpus, info = envinfo.probe_gpus(notes, FakeNVML([], fail_init=True))
    assert gpus == [] and info["available"] is False
    assert any("Driver Not Loaded" in n for n in notes)


def test_gpus_through_nvml() -> None:
    notes: list[str] = []
    nv = FakeNVML([(b"NVIDIA A100-SXM4-80GB", 85899345920, (8, 0)),
                   ("Tesla V100-SXM2-32GB", 34359738368, (7, 0))])
    gpus, info = envinfo.probe_gpus(notes, nv)
    assert nv.shutdown_called
    assert info == {"available": True, "driver": "535.104.05", "cuda_driver_version": "12.2"}
    assert gpus[0] == {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "driver": "535.104.05",
                       "memory_total_bytes": 85899345920, "compute_capability": "8.0",
                       "bf16_supported": True}
    assert gpus[1]["bf16_supported"] is False and gpus[1]["compute_capability"] == "7.0"
    summary = gpu_summary({"gpus": gpus + [dict(gpus[0], index=2)]})
    assert summary.startswith("2 x NVIDIA A100-SXM4-80GB (80.0 GiB, cc 8.0, bf16 yes)")
    assert "1 x Tesla V100-SXM2-32GB (32.0 GiB, cc 7.0, bf16 no)" in summary


class FakeNVMLWithNVLink(FakeNVML):
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1

    def __init__(self, devices, links: int) -> None:
        super().__init__(devices)
        self.links = links

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 12:  # an A100 has 12 links; NVML raises past the last one
            raise self.NVMLError("Invalid Argument")
        return 1 if link < self.links else 0


def test_nvlink_and_infiniband(tmp_path: Path) -> None:
    from dsdoctor.render.env import interconnect_summary

    gpus, _ = envinfo.probe_gpus([], FakeNVMLWithNVLink([(b"NVIDIA A100-SXM4-80GB", 85899345920, (8, 0))], 12))
    assert gpus[0]["nvlink_active_links"] == 12
    pcie, _ = envinfo.probe_gpus([], FakeNVMLWithNVLink([(b"NVIDIA A10", 24146608128, (8, 6))], 0))
    assert pcie[0]["nvlink_active_links"] == 0
    # a sysfs tree shaped like /sys/class/infiniband/<dev>/ports/<n>/{state,rate,link_layer}
    port = tmp_path / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (tmp_path / "net" / "ib0").mkdir(parents=True)
    (tmp_path / "net" / "lo").mkdir()
    ic = envinfo.probe_interconnect(str(tmp_path))
    assert ic == {"infiniband": [{"device": "mlx5_0", "port": "1", "state": "4: ACTIVE",
                                  "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"}],
                  "net_interfaces": ["ib0"]}
    summary = interconnect_summary({"gpus": gpus, "interconnect": ic})
    assert summary == "NVLink: 12 active links per GPU; InfiniBand/RoCE: mlx5_0/1 200 Gb/sec (4X HDR) (4: ACTIVE); net: ib0"
    assert interconnect_summary({"gpus": pcie, "interconnect": {"infiniband": [], "net_interfaces": []}}) \
        == "no active NVLink (PCIe); no InfiniBand/RoCE device"


def test_a_failing_probe_becomes_an_error_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> dict:
        raise OSError("cannot read /proc/meminfo")

    monkeypatch.setattr(envinfo, "probe_cpu", boom)
    monkeypatch.setattr(envinfo, "probe_os", lambda: 1 / 0)
    snap = envinfo.collect(ops=False)
    probes = {e["probe"]: e["error"] for e in snap["errors"]}
    assert "cannot read /proc/meminfo" in probes["cpu"]
    assert "ZeroDivisionError" in probes["os"]
    assert snap["python"]["version"]  # the others still ran
    assert "Notes:" in render_markdown(snap)


def test_broken_or_hanging_child_probe_is_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend torch and DeepSpeed are installed; their child probes crash and hang.
    monkeypatch.setattr(envinfo, "_installed", lambda *a: True)
    monkeypatch.setattr(env_child, "TORCH_PROBE", "import sys; sys.exit('libcudart.so.12: cannot open')")
    monkeypatch.setattr(env_child, "DEEPSPEED_PROBE", "import time; time.sleep(30)")
    t0 = time.monotonic()
    snap = envinfo.collect(ops=True, timeout=1.5)
    assert time.monotonic() - t0 < 10
    probes = {e["probe"]: e["error"] for e in snap["errors"]}
    assert "libcudart.so.12" in probes["torch"]
    assert "timed out" in probes["deepspeed_ops"]
    assert snap["deepspeed_ops"] is None
    assert snap["cpu"]["count"] and snap["cuda"]["torch_cuda"] is None


PLANTED_MODULES = ("json", "torch", "deepspeed", "sitecustomize", "usercustomize", "io", "re")


def _plant_modules(where: Path, marker: Path) -> None:
    """Modules named like what the probes import, each of which records that it ran."""
    for name in PLANTED_MODULES:
        (where / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")


def test_child_probes_never_run_modules_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A json.py / torch.py / deepspeed.py where the user happens to run dsdoctor must not be run.
    cwd, marker = tmp_path / "work", tmp_path / "ran.txt"
    cwd.mkdir()
    _plant_modules(cwd, marker)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(envinfo, "_installed", lambda *a: True)  # start both child probes
    monkeypatch.setenv("PYTHONPATH", ".")  # a relative entry names the working directory too
    snap = envinfo.collect(ops=True, timeout=60)
    assert not marker.exists(), f"planted modules ran: {marker.read_text()!r}"
    assert snap["python"]["version"]


def test_env_command_never_runs_modules_from_the_working_directory(tmp_path: Path) -> None:
    # As a user runs it: the installed console script, in a directory holding planted modules.
    script = Path(sys.executable).with_name("dsdoctor")
    if not script.exists():
        pytest.skip("the dsdoctor console script is not installed beside this interpreter")
    cwd, marker = tmp_path / "work", tmp_path / "ran.txt"
    cwd.mkdir()
    _plant_modules(cwd, marker)
    proc = subprocess.run([str(script), "env", "--format", "json"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), f"planted modules ran: {marker.read_text()!r}"
    assert json.loads(proc.stdout)["python"]["version"]


def test_env_vars_are_filtered_and_redacted() -> None:
    environ = {
        "NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16",
        "HF_TOKEN": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345", "WANDB_API_KEY": "0" * 40,
        "HF_HOME": "/data/hf", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "HOME": "/home/alice", "PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "x" * 40,
        "DS_SKIP_CUDA_CHECK": "1",
    }
    env = envinfo.relevant_env(environ)
    assert env["HF_TOKEN"] == REDACTED and env["WANDB_API_KEY"] == REDACTED
    assert env["NCCL_DEBUG"] == "INFO" and env["WORLD_SIZE"] == "16" and env["DS_SKIP_CUDA_CHECK"] == "1"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "HOME" not in env and "PATH" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "hf_AbCd" not in json.dumps(env)


def test_cli_env_round_trips(tmp_path: Path) -> None:
    # (its speed is measured by bench/bench_env.py against a bare interpreter, not asserted here)
    out = tmp_path / "env.json"
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "env", "--format", "json", "--output", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    snap = envinfo.load_snapshot(str(out))
    assert snap["cpu"]["count"] == os.cpu_count()


def test_cli_markdown_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "--format", "markdown", "--no-ops"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("### Environment")
    assert "| RAM |" in md and "| torch |" in md and "| deepspeed |" in md
    assert main(["env", "--no-ops"]) == 0
    text = capsys.readouterr().out
    assert "RAM" in text and "packages" in text


def test_load_snapshot_accepts_the_minimal_keys(tmp_path: Path) -> None:
    p = tmp_path / "min.json"
    p.write_text(json.dumps({
        "cpu": {"count": 64, "ram_total_bytes": 1099511627776},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984,
                  "compute_capability": "9.0"}],
        "packages": {"torch": "2.3.0", "deepspeed": "0.14.2", "transformers": None, "accelerate": None},
    }))
    snap = envinfo.load_snapshot(str(p))
    assert snap["gpus"][0]["compute_capability"] == "9.0"
    assert render_markdown(snap)  # renders even with most keys missing


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"foo": 1}', "not an environment snapshot"),
        (b'{"cpu": {"count": "eight"}}', "cpu.count must be a non-negative integer"),
        (b'{"gpus": {"name": "A100"}}', "'gpus' must be a list"),
        (b'{"gpus": [{"name": "A100", "compute_capability": 8}]}', "compute_capability"),
        (b'{"packages": {"torch": 2.1}}', "packages.torch must be a version string"),
        (b'{"schema_version": 99, "cpu": {}}', "unsupported schema_version"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b'{"cpu": {}, "env_vars": ["HF_TOKEN=x"]}', "'env_vars' must be an object"),
        (b'{"cpu": {}, "os": "linux"}', "'os' must be an object"),
        (b'{"cpu": {}, "errors": ["boom"]}', "errors must be a list of objects"),
        (b'{"cpu": {}, "deepspeed_ops": {"ops": {"cpu_adam": true}}}', "deepspeed_ops.ops"),
    ],
)
def test_load_snapshot_rejects_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(UsageError) as exc:
        envinfo.load_snapshot(str(p))
    assert str(exc.value).startswith(str(p) + ":")
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_load_snapshot_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        envinfo.load_snapshot(str(tmp_path / "nope.json"))
    with pytest.raises(UsageError, match="is a directory"):
        envinfo.load_snapshot(str(tmp_path))


def test_load_snapshot_local_collects_now() -> None:
    snap = envinfo.load_snapshot("local")
    assert snap["cpu"]["count"] == os.cpu_count()


@pytest.mark.deepspeed
def test_real_deepspeed_op_report(ds_python: str) -> None:
    """`dsdoctor env` run by a Python with torch + DeepSpeed (``--ds-python``): the real op report."""
    r = subprocess.run([ds_python, "-c", "import psutil, rich"], capture_output=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"{ds_python} lacks dsdoctor's own dependencies (psutil, rich)")
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_TOKEN="hf_" + "Z" * 34)
    proc = subprocess.run([ds_python, "-m", "dsdoctor", "env", "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    snap = json.loads(proc.stdout)
    assert snap["packages"]["deepspeed"] and snap["packages"]["torch"]
    ops = snap["deepspeed_ops"]
    assert ops["version"] == snap["packages"]["deepspeed"]
    assert "cpu_adam" in ops["ops"] and ops["ops"]["cpu_adam"]["compatible"] in (True, False)
    assert snap["cuda"]["torch_cuda_available"] is not None  # the torch probe ran
    assert snap["env_vars"]["HF_TOKEN"] == REDACTED
    assert snap["errors"] == []


def test_any_accepted_snapshot_renders(tmp_path: Path) -> None:
    """Whatever load_snapshot accepts, the Markdown/text renderers and the issue body handle."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from dsdoctor.render.env import render_text
    from dsdoctor.render.issue_body import build_issue

    scalars = st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False) \
        | st.text(alphabet="ab[]/|`*\n:", max_size=8)
    json_vals = st.recursive(scalars, lambda c: st.lists(c, max_size=3)
                             | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
    # Each section: a mapping of the keys the renderers read (any values), or any JSON value.
    fields = ["count", "model", "version", "compiled_with", "ops", "warnings", "infiniband",
              "net_interfaces", "container", "torch_cuda", "driver", "distribution", "release",
              "conda_env", "swap_total_bytes", "shm_total_bytes", "cgroup_memory_limit_bytes",
              "nvcc_version", "accelerator", "ninja"]
    section = st.dictionaries(st.sampled_from(fields), json_vals, max_size=6) | json_vals
    gpu = st.dictionaries(st.sampled_from(["name", "bf16_supported", "nvlink_active_links", "index"]),
                          json_vals, max_size=4)
    snaps = st.fixed_dictionaries(
        {"cpu": st.dictionaries(st.sampled_from(fields), json_vals, max_size=4).map(
            lambda d: {k: v for k, v in d.items() if k != "count"})},
        optional={"python": section, "os": section, "cuda": section, "nvml": section,
                  "interconnect": section, "deepspeed_ops": section, "gpus": st.lists(gpu, max_size=2),
                  "packages": st.dictionaries(st.text(max_size=5), st.none() | st.text(max_size=5), max_size=3),
                  "env_vars": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
                  "notes": json_vals, "errors": json_vals})

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(snaps)
    def check(snap: dict) -> None:
        try:
            envinfo.validate_snapshot(snap)
        except UsageError:
            return
        import io

        render_markdown(snap)
        render_text(snap, file=io.StringIO())
        build_issue(target="deepspeed", report=None, logs=[], env=snap)

    check()


def _bare_venv(where: Path) -> Path:
    """A fresh venv with no packages (no pip either: fast), standing in for another environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=120)
    return where / "bin" / "python"


def test_env_probes_the_interpreter_given_with_python(tmp_path: Path) -> None:
    # dsdoctor's own venv has torch (CI installs it); the other interpreter has nothing.
    other = _bare_venv(tmp_path / "other")
    snap = envinfo.collect(ops=False, python=str(other), timeout=60)
    assert snap["python"]["executable"] == str(other)
    assert snap["packages"]["torch"] is None and snap["packages"]["deepspeed"] is None
    assert any("neither torch nor DeepSpeed is installed for " + str(other) in n
               for n in snap["notes"])
    assert not snap["errors"], snap["errors"]


def test_env_defaults_to_the_active_virtualenv(tmp_path: Path) -> None:
    other = _bare_venv(tmp_path / "active")
    assert env_child.training_python({"VIRTUAL_ENV": str(tmp_path / "active")}) == str(other)
    # dsdoctor's own environment active, or none: dsdoctor's interpreter
    assert env_child.training_python({"VIRTUAL_ENV": sys.prefix}) == sys.executable
    assert env_child.training_python({}) == sys.executable
    assert env_child.training_python({"VIRTUAL_ENV": str(tmp_path / "missing")}) == sys.executable


def test_env_python_that_is_not_an_interpreter_is_one_line(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    assert main(["env", "--python", str(tmp_path / "nope"), "--no-ops"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--python" in err and "not an executable file" in err


# ------------------------------------------------------------------------------ issue 23: /dev/shm, disks, DeepSpeed's stderr

def test_shm_usage_counts_deepspeed_leftover_buffers(tmp_path: Path) -> None:
    from dsdoctor.facts.envdisks import probe_shm

    shm = tmp_path / "shm"
    shm.mkdir()
    # the names DeepSpeed's shm allreduce gives its buffers (csrc/cpu/comm/shm.cpp), per rank
    for rank in range(3):
        (shm / f"deepspeed_allreduce_buffer_1000_127.0.0.1_29500_{rank}").write_bytes(b"\0" * 4096)
    (shm / "torch_1234_5678").write_bytes(b"\0" * 100)
    got = probe_shm(str(shm))
    assert got is not None and got["path"] == str(shm)
    assert got["deepspeed_buffers"] == 3 and got["deepspeed_bytes"] == 3 * 4096
    assert 0 <= got["used_bytes"] <= got["total_bytes"]
    assert probe_shm(str(tmp_path / "absent")) is None
    # 15 leftover 66 MiB buffers in a 1 GiB /dev/shm: said, in the snapshot's notes and as DS247
    one = envinfo.DEEPSPEED_SHM_BUFFER_BYTES
    full = {"total_bytes": 1 << 30, "used_bytes": 15 * one, "deepspeed_buffers": 15,
            "deepspeed_bytes": 15 * one}
    said = envinfo.shm_filled_by_deepspeed(full)
    assert said == ("/dev/shm is 96% full (990 of 1024 MiB); 15 DeepSpeed buffer(s) "
                    "(/dev/shm/deepspeed_*, 990 MiB) take 96% of it")
    assert envinfo.shm_filled_by_deepspeed({**full, "total_bytes": 32 << 30}) is None
    assert envinfo.shm_filled_by_deepspeed({**full, "deepspeed_buffers": 0, "deepspeed_bytes": 0}) is None
    snap = {"cpu": {"count": 2}, "shm": {"path": "/dev/shm", **full}}
    assert "/dev/shm 990.0 MiB used of 1.0 GiB (96%), 15 DeepSpeed buffers 990.0 MiB" in render_markdown(snap)


def test_shm_finding_from_the_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = envinfo.DEEPSPEED_SHM_BUFFER_BYTES
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"schema_version": 1, "cpu": {"count": 2}, "shm": {
        "path": "/dev/shm", "total_bytes": 1 << 30, "used_bytes": 15 * one,
        "deepspeed_buffers": 15, "deepspeed_bytes": 15 * one}}))
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1}')
    main(["analyze", "--config", str(cfg), "--env", str(env), "--format", "json"])
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "DS247"]
    assert len(found) == 1 and "15 DeepSpeed buffer(s)" in found[0]["message"]


def test_only_real_disks_are_listed() -> None:
    from dsdoctor.render.env import disks_summary

    snap = {"disks": [
        {"mountpoint": "/", "device": "/dev/vda", "fstype": "ext4", "disks": ["vda"], "rotational": True},
        {"mountpoint": "/dev/shm", "device": "shm", "fstype": "tmpfs"},
        {"mountpoint": "/mnt/sandboxing/model_tools_env/v1/python", "device": "tmpfs", "fstype": "tmpfs"},
        {"mountpoint": "/sys/fs/cgroup", "device": "tmpfs", "fstype": "tmpfs"},
        {"mountpoint": "/var/lib/docker/overlay2/abc/merged", "device": "overlay", "fstype": "overlay"},
        {"mountpoint": "/shared", "device": "fs01:/export/shared", "fstype": "nfs4"},
    ]}
    assert disks_summary(snap) == ("/ ext4 on vda (HDD (rotational)); /dev/shm tmpfs (RAM); "
                                   "/shared nfs4 (network)")


def test_deepspeed_stderr_is_a_section_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    from dsdoctor.render.env import render_text

    long = ("[2026-11-28 12:09:49,813] [WARNING] [real_accelerator.py:213:get_accelerator] Setting "
            "accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
    ops = {"version": "0.19.8", "accelerator": "cpu", "ops": {"cpu_adam": {"installed": False,
                                                                         "compatible": True}},
           "warnings": [long], "stderr": [f"line {i}" for i in range(60)]}
    render_text({"cpu": {"count": 2}, "deepspeed_ops": ops})
    out = capsys.readouterr().out
    head, _, section = out.partition("DeepSpeed's messages while probing its ops:")
    assert "cpu_adam" in head and long not in head
    assert long in section.splitlines()  # one line, as printed: not re-wrapped
    assert "line 18" in section and "line 19" not in section and "[... 41 more lines]" in section


def test_child_probe_stderr_is_kept_apart_and_bounded() -> None:
    code = ("import sys\nfor i in range(80): print(f'builder warning {i}', file=sys.stderr)\n"
            "print('@@DSDOCTOR@@{\"version\": \"x\"}')\n")
    got = env_child.finish_probe(env_child.run_probe(sys.executable, code), "test", 60)
    assert got["version"] == "x"
    assert got["stderr"] == [f"builder warning {i}" for i in range(30, 80)]
