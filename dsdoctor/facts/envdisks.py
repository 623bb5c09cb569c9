"""The env snapshot's ``disks`` section: each mounted filesystem and the disk under it.

ZeRO-Infinity swaps to files under ``nvme_path``; the guides ask for a local NVMe drive (about
3.5 GB/s read, 3 GB/s write): a SATA SSD or a spinning disk works but every step waits on it, a
network filesystem is slower still, and tmpfs is RAM, which is what NVMe offload was meant to
save. This probe records, per mount, the device, filesystem type and mount point, and for block
devices the disk it sits on (partitions and device-mapper resolved through /sys) with whether
that disk is NVMe and rotational. It reads /proc and /sys only (no stat of a mount, so a dead
network mount cannot hang it): nothing is executed or imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Filesystems served over the network (or by a cluster), where nvme_path swaps over the wire.
NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "cephfs", "ceph",
    "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
    "fuse.rclone", "9p", "afs", "pvfs2", "orangefs", "wekafs", "fuse.weka", "virtiofs",
})
#: Filesystems held in RAM.
RAM_FS = frozenset({"tmpfs", "ramfs"})
# Kernel pseudo filesystems: never a place for nvme_path, left out to keep the snapshot short.
_PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
    "tracefs", "configfs", "fusectl", "mqueue", "pstore", "bpf", "hugetlbfs", "autofs",
    "binfmt_misc", "efivarfs", "rpc_pipefs", "nsfs", "selinuxfs", "squashfs",
})
_MAX_MOUNTS = 200


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _disks_of(name: str, sys_root: Path, depth: int = 0) -> list[str]:
    """The whole disks under block device ``name`` (a partition's parent, a dm/md's members)."""
    node = sys_root / "class" / "block" / name
    if depth > 8 or not node.exists():
        return []
    slaves = node / "slaves"
    members = sorted(p.name for p in slaves.iterdir()) if slaves.is_dir() else []
    if members:  # device-mapper (LVM, LUKS) or md RAID: the disks of each member
        out: list[str] = []
        for m in members:
            out.extend(d for d in _disks_of(m, sys_root, depth + 1) if d not in out)
        return out
    if (node / "partition").exists():  # a partition: its directory sits in its disk's
        return [Path(os.path.realpath(node)).parent.name]
    return [name]


def describe_device(device: str, sys_root: str = "/sys") -> dict[str, Any]:
    """Disk facts of a mounted device path (``/dev/nvme0n1p2``, ``/dev/mapper/vg-lv``)."""
    real = os.path.realpath(device) if device.startswith("/dev/") else device
    name = os.path.basename(real)
    disks = _disks_of(name, Path(sys_root)) if real.startswith("/dev/") else []
    if not disks:
        return {}
    rot = [_read(Path(sys_root) / "block" / d / "queue" / "rotational") for d in disks]
    return {
        "disks": disks,
        # NVMe namespaces are named nvme<ctrl>n<ns> by the kernel's nvme driver.
        "nvme": all(d.startswith("nvme") for d in disks),
        "rotational": (None if any(r not in ("0", "1") for r in rot)
                       else any(r == "1" for r in rot)),
    }


def disk_entries(partitions: Iterable[tuple[str, str, str]], sys_root: str = "/sys") -> list[dict[str, Any]]:
    """One entry per (device, mountpoint, fstype), pseudo filesystems left out."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for device, mountpoint, fstype in partitions:
        if fstype in _PSEUDO_FS or mountpoint in seen or len(out) >= _MAX_MOUNTS:
            continue
        if not (device.startswith("/dev/") or fstype in NETWORK_FS or fstype in RAM_FS
                or fstype == "overlay"):
            continue
        seen.add(mountpoint)
        entry: dict[str, Any] = {"mountpoint": mountpoint, "device": device, "fstype": fstype}
        entry.update(describe_device(device, sys_root))
        out.append(entry)
    return out


