"""S22: pinned (page-locked) CPU-offload buffers in DS203 and DS106 (checks/pinned_memory.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.test_rules_examples import run_example

LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "torch_dtype": "float16", "vocab_size": 32000}


def _example(pin: bool, swap: int | None, stage: int = 3, ds: str = "0.14.0") -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": stage,
                            "offload_optimizer": {"device": "cpu", "pin_memory": pin}}
    if stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    cpu: dict[str, Any] = {"count": 32, "ram_total_bytes": 64 * 2**30}
    if swap is not None:
        cpu["swap_total_bytes"] = swap
    return {"config": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero},
            "model": LLAMA_7B, "env": {"cpu": cpu, "gpus": [], "packages": {"deepspeed": ds}}}


def _ds203(ex: dict[str, Any], tmp: Path) -> Any:
    found = [f for f in run_example(ex, tmp) if f.rule == "DS203"]
    assert len(found) == 1
    return found[0]


def test_pinning_named_first_when_swap_would_hold_the_rest(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=128 * 2**30), tmp_path)
    # ZeRO-3: 4 (fp32 grads) + 2 (16-bit params) bytes x 6,738,415,616 parameters
    assert "37.65 GiB per node of it is page-locked" in f.message
    # the 16-bit partitions are pinned whatever offload_param.pin_memory says (DeepSpeed's
    # _create_param_groups_fp16_flat_cpu_memory): only the optimizer's key is a switch
    assert "whatever offload_param.pin_memory says" in f.message
    assert f.fix.startswith("set zero_optimization.offload_optimizer.pin_memory to false")


def test_no_pin_fix_when_swap_could_not_hold_it(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=0), tmp_path)
    assert "page-locked" in f.message and "pin_memory" not in f.fix


def test_unpinned_offload_says_nothing_about_pinning(tmp_path: Path) -> None:
    f = _ds203(_example(pin=False, swap=128 * 2**30), tmp_path)
    assert "page-locked" not in f.message and "pin_memory" not in f.fix


def test_zero2_pins_master_weights_and_gradients(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=0, stage=2, ds="0.15.4"), tmp_path)
    # 8 bytes (fp32 master weights + fp32 gradients) x 6,738,415,616 parameters
    assert "At least 50.21 GiB per node" in f.message


def test_zero2_before_0_15_pins_the_gradients_only(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=0, stage=2, ds="0.14.0"), tmp_path)
    assert "At least 25.10 GiB per node" in f.message and "master weights" not in f.message


def test_zero2_from_0_18_3_pins_master_weights_only_with_the_key(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=0, stage=2, ds="0.18.3"), tmp_path)
    assert "At least 62.76 GiB per node" in f.message and "whatever" not in f.message


def test_zero2_pins_a_16bit_copy_too_from_0_17(tmp_path: Path) -> None:
    f = _ds203(_example(pin=True, swap=0, stage=2, ds="0.17.0"), tmp_path)
    # 10 bytes: DeepSpeed 0.17 also pins temp_buffer_bit16 (stage_1_and_2.py)
    assert "At least 62.76 GiB per node" in f.message and "16-bit copy" in f.message


def test_param_pin_memory_alone_is_no_switch(tmp_path: Path) -> None:
    ex = _example(pin=False, swap=128 * 2**30)
    ex["config"]["zero_optimization"]["offload_param"]["pin_memory"] = True
    f = _ds203(ex, tmp_path)
    assert "pin_memory" not in f.fix


KILL = ("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
        "'-u', 'main.py', '--local_rank=0', '--deepspeed'] exits with return code = -9\n")


def test_ds106_offers_pin_memory_false_only_with_swap(tmp_path: Path) -> None:
    ex = _example(pin=True, swap=32 * 2**30) | {"log": KILL}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    f = [f for f in run_example(ex, tmp_path / "a") if f.rule == "DS106"][0]
    assert "page-locked" in f.message and "pin_memory to false" in f.fix
    ex = _example(pin=True, swap=0) | {"log": KILL}
    f = [f for f in run_example(ex, tmp_path / "b") if f.rule == "DS106"][0]
    assert "page-locked" in f.message and "pin_memory" not in f.fix


def test_pinned_by_default_from_0_19_5(tmp_path: Path) -> None:
    ex = _example(pin=True, swap=128 * 2**30, ds="0.19.5")
    for part in ("offload_optimizer", "offload_param"):
        del ex["config"]["zero_optimization"][part]["pin_memory"]
    f = _ds203(ex, tmp_path)
    # DeepSpeed 0.19.5's offload_config.py: pin_memory: bool = True
    assert "defaults zero_optimization.offload_optimizer.pin_memory to true" in f.message
    assert f.fix.startswith("set zero_optimization.offload_optimizer.pin_memory to false")
