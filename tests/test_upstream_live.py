"""Claims of the rules shown for real on the CPU with the installed releases (issue 20): cheap
(seconds), no process launched. Each test is a rule's ``verified`` source."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_fp16_max_is_65504_and_bf16_has_fp32_range() -> None:
    assert torch.finfo(torch.float16).max == 65504.0
    # bf16 keeps fp32's 8 exponent bits: the same largest power of two
    assert torch.finfo(torch.bfloat16).max > 3e38 and torch.finfo(torch.float32).max < 3.5e38


def test_optimizer_and_scheduler_params_typo_is_a_type_error() -> None:
    """DeepSpeed builds the optimizer and the scheduler with the config's params as keywords
    (engine.py: ``torch.optim.AdamW(model_parameters, **optimizer_parameters)``,
    ``scheduler(optimizer, **scheduler_params)``): a misspelled key is a TypeError, not ignored."""
    lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")
    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(TypeError, match="unexpected keyword argument 'weight_decy'"):
        torch.optim.AdamW(params, **{"lr": 2e-5, "weight_decy": 0.1})
    opt = torch.optim.AdamW(params, lr=2e-5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'warmup_num_step'"):
        lr_schedules.WarmupLR(opt, **{"warmup_num_step": 100})


def test_number_strings_deepspeed_converts_and_refuses() -> None:
    """DeepSpeed's pydantic models parse "3" and "500000000" but refuse "5e8" for an int; PyYAML
    (YAML 1.1) reads a bare 5e8 as the string "5e8" (5.0e+8 is a float)."""
    yaml = pytest.importorskip("yaml")
    zero_config = pytest.importorskip("deepspeed.runtime.zero.config")
    from pydantic import ValidationError  # noqa: PLC0415

    assert zero_config.DeepSpeedZeroConfig(stage="3").stage == 3
    assert zero_config.DeepSpeedZeroConfig(reduce_bucket_size="500000000").reduce_bucket_size == 500000000
    with pytest.raises(ValidationError, match="unable to parse string as an integer"):
        zero_config.DeepSpeedZeroConfig(reduce_bucket_size="5e8")
    assert yaml.safe_load("a: 5e8\nb: 5.0e+8") == {"a": "5e8", "b": 5.0e8}
