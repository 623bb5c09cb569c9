"""DS234: ZeRO-Infinity's nvme_path on storage that is not a local NVMe drive (S35).

The DeepSpeed and Transformers guides: nvme_path must be on a real NVMe device (about 3.5 GB/s
read, 3 GB/s write); a SATA SSD or a spinning disk works but much slower. A network filesystem
makes every swap cross the network, and tmpfs keeps the "offloaded" tensors in RAM, which is
what NVMe offload was chosen to spare. The env snapshot's ``disks`` section (``dsdoctor env`` on
the training node) says which mount holds the path and what is under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import device_name, finding
from dsdoctor.facts.context import Context
from dsdoctor.facts.envdisks import mount_of, storage_kind
from dsdoctor.model import Finding

_SECTIONS = ("offload_param", "offload_optimizer")

# kind -> (severity, what the mount is, why it hurts)
_VERDICTS = {
    "ram": ("warning", "tmpfs (RAM)",
            "the swapped tensors stay in host RAM, so NVMe offload saves no memory over "
            "device \"cpu\" and the tmpfs competes with the offload buffers for the same RAM"),
    "network": ("warning", "a network filesystem",
                "every parameter/optimizer swap crosses the network, far below a local NVMe "
                "drive's ~3 GB/s, and all ranks of the node share that link"),
    "hdd": ("warning", "a rotational disk (HDD) by the kernel's queue/rotational flag",
            "a spinning disk reads ~0.2 GB/s against a local NVMe drive's ~3.5 GB/s: every step "
            "waits on the swap"),
    "ssd": ("info", "a non-NVMe disk (SSD or virtual disk, not rotational)",
            "it works, but a SATA SSD's ~0.5 GB/s is several times below NVMe's ~3.5 GB/s read "
            "/ 3 GB/s write, so steps wait on the swap"),
}


def _paths(ctx: Context) -> list[tuple[str, str]]:
    """(config key, nvme_path) of each offload section swapping to NVMe."""
    out = []
    for section in _SECTIONS:
        base = f"zero_optimization.{section}"
        if device_name(ctx.cfg_get(f"{base}.device")) != "nvme":
            continue
        p = ctx.cfg_get(f"{base}.nvme_path")
        if isinstance(p, str) and p.startswith("/"):
            out.append((f"{base}.nvme_path", p))
    return out


def nvme_path_not_on_nvme(ctx: Context, rule: Any) -> Iterator[Finding]:
    paths = _paths(ctx)
    if not paths:
        return
    disks = ctx.env_get("disks") if ctx.env else None
    if not isinstance(disks, list):
        # No snapshot, or one from a dsdoctor that did not record disks: say what settles it.
        ctx.missing(rule.code, "which device holds nvme_path (NVMe, SSD, HDD, network or tmpfs)",
                    "--env snapshot.json (from a current 'dsdoctor env' on the training node)")
        return
    for key, path in paths:
        mount = mount_of(path, disks)
        if mount is None:
            continue
        kind = storage_kind(mount)
        if kind not in _VERDICTS:
            continue
        severity, what, why = _VERDICTS[kind]
        under = (f" on {', '.join(map(str, mount['disks']))}" if isinstance(mount.get("disks"), list)
                 and mount.get("disks") else "")
        dev = mount.get("device")
        device = f", {dev}" if dev and dev != mount.get("fstype") else ""
        yield finding(
            f"{key} is {path}, which the environment ({ctx.env_source}) shows on mount "
            f"{mount.get('mountpoint')} ({mount.get('fstype')}{device}{under}): "
            f"{what}. ZeRO-Infinity swaps to files there; {why}.",
            path=key, severity=severity,
            fix=f"point {key} at a directory on a local NVMe drive (a mount whose device is "
                f"/dev/nvme*, see 'dsdoctor env'); if the node has none, device \"cpu\" "
                f"offload is faster when CPU RAM allows")


__all__ = ["nvme_path_not_on_nvme"]
