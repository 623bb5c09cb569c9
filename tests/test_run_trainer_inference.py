"""A launch command alone as Trainer evidence (issue 9: S119/S120/S13): inferred, never stated,
and never over what the script or the log say. Commands are the PEFT DeepSpeed guide's
run_peft_deepspeed.sh (first lines) and Transformers' run_clm_no_trainer.py usage."""

from __future__ import annotations

from pathlib import Path

from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs

PEFT_RUN_SH = """#!/bin/bash
accelerate launch --config_file "configs/deepspeed_config.yaml"  train.py \\
--seed 100 \\
--model_name_or_path "meta-llama/Llama-2-70b-hf" \\
--logging_steps 5 \\
--log_level "info" \\
--evaluation_strategy "epoch" \\
--bf16 True \\
--max_grad_norm 1.0 \\
--gradient_accumulation_steps 4
"""
NO_TRAINER_SH = """#!/bin/bash
accelerate launch run_clm_no_trainer.py --model_name_or_path gpt2 --per_device_train_batch_size 8 \\
  --gradient_accumulation_steps 4 --learning_rate 5e-5 --output_dir out --with_tracking
"""
OWN_LOOP_PY = """from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer = accelerator.prepare(model, optimizer)
"""


def _run(tmp_path: Path, **files: str):
    paths = []
    for name, text in files.items():
        path = tmp_path / name.replace("_", ".", 1)
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return build_context(AnalysisInputs.of(scripts=paths)).run


def test_trainer_options_on_an_accelerate_launch_infer_the_trainer(tmp_path: Path) -> None:
    known = _run(tmp_path, run_sh=PEFT_RUN_SH).uses_trainer
    assert known is not None and known.value is True
    assert known.confidence == "inferred" and known.source.kind == "launch"
    assert known.source.location == f"{tmp_path / 'run.sh'}:2"
    assert "--bf16" in known.source.detail


def test_a_no_trainer_launch_says_nothing(tmp_path: Path) -> None:
    assert _run(tmp_path, run_sh=NO_TRAINER_SH).uses_trainer is None


def test_the_script_outranks_the_launch(tmp_path: Path) -> None:
    known = _run(tmp_path, run_sh=PEFT_RUN_SH, train_py=OWN_LOOP_PY).uses_trainer
    assert known is not None and known.value is False and known.source.kind == "script"
