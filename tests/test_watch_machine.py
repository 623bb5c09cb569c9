"""The machine line (dsdoctor/watch/machine.py): RAM, swap and GPUs, never fatal without NVML."""

from __future__ import annotations

import psutil

from dsdoctor.watch.machine import (
    GIB,
    GpuSample,
    MachineSample,
    cgroup_memory,
    ram_finding,
    sample_machine,
)


def test_sample_reads_this_machine():
    got = sample_machine()
    assert got.ram_total == psutil.virtual_memory().total
    assert 0 < got.ram_used <= got.ram_total
    assert got.gpus or got.gpu_note  # either GPUs, or a note saying why none are shown


def test_describe():
    m = MachineSample(60 * GIB, 64 * GIB, 2 * GIB, 8 * GIB,
                      (GpuSample(0, 70 * GIB, 80 * GIB, 97),))
    assert m.describe() == ("this machine: RAM 60.0/64.0 GiB (94%), swap 2.0/8.0 GiB "
                            "| GPU0 70.0/80.0 GiB 97%")
    assert MachineSample(GIB, 2 * GIB, 0, 0, (), "no GPU").describe().endswith("(50%) | no GPU")


def _cgroup_v2(root, limit: str, current: int, inactive: int) -> None:
    # the files and their formats as the kernel writes them (Documentation/admin-guide/cgroup-v2)
    (root / "memory.max").write_text(limit + "\n")
    (root / "memory.current").write_text(f"{current}\n")
    (root / "memory.stat").write_text(f"anon {current - inactive}\nfile {inactive}\n"
                                      f"active_file 0\ninactive_file {inactive}\n")


def test_cgroup_v2_limit_and_usage_without_page_cache(tmp_path):
    _cgroup_v2(tmp_path, str(16 * GIB), 15 * GIB, 1 * GIB)
    got = cgroup_memory(str(tmp_path))
    assert got is not None and (got.used, got.limit) == (14 * GIB, 16 * GIB)
    assert got.source.endswith("memory.max")
    _cgroup_v2(tmp_path, "max", 15 * GIB, 0)
    assert cgroup_memory(str(tmp_path)) is None  # no limit: the host's RAM is the limit


def test_cgroup_v1_unlimited_is_no_limit(tmp_path):
    (tmp_path / "memory").mkdir()
    # v1 writes "no limit" as the largest page-aligned int64 (this machine's value)
    (tmp_path / "memory/memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory/memory.usage_in_bytes").write_text("12121849856\n")
    assert cgroup_memory(str(tmp_path)) is None
    (tmp_path / "memory/memory.limit_in_bytes").write_text(f"{8 * GIB}\n")
    (tmp_path / "memory/memory.stat").write_text(f"inactive_file 12288\ntotal_inactive_file {GIB}\n")
    got = cgroup_memory(str(tmp_path))
    assert got is not None and got.limit == 8 * GIB and got.used == 12121849856 - GIB
    assert cgroup_memory(str(tmp_path / "absent")) is None


def test_a_cgroup_limit_below_the_ram_is_the_limit(tmp_path):
    small = psutil.virtual_memory().total // 4
    _cgroup_v2(tmp_path, str(small), small // 2, 0)
    got = sample_machine(str(tmp_path))
    assert (got.ram_used, got.ram_total) == (small // 2, small)
    assert "(cgroup limit) (50%)" in got.describe()


def test_ram_finding_past_the_alert_only():
    assert ram_finding(MachineSample(14 * GIB, 16 * GIB, 0, 0)) is None  # 88%
    f = ram_finding(MachineSample(int(14.6 * GIB), 16 * GIB, GIB, 4 * GIB, (), "",
                                  "/sys/fs/cgroup/memory.max"))
    assert f is not None and f.severity == "warning"
    assert f.title == ("host RAM at 91% of the cgroup's limit (/sys/fs/cgroup/memory.max): "
                       "14.6 of 16.0 GiB")
    assert "swap 1.0/4.0 GiB in use" in f.message and "-9" in f.message


def test_plain_says_the_ram_alert_once_per_crossing(tmp_path):
    from dsdoctor.facts.inputs import AnalysisInputs
    from dsdoctor.watch.follow import Follower
    from dsdoctor.watch.plain import MACHINE_SECONDS, PlainWatch

    samples = [MachineSample(15 * GIB, 16 * GIB, 0, 0), MachineSample(int(15.5 * GIB), 16 * GIB, 0, 0),
               MachineSample(8 * GIB, 16 * GIB, 0, 0)]
    said: list[str] = []
    path = tmp_path / "train.log"
    path.write_text("starting\n")
    watch = PlainWatch(Follower([str(path)], AnalysisInputs()), out=said.append,
                       machine=lambda: samples.pop(0))
    for i in range(3):
        watch.check_machine(100.0 + i * MACHINE_SECONDS)
    assert said == ["warning: WATCH-RAM host-ram-near-limit: host RAM at 94% of this machine's RAM: "
                    "15.0 of 16.0 GiB",
                    "host RAM back under the alert: this machine: RAM 8.0/16.0 GiB (50%)"]
