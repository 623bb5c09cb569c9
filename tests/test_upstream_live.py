"""Claims of the rules shown for real on the CPU with the installed releases (issue 20): cheap
(seconds), no process launched. Each test is a rule's ``verified`` source."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_fp16_max_is_65504_and_bf16_has_fp32_range() -> None:
    assert torch.finfo(torch.float16).max == 65504.0
    # bf16 keeps fp32's 8 exponent bits: the same largest power of two
    assert torch.finfo(torch.bfloat16).max > 3e38 and torch.finfo(torch.float32).max < 3.5e38
