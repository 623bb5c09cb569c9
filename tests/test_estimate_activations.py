"""The activation estimate (facts/estimate.py): the paper's per-layer formula, checkpointing, logits."""

from __future__ import annotations

import pytest

from dsdoctor.facts.estimate import activation_memory


def test_per_layer_matches_the_papers_formula() -> None:
    # GPT-3 175B row of Korthikanti et al. table: s=2048, b=1, h=12288, a=96:
    # s*b*h*(34 + 5*a*s/h) bytes per layer = 2048*12288*(34 + 80) = 2,868,903,936 bytes.
    act = activation_memory(hidden=12288, layers=96, heads=96, seq=2048, micro_batch=1, vocab=None)
    assert act.per_layer_bytes + act.scores_per_layer_bytes == 2048 * 12288 * (34 + 5 * 96 * 2048 // 12288)
    assert act.per_layer_bytes + act.scores_per_layer_bytes == 2_868_903_936


def test_checkpointing_keeps_one_input_per_layer_and_one_layer() -> None:
    act = activation_memory(hidden=4096, layers=32, heads=32, seq=4096, micro_batch=2, vocab=32000)
    sbh = 4096 * 2 * 4096
    assert act.total(checkpointing=False) == 32 * 34 * sbh + 6 * 4096 * 2 * 32000
    assert act.total(checkpointing=True) == 32 * 2 * sbh + 34 * sbh + 6 * 4096 * 2 * 32000
    assert act.total(checkpointing=True) < act.total(checkpointing=False) / 5
    assert act.total(False, eager_attention=True) > act.total(False)


def test_rejects_non_positive_sizes() -> None:
    with pytest.raises(ValueError):
        activation_memory(hidden=4096, layers=32, heads=32, seq=0, micro_batch=1, vocab=None)
