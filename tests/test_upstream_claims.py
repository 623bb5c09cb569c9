"""Rule claims about Transformers shown for real, in seconds, on a CPU (issue 20: rules cite these
tests in their ``verified`` lists).

Like test_dskeys.py's ``deepspeed`` tests, each runs in a child process (the interpreter given by
``--ds-python`` / ``DSDOCTOR_DS_PYTHON``, see conftest.py), so this suite never imports torch or
transformers itself.
"""

from __future__ import annotations

import subprocess

import pytest

TF32_PROBE = r"""
import logging, sys, tempfile
logging.disable(logging.CRITICAL)
import torch, transformers
from transformers import TrainingArguments
assert not torch.cuda.is_available(), "needs a machine without CUDA"
try:
    TrainingArguments(output_dir=tempfile.mkdtemp(), tf32=True)
except ValueError as e:
    print(transformers.__version__, "|", e)
else:
    print(transformers.__version__, "| accepted")
"""


@pytest.mark.deepspeed
def test_tf32_refused_without_an_ampere_cuda_gpu(ds_python: str) -> None:
    """DS223: TrainingArguments(tf32=True) raises when torch sees no CUDA GPU of compute
    capability 8 or more (utils/import_utils.py is_torch_tf32_available)."""
    r = subprocess.run([ds_python, "-c", TF32_PROBE], capture_output=True, text=True, timeout=300)
    if "needs a machine without CUDA" in r.stderr:
        pytest.skip("this machine has CUDA")
    assert r.returncode == 0, r.stderr[-2000:]
    version, _, said = r.stdout.strip().splitlines()[-1].partition(" | ")
    assert said == "--tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7", version


def test_enospc_and_edquot_errnos() -> None:
    """DS117: errno 28 is 'No space left on device' (ENOSPC), errno 122 a quota (EDQUOT) on Linux."""
    import errno
    import os
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("errno numbers are Linux's")
    assert errno.ENOSPC == 28 and os.strerror(28) == "No space left on device"
    assert errno.EDQUOT == 122 and os.strerror(122) == "Disk quota exceeded"


FINFO_PROBE = r"""
import torch
f16, bf16, f32 = (torch.finfo(t) for t in (torch.float16, torch.bfloat16, torch.float32))
print(f16.max, bf16.max, f32.max, bf16.bits, f32.bits)
"""


@pytest.mark.deepspeed
def test_bf16_has_fp32_range_and_fp16_stops_at_65504(ds_python: str) -> None:
    """DS201: fp16's largest value is 65504; bf16's is within 1% of fp32's (the same exponent)."""
    r = subprocess.run([ds_python, "-c", FINFO_PROBE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    f16, bf16, f32, _, _ = (float(x) for x in r.stdout.split())
    assert f16 == 65504.0
    assert 0.99 * f32 < bf16 <= f32
