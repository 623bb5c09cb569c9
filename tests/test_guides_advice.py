"""The guides' advice as the checks give it (issue 9): the exact numbers and fixes a user reads."""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.diagnose import engine
from dsdoctor.diagnose.fixout import apply_changes
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.scan import ScanResult, scan_files

LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "torch_dtype": "float16", "vocab_size": 32000}


def _findings(tmp: Path, *, log: str | None = None, config: dict | None = None,
              scripts: dict[str, str] | None = None, model: dict | None = None,
              env: dict | None = None, world_size: int | None = None) -> list:
    logs, configs, paths = [], [], []
    if log is not None:
        (tmp / "train.log").write_text(log, encoding="utf-8")
        logs.append(str(tmp / "train.log"))
    if config is not None:
        (tmp / "ds.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        configs.append(str(tmp / "ds.json"))
    for name, text in (scripts or {}).items():
        (tmp / name).write_text(text, encoding="utf-8")
        paths.append(str(tmp / name))
    mdir = None
    if model is not None:
        (tmp / "model").mkdir()
        (tmp / "model" / "config.json").write_text(json.dumps(model), encoding="utf-8")
        mdir = str(tmp / "model")
    env_path = None
    if env is not None:
        (tmp / "env.json").write_text(json.dumps(env), encoding="utf-8")
        env_path = str(tmp / "env.json")
    inputs = AnalysisInputs.of(logs=logs, configs=configs, scripts=paths, model=mdir, env=env_path,
                               world_size=world_size)
    return list(engine.evaluate(build_context(inputs, scan_files(logs) if logs else ScanResult()),
                                strict=True))


def _one(findings: list, code: str):
    mine = [f for f in findings if f.rule == code]
    assert len(mine) == 1, [(f.rule, f.message) for f in findings]
    return mine[0]


def test_port_from_the_notebook_cell_not_29500(tmp_path: Path) -> None:
    f = _one(_findings(tmp_path, log="socket.error: [Errno 98] Address already in use\n",
                       scripts={"nb.py": 'import os\nos.environ["MASTER_PORT"] = "9994"\n'}),
             "DS112")
    assert "port 9994" in f.message and "29500" not in f.message
    assert "lsof -i :9994" in f.fix and '"9995"' in f.fix


def test_port_from_the_launch_command(tmp_path: Path) -> None:
    f = _one(_findings(tmp_path, log=(
        "deepspeed --master_port 12345 src/train_biencoder.py --deepspeed ds_config.json\n"
        "socket.error: [Errno 98] Address already in use\n")), "DS112")
    assert "port 12345" in f.message and "--master_port 12346" in f.fix


def test_zero_to_fp32_in_a_shell_script_gets_the_conversion_figure(tmp_path: Path) -> None:
    f = _one(_findings(tmp_path, log="Killed\n",
                       scripts={"convert.sh": "#!/bin/bash\npython zero_to_fp32.py . pytorch_model.bin\n"},
                       model=LLAMA_7B,
                       env={"cpu": {"count": 16, "ram_total_bytes": 64 * 2**30}, "gpus": []}),
             "DS106")
    assert "convert.sh:2" in f.message and "about 50.21 GiB" in f.message
    assert "64.00 GiB; other processes held the rest" in f.message
    assert "TrainingArguments" not in f.fix  # start-up advice does not apply to a conversion


def test_nested_aio_is_moved_to_the_top_level_by_fix_out(tmp_path: Path) -> None:
    aio = {"block_size": 262144, "queue_depth": 32, "thread_count": 1}
    cfg = {"zero_optimization": {"stage": 3, "aio": aio}, "train_micro_batch_size_per_gpu": 1}
    f = _one(_findings(tmp_path, config=cfg), "DS303")
    fixed, done = apply_changes(cfg, [f.fix_change])
    assert fixed == {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1,
                     "aio": aio}
    assert done == ["renamed zero_optimization.aio -> aio"]


def test_offload_not_needed_names_both_devices_and_the_share(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
    gpu = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 80 * 2**30,
           "compute_capability": "8.0"}
    f = _one(_findings(tmp_path, config=cfg, model=LLAMA_7B, world_size=8,
                       env={"cpu": {"count": 96, "ram_total_bytes": 2**40}, "gpus": [gpu] * 8}),
             "DS212")
    # ZeRO-3 without offload on 8 GPUs: 4 x largest layer + 18 x 6.74e9 / 8 bytes
    assert "14.6" in f.message and "of the 80.00 GiB GPU" in f.message
    assert "offload_param.device and zero_optimization.offload_optimizer.device" in f.fix


def test_preflight_stays_quiet_when_the_log_shows_the_run(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    found = _findings(tmp_path, config=cfg, log="[2023-04-24 13:26:47,824] [INFO] hello\n")
    assert not [f for f in found if f.rule in ("DS211", "DS212")]
