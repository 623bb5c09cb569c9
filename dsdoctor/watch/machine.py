"""The machine under the run, for the TUI: RAM and swap (psutil) and each GPU's memory and
utilization (NVML through nvidia-ml-py). Host RAM rising toward the limit before a ``-9`` is the
evidence users lack. No GPU or no NVML is said, never fatal. Polled by the worker, off the UI.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

GIB = 1 << 30


@dataclass(frozen=True)
class GpuSample:
    index: int
    memory_used: int
    memory_total: int
    utilization: int | None  # percent


@dataclass(frozen=True)
class MachineSample:
    ram_used: int
    ram_total: int
    swap_used: int
    swap_total: int
    gpus: tuple[GpuSample, ...] = ()
    gpu_note: str = ""  # why there are no GPUs to show

    def describe(self) -> str:
        ram = self.ram_used / max(self.ram_total, 1)
        text = (f"this machine: RAM {self.ram_used / GIB:.1f}/{self.ram_total / GIB:.1f} GiB "
                f"({ram:.0%})")
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


def sample_machine() -> MachineSample:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    gpus, note = _gpus()
    return MachineSample(int(vm.total - vm.available), int(vm.total), int(swap.used),
                         int(swap.total), gpus, note)
