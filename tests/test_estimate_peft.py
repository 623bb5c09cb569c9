"""LoRA/QLoRA per-GPU memory (facts/estimate.py) against the figures PEFT prints and the PEFT
guides measured (issue 9: S108, S128, S134). The estimate is a floor: it must stay under what the
guides measured on real GPUs, and not so far under that it says nothing."""

from __future__ import annotations

import pytest

from dsdoctor.facts.estimate import activation_memory, lora_llama_params, peft_states

GB = 10**9
# Llama-2-70b-hf config.json values; 68,976,648,192 is dsdoctor's parameter count of that config
# (facts/modelinfo.py, the figure DS228 and DS211 quote for it).
L70 = dict(hidden=8192, intermediate=28672, heads=64, kv_heads=8, layers=80)
L70_PARAMS = 68_976_648_192
L70_VOCAB = 32000


def test_lora_7b_q_v_is_what_peft_prints() -> None:
    # PEFT's print_trainable_parameters for Llama-2-7b-hf with LoraConfig(r=8) on q_proj/v_proj,
    # as many public notebooks show it: "trainable params: 4,194,304 || all params: 6,742,609,920"
    assert lora_llama_params(4096, 11008, 32, 32, 32, 8, "q_proj,v_proj") == 4_194_304


def test_all_linear_adapts_every_projection() -> None:
    per_layer = 8 * (2 * (8192 + 8192) + 2 * (8192 + 1024) + 3 * (8192 + 28672))
    assert lora_llama_params(**L70, rank=8, targets="all-linear") == 80 * per_layer


def _floor(gpus: int, micro: int, four_bit: bool) -> int:
    trainable = lora_llama_params(**L70, rank=8, targets="all-linear")
    states = peft_states(L70_PARAMS, trainable, gpus, four_bit, sharded=True)
    act = activation_memory(8192, 80, 64, 2048, micro, L70_VOCAB).total(checkpointing=True)
    return states.total + act


@pytest.mark.parametrize("gpus,micro,four_bit,measured", [
    (8, 8, False, 64 * GB),  # PEFT DeepSpeed guide: LoRA + ZeRO-3, 8xH100, 64 GB per GPU
    (8, 8, False, 72 * GB),  # PEFT FSDP guide: LoRA + FSDP, 8xH100, 72-80 GB per GPU
    (2, 2, True, int(36.6 * GB)),  # PEFT DeepSpeed guide: QLoRA + ZeRO-3 on 2 GPUs, 36.6 GB
])
def test_floor_is_under_the_guides_measurement(gpus: int, micro: int, four_bit: bool,
                                               measured: int) -> None:
    floor = _floor(gpus, micro, four_bit)
    assert 0.5 * measured < floor < measured


def test_4bit_base_is_a_quarter_and_zero2_keeps_it_whole() -> None:
    lora = peft_states(L70_PARAMS, 0, 8, four_bit=False, sharded=True)
    qlora = peft_states(L70_PARAMS, 0, 8, four_bit=True, sharded=True)
    whole = peft_states(L70_PARAMS, 0, 8, four_bit=False, sharded=False)
    assert 0.25 < qlora.base_bytes / lora.base_bytes < 0.28
    assert abs(whole.base_bytes - 8 * lora.base_bytes) < 8  # int() truncation per GPU
    with pytest.raises(ValueError):
        peft_states(0, 0, 1, False, True)
