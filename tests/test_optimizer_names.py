"""DeepSpeed's optimizer/scheduler names per release (dsdoctor/diagnose/checks/optimizer.py)."""

from __future__ import annotations

from dsdoctor.diagnose.checks.optimizer import (
    DS_OPTIMIZERS,
    TORCH_OPTIMIZERS,
    closest,
    optimizer_known,
    scheduler_known,
)


def test_deepspeed_names_are_case_blind_torch_names_are_exact() -> None:
    assert optimizer_known("adamw", "0.14.4") and optimizer_known("AdamW", "0.19.8")
    assert optimizer_known("SGD", "0.19.8") and not optimizer_known("sgd", "0.19.8")
    assert scheduler_known("WarmupLR", "0.19.8") and not scheduler_known("warmuplr", "0.19.8")


def test_one_bit_optimizers_exist_up_to_0_19_6_only() -> None:
    assert optimizer_known("OneBitAdam", "0.14.4") and optimizer_known("OneBitLamb", "0.19.6")
    assert not optimizer_known("OneBitAdam", "0.19.7") and not optimizer_known("OneBitAdam", "0.19.8")


def test_the_closest_name_is_offered() -> None:
    names = DS_OPTIMIZERS + TORCH_OPTIMIZERS
    assert closest("AdamWW", names) == "AdamW"
    assert closest("Lamb2", names) == "Lamb"
    assert closest("Shampoo", names) is None
