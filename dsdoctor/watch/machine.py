"""The machine under the run, for ``watch --env local``: RAM and swap (psutil; the cgroup's limit
when the job runs in a container with one) and each GPU's memory and utilization (NVML through
nvidia-ml-py). Host RAM rising toward the limit before a ``-9`` is the evidence users lack, so
passing RAM_ALERT of the limit is raised as a finding. No GPU or no NVML is said, never fatal.
Polled by the watch worker, off the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from dsdoctor.model import Finding

GIB = 1 << 30
POLL_SECONDS = 3.0  # RAM/swap/GPU polling (NVML calls take milliseconds; never on the UI thread)
RAM_ALERT = 0.90  # of the limit: the kernel's OOM killer (or the cgroup's) is near
CGROUP_ROOT = "/sys/fs/cgroup"
# cgroup v1 writes "no limit" as the largest page-aligned int64, v2 as "max"
_NO_LIMIT = 1 << 60
RAM_RULE = "WATCH-RAM"  # watch's own finding, not a rule of rules/: analyze cannot see memory live


@dataclass(frozen=True)
class GpuSample:
    index: int
    memory_used: int
    memory_total: int
    utilization: int | None  # percent


@dataclass(frozen=True)
class CgroupMemory:
    """The memory cgroup this process is in, when it has a limit: a container's -9 comes at its
    limit, not at the host's RAM."""

    used: int  # usage without the reclaimable page cache (inactive files), as ``docker stats``
    limit: int
    source: str  # the file the limit was read from


@dataclass(frozen=True)
class MachineSample:
    ram_used: int  # in the cgroup when it has a limit, else on the host
    ram_total: int  # the limit: the cgroup's when lower than the host's RAM
    swap_used: int
    swap_total: int
    gpus: tuple[GpuSample, ...] = ()
    gpu_note: str = ""  # why there are no GPUs to show
    ram_limit_from: str = ""  # the cgroup file of the limit, "" for the host's RAM

    @property
    def ram_fraction(self) -> float:
        return self.ram_used / max(self.ram_total, 1)

    def describe(self) -> str:
        limit = " (cgroup limit)" if self.ram_limit_from else ""
        text = (f"this machine: RAM {self.ram_used / GIB:.1f}/{self.ram_total / GIB:.1f} GiB"
                f"{limit} ({self.ram_fraction:.0%})")
        if self.swap_total:
            text += f", swap {self.swap_used / GIB:.1f}/{self.swap_total / GIB:.1f} GiB"
        for g in self.gpus:
            util = f" {g.utilization}%" if g.utilization is not None else ""
            text += (f" | GPU{g.index} {g.memory_used / GIB:.1f}/{g.memory_total / GIB:.1f} GiB"
                     f"{util}")
        if self.gpu_note:
            text += f" | {self.gpu_note}"
        return text


def _gpus() -> tuple[tuple[GpuSample, ...], str]:
    try:
        import pynvml  # noqa: PLC0415 - nvidia-ml-py; optional at run time
    except ImportError:
        return (), "no NVML (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return (), "no GPU (NVML not available)"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                util: int | None = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:  # noqa: BLE001 - not supported on some devices (MIG)
                util = None
            out.append(GpuSample(i, int(mem.used), int(mem.total), util))
        return tuple(out), "" if out else "no GPU"
    except Exception as exc:  # noqa: BLE001 - a driver error must not stop the watch
        return (), f"NVML error: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    try:
        return int(text)
    except ValueError:
        return None


def _stat_value(path: Path, keys: tuple[str, ...]) -> int:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    values = dict(line.split(" ", 1) for line in lines if " " in line)
    for key in keys:
        if key in values and values[key].strip().isdigit():
            return int(values[key])
    return 0


def cgroup_memory(root: str = CGROUP_ROOT) -> CgroupMemory | None:
    """The memory cgroup's usage and limit (v2, else v1), None when it has no limit."""
    base = Path(root)
    for limit_file, usage_file, stat_keys in (
            (base / "memory.max", base / "memory.current", ("inactive_file",)),
            (base / "memory/memory.limit_in_bytes", base / "memory/memory.usage_in_bytes",
             ("total_inactive_file", "inactive_file"))):
        limit = _read_int(limit_file)
        if limit is None:
            continue
        if limit >= _NO_LIMIT:
            return None
        usage = _read_int(usage_file) or 0
        cache = _stat_value(limit_file.parent / "memory.stat", stat_keys)
        return CgroupMemory(max(0, usage - cache), limit, str(limit_file))
    return None


def sample_machine(cgroup_root: str = CGROUP_ROOT) -> MachineSample:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    gpus, note = _gpus()
    used, total, source = int(vm.total - vm.available), int(vm.total), ""
    group = cgroup_memory(cgroup_root)
    if group is not None and group.limit < total:
        used, total, source = group.used, group.limit, group.source
    return MachineSample(used, total, int(swap.used), int(swap.total), gpus, note, source)


def ram_finding(sample: MachineSample, alert: float = RAM_ALERT) -> Finding | None:
    """A finding when RAM use passes ``alert`` of the limit: the evidence before a -9."""
    if sample.ram_fraction < alert:
        return None
    limit = (f"the cgroup's limit ({sample.ram_limit_from})" if sample.ram_limit_from
             else "this machine's RAM")
    title = (f"host RAM at {sample.ram_fraction:.0%} of {limit}: "
             f"{sample.ram_used / GIB:.1f} of {sample.ram_total / GIB:.1f} GiB")
    swap = (f"; swap {sample.swap_used / GIB:.1f}/{sample.swap_total / GIB:.1f} GiB in use"
            if sample.swap_used else "")
    return Finding(
        rule=RAM_RULE, name="host-ram-near-limit", severity="warning", title=title,
        message=(f"Memory use on this machine passed {alert:.0%} of {limit}{swap}. When it runs "
                 "out, the kernel's OOM killer (or the container's) ends a rank with SIGKILL: "
                 "the launcher then reports 'exitcode: -9' or 'return code = -9' and the log "
                 "shows no Python error. Seen live, it is the evidence that a later -9 was host "
                 "memory."),
        fix=("find what holds host memory before it runs out: ZeRO CPU offload (offload_optimizer"
             "/offload_param device cpu) keeps the fp32 states in RAM, each data loader worker "
             "copies the dataset, and loading a checkpoint on every rank at once multiplies the "
             "model's size; 'dsdoctor analyze --config ds.json' says which of them the run uses"),
    )
