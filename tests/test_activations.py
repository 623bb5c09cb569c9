"""Pre-flight activation memory (diagnose/checks/activations.py + DS211) from a launch script."""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.diagnose import engine
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import ScanResult

LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "float16"}
A100_40 = {"name": "NVIDIA A100-SXM4-40GB", "memory_total_bytes": 42949672960,
           "compute_capability": "8.0"}


def _analyze(tmp: Path, launch: str) -> list:
    (tmp / "ds.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
         "zero_optimization": {"stage": 3}}))
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text(json.dumps(LLAMA_7B))
    (tmp / "env.json").write_text(json.dumps(
        {"cpu": {"count": 96, "ram_total_bytes": 2**40}, "gpus": [A100_40] * 8,
         "packages": {"deepspeed": "0.14.4"}}))
    (tmp / "run.sh").write_text("#!/bin/bash\n" + launch + "\n")
    inputs = AnalysisInputs.of(configs=[str(tmp / "ds.json")], model=str(tmp / "model"),
                               env=str(tmp / "env.json"), scripts=[str(tmp / "run.sh")])
    return [f for f in engine.evaluate(build_context(inputs, ScanResult()), strict=True)
            if f.rule == "DS211"]


def test_sequence_and_batch_from_the_launch_script_ask_for_checkpointing(tmp_path: Path) -> None:
    found = _analyze(tmp_path, "deepspeed --num_gpus 8 train.py --deepspeed ds.json --bf16 "
                     "--per_device_train_batch_size 8 --max_seq_length 4096 "
                     "--gradient_checkpointing False")
    assert len(found) == 1
    f = found[0]
    assert "--max_seq_length at " in f.message and "run.sh:2" in f.message
    assert "micro batch 8 x sequence 4096" in f.message
    assert f.fix.startswith("turn on gradient checkpointing")


def test_the_same_run_with_checkpointing_fits(tmp_path: Path) -> None:
    assert not _analyze(tmp_path, "deepspeed --num_gpus 8 train.py --deepspeed ds.json --bf16 "
                        "--per_device_train_batch_size 8 --max_seq_length 4096 "
                        "--gradient_checkpointing True")


def test_no_sequence_length_no_activation_figure(tmp_path: Path) -> None:
    assert not _analyze(tmp_path, "deepspeed --num_gpus 8 train.py --deepspeed ds.json --bf16 "
                        "--per_device_train_batch_size 8 --gradient_checkpointing False")
