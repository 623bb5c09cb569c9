"""The env snapshot's disks section (facts/envdisks.py) on a built sysfs tree, and DS234's
"which input settles it" note when the snapshot has no disks."""

from __future__ import annotations

import os
from pathlib import Path

from dsdoctor.facts.envdisks import disk_entries, mount_of, storage_kind


def _sysfs(root: Path) -> Path:
    """A /sys with nvme0n1 (+ partition p1), sda (rotational, + sda1), dm-0 over sda1 + nvme0n1p1."""
    devices = root / "devices" / "pci"
    for disk, rot, parts in (("nvme0n1", "0", ["nvme0n1p1"]), ("sda", "1", ["sda1"])):
        (devices / disk / "queue").mkdir(parents=True)
        (devices / disk / "queue" / "rotational").write_text(rot + "\n")
        (root / "block").mkdir(exist_ok=True)
        os.symlink(devices / disk, root / "block" / disk)
        (root / "class" / "block").mkdir(parents=True, exist_ok=True)
        os.symlink(devices / disk, root / "class" / "block" / disk)
        for p in parts:
            (devices / disk / p).mkdir()
            (devices / disk / p / "partition").write_text("1\n")
            os.symlink(devices / disk / p, root / "class" / "block" / p)
    dm = root / "devices" / "virtual" / "dm-0"
    (dm / "slaves").mkdir(parents=True)
    for member in ("sda1", "nvme0n1p1"):
        (dm / "slaves" / member).mkdir()
    os.symlink(dm, root / "class" / "block" / "dm-0")
    return root


def test_disk_entries_resolve_partitions_and_device_mapper(tmp_path: Path) -> None:
    sys_root = str(_sysfs(tmp_path / "sys"))
    parts = [("/dev/nvme0n1p1", "/local_nvme", "xfs"), ("/dev/sda1", "/", "ext4"),
             ("/dev/dm-0", "/data", "xfs"), ("tmpfs", "/dev/shm", "tmpfs"),
             ("fs01:/export", "/shared", "nfs4"), ("proc", "/proc", "proc"),
             ("cgroup2", "/sys/fs/cgroup", "cgroup2")]
    got = {d["mountpoint"]: d for d in disk_entries(parts, sys_root)}
    assert set(got) == {"/local_nvme", "/", "/data", "/dev/shm", "/shared"}
    assert got["/local_nvme"]["disks"] == ["nvme0n1"] and got["/local_nvme"]["nvme"] is True
    assert storage_kind(got["/local_nvme"]) == "nvme"
    assert got["/"]["disks"] == ["sda"] and storage_kind(got["/"]) == "hdd"
    # dm over an HDD partition and an NVMe partition: not all NVMe, and rotational
    assert got["/data"]["disks"] == ["nvme0n1", "sda"]
    assert got["/data"]["nvme"] is False and storage_kind(got["/data"]) == "hdd"
    assert storage_kind(got["/dev/shm"]) == "ram" and "disks" not in got["/dev/shm"]
    assert storage_kind(got["/shared"]) == "network"


def test_mount_of_takes_the_longest_prefix_and_not_a_sibling() -> None:
    disks = [{"mountpoint": "/"}, {"mountpoint": "/data"}, {"mountpoint": "/data2"}]
    assert mount_of("/data/swap", disks)["mountpoint"] == "/data"  # type: ignore[index]
    assert mount_of("/data2/x", disks)["mountpoint"] == "/data2"  # type: ignore[index]
    assert mount_of("/datax/y", disks)["mountpoint"] == "/"  # type: ignore[index]
    assert mount_of("/x", [{"mountpoint": "/data"}]) is None


def test_probe_disks_on_this_machine_returns_well_formed_entries() -> None:
    from dsdoctor.facts.envdisks import probe_disks

    for d in probe_disks():
        assert d["mountpoint"].startswith("/") and isinstance(d["fstype"], str)


def test_a_snapshot_with_a_malformed_disks_section_is_refused() -> None:
    import pytest

    from dsdoctor.errors import UsageError
    from dsdoctor.facts.envinfo import validate_snapshot

    for bad in ("x", ["/", 1]):
        with pytest.raises(UsageError, match="disks"):
            validate_snapshot({"cpu": {"count": 1}, "disks": bad})
    assert validate_snapshot({"cpu": {"count": 1}, "disks": []})["disks"] == []
