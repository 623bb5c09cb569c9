"""Claims of the rules shown for real on the CPU with the installed releases (issue 20): cheap
(seconds), no process launched. Each test is a rule's ``verified`` source."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_fp16_max_is_65504_and_bf16_has_fp32_range() -> None:
    assert torch.finfo(torch.float16).max == 65504.0
    # bf16 keeps fp32's 8 exponent bits: the same largest power of two
    assert torch.finfo(torch.bfloat16).max > 3e38 and torch.finfo(torch.float32).max < 3.5e38


def test_bf16_keeps_fewer_mantissa_bits_than_fp16() -> None:
    # 8 significant bits in bf16 against 11 in fp16: a sum in bf16 rounds away what fp16 keeps
    assert torch.finfo(torch.bfloat16).eps == 2.0 ** -7
    assert torch.finfo(torch.float16).eps == 2.0 ** -10
    one, small = torch.tensor(1.0), torch.tensor(1e-3)
    assert (one.bfloat16() + small.bfloat16()).item() == 1.0
    assert (one.half() + small.half()).item() > 1.0


def test_yaml_keeps_the_last_of_two_duplicate_keys() -> None:
    # Accelerate reads its config file with yaml.safe_load (config_args.py); no error, no warning
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load("zero_stage: 2\nzero_stage: 3\n") == {"zero_stage": 3}


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


def test_zero_config_refuses_an_unknown_key() -> None:
    zero_config = pytest.importorskip("deepspeed.runtime.zero.config")
    from pydantic import ValidationError  # noqa: PLC0415
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        zero_config.DeepSpeedZeroConfig(**{"stage": 2, "overlap_com": True})


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


def test_sigusr1_ends_a_process_without_a_handler() -> None:
    """SLURM's --signal=USR1@N warning kills a process that installed no handler."""
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=20) == -signal.SIGUSR1
    finally:
        proc.kill()


def test_no_upstream_sigusr1_handler() -> None:
    """No source of the installed Transformers, Accelerate or DeepSpeed mentions SIGUSR1, so none
    installs a handler for SLURM's warning signal; torchrun does not handle it by default."""
    import importlib.util  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    for name in ("transformers", "accelerate", "deepspeed"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            pytest.skip(f"{name} is not installed")
        root = Path(spec.origin).parent
        hits = [p for p in root.rglob("*.py") if "SIGUSR1" in p.read_text(errors="replace")]
        assert hits == [], hits
    # torchrun forwards SIGUSR1 only when --signals-to-handle names it (to ranks with no handler)
    run = importlib.util.find_spec("torch.distributed.run")
    if run is not None and run.origin is not None:
        text = Path(run.origin).read_text()
        assert 'default="SIGTERM,SIGINT,SIGHUP,SIGQUIT"' in text or "SIGUSR1" not in text
