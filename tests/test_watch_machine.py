"""The machine line (dsdoctor/watch/machine.py): RAM, swap and GPUs, never fatal without NVML."""

from __future__ import annotations

import psutil

from dsdoctor.watch.machine import GIB, GpuSample, MachineSample, sample_machine


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