def probe_disks() -> list[dict[str, Any]]:
    """The mounted filesystems of this machine (Linux /sys for the disk facts)."""
    import psutil  # a declared dependency; imported here so importing this module stays light

    parts = [(p.device, p.mountpoint, p.fstype) for p in psutil.disk_partitions(all=True)]
    return disk_entries(parts)


def mount_of(path: str, disks: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The mount entry holding ``path`` (longest mount point that is a prefix of it)."""
    norm = os.path.normpath(path)
    best: dict[str, Any] | None = None
    for d in disks:
        mp = d.get("mountpoint") if isinstance(d, dict) else None
        if not isinstance(mp, str) or not mp.startswith("/"):
            continue
        mp = os.path.normpath(mp)
        inside = norm == mp or norm.startswith(mp.rstrip("/") + "/")
        if inside and (best is None or len(mp) > len(os.path.normpath(best["mountpoint"]))):
            best = d
    return best


def storage_kind(entry: dict[str, Any]) -> str:
    """"nvme", "ssd", "hdd", "network", "ram", "overlay" or "unknown" for a mount entry."""
    fstype = str(entry.get("fstype") or "")
    if fstype in RAM_FS:
        return "ram"
    if fstype in NETWORK_FS:
        return "network"
    if entry.get("nvme") is True:
        return "nvme"
    if entry.get("rotational") is True:
        return "hdd"
    if entry.get("rotational") is False:
        return "ssd"
    if fstype == "overlay":
        return "overlay"
    return "unknown"


#: DeepSpeed's shared-memory allreduce (the CPU accelerator's ``deepspeed_shm_comm`` op) names
#: each rank's buffer ``deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>`` in /dev/shm
#: (csrc/cpu/comm/shm.cpp); a rank that dies before ``shm_unlink`` leaves it there.
DEEPSPEED_SHM_PREFIX = "deepspeed_"
_MAX_SHM_ENTRIES = 100_000  # a directory listing is bounded: never a reason to hang `env`


def probe_shm(root: str = "/dev/shm") -> dict[str, Any] | None:
    """/dev/shm's size and use, and DeepSpeed's buffers in it (count and bytes); None when the
    machine has no /dev/shm. Reads the directory and stats its entries: nothing is opened."""
    try:
        st = os.statvfs(root)
    except (OSError, AttributeError):
        return None
    total = st.f_frsize * st.f_blocks
    out: dict[str, Any] = {"path": root, "total_bytes": total,
                           "used_bytes": total - st.f_frsize * st.f_bfree,
                           "deepspeed_buffers": 0, "deepspeed_bytes": 0}
    try:
        with os.scandir(root) as it:
            for n, entry in enumerate(it):
                if n >= _MAX_SHM_ENTRIES:
                    out["listing_cut"] = True
                    break
                if not entry.name.startswith(DEEPSPEED_SHM_PREFIX):
                    continue
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                out["deepspeed_buffers"] += 1
                out["deepspeed_bytes"] += size
    except OSError:
        out["deepspeed_buffers"] = out["deepspeed_bytes"] = None  # unreadable: not known
    return out


def is_listed(entry: dict[str, Any]) -> bool:
    """Whether a mount is shown among the disks: a block device, a network filesystem, /dev/shm
    or the root. Other tmpfs and overlay mounts (a sandbox's or a container runtime's, cgroup
    folders) are kept in the snapshot, where nvme_path may resolve to them, but not listed."""
    fstype = str(entry.get("fstype") or "")
    mp = entry.get("mountpoint")
    if mp in ("/", "/dev/shm"):
        return True
    if fstype in RAM_FS or fstype == "overlay":
        return False
    return str(entry.get("device") or "").startswith("/dev/") or fstype in NETWORK_FS


__all__ = ["DEEPSPEED_SHM_PREFIX", "NETWORK_FS", "RAM_FS", "describe_device", "disk_entries",
           "is_listed", "mount_of", "probe_disks", "probe_shm", "storage_kind"]
