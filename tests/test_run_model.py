"""The run model (facts/run.py, run_build.py, run_sources.py, launch.py): one answer per question,
each with the file:line that states it, and the contradictions of issue 8 gone by construction.

Log lines are copied from real logs; each says where from.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsdoctor.diagnose import engine
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.facts.launch import command_lines, is_shell_script, parse_command, read_launch_script
from dsdoctor.facts.run import Known, Source, pick
from dsdoctor.logs.scan import scan_files

# ZeRO-3 OOM traceback: parameter_offload frames from dhcode-cpp/X-R1#14 ("A10 fails with OOM"),
# the coordinator frame from sample_logs/zero3_generate_hang/generate.log, the stage3.py frame and
# the OOM line from hiyouga/LlamaFactory#7532 (../shared/real_logs/gpu-oom__llamafactory-...).
ZERO3_OOM = """\
[rank0]:   File "/root/miniconda3/envs/open_r1/lib/python3.12/site-packages/deepspeed/runtime/zero/parameter_offload.py", line 463, in pre_sub_module_forward_function
[rank0]:     param_coordinator.fetch_sub_module(sub_module, forward=True)
[rank0]:   File "/opt/venv-ds/lib/python3.11/site-packages/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 344, in fetch_sub_module
  File "/root/anaconda3/envs/llama-factory/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 947, in _optimizer_step
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 has a total capacity of 79.32 GiB of which 2.40 GiB is free. Process 105400 has 76.92 GiB memory in use. Of the allocated memory 73.28 GiB is allocated by PyTorch, and 1.59 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""
# The runner's cmd line, from huggingface/accelerate#351.
RUNNER_CMD = ("[2022-05-09 04:41:16,315] [INFO] [runner.py:453:main] cmd = /home/toc/SDE/miniconda3/"
              "envs/trans/bin/python -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3Qi"
              "OiBbMCwgMV19 --master_addr=127.0.0.1 --master_port=29500 --no_local_rank "
              "run_mlm_no_trainer.py --model_name_or_path roberta-base --dataset_name wikitext "
              "--dataset_config_name wikitext-2-raw-v1 --per_device_train_batch_size 8 "
              "--per_device_eval_batch_size 8 --output_dir /tmp/test-mlm\n")
# A pasted deepspeed command, from huggingface/transformers#25810.
USER_CMD = ("deepspeed --master_port 39500 --num_gpus=8 ./code/run_summarization.py "
            "--model_name_or_path ./model --do_train --do_eval --per_device_train_batch_size=1 "
            "--per_device_eval_batch_size=1 --gradient_accumulation_steps=8 --learning_rate 3e-4 "
            "--deepspeed ./code/configs/dsconfig_zero2.json\n")
# PEFT's print_trainable_parameters (Llama-2-7b LoRA r=8), as in logs/formats/facts.yaml.
PEFT_LINE = "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.06220594176090199\n"
# DeepSpeed-Chat's launch script (deepspeedai/DeepSpeedExamples, applications/DeepSpeed-Chat/
# training/step1_supervised_finetuning/training_scripts/llama2/run_llama2_7b_lora.sh), shortened.
DSCHAT_SH = """\
#!/bin/bash
# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team
OUTPUT=$1
ZERO_STAGE=$2
if [ "$OUTPUT" == "" ]; then
    OUTPUT=./output_step1_llama2_7b_lora
fi
if [ "$ZERO_STAGE" == "" ]; then
    ZERO_STAGE=3
fi
mkdir -p $OUTPUT

CUDA_VISIBLE_DEVICES=0 deepspeed --master_port=29600 main.py \\
    --dtype bf16 \\
    --model_name_or_path meta-llama/Llama-2-7b-hf \\
    --per_device_train_batch_size 4 \\
    --per_device_eval_batch_size 4 \\
    --gradient_accumulation_steps 1 \\
    --gradient_checkpointing \\
    --zero_stage $ZERO_STAGE \\
    --deepspeed \\
    --output_dir $OUTPUT \\
   &> $OUTPUT/training.log
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _ctx(logs=(), configs=(), scripts=(), model=None):
    return build_context(AnalysisInputs.of(logs=logs, configs=configs, scripts=scripts, model=model),
                         scan_files(list(logs), engine="python") if logs else None)


# --------------------------------------------------------------------------- contradictions

def test_zero3_frames_give_stage_3_without_a_config(tmp_path):
    log = _write(tmp_path, "oom.log", ZERO3_OOM)
    run = _ctx([log]).run
    assert run.zero_stage is not None and run.zero_stage.value == 3
    assert run.zero_stage.source.kind == "log-frames" and run.zero_stage.confidence == "inferred"
    assert run.zero_stage.source.location == f"{log}:1"  # the first ZeRO-3 frame
    assert "parameter_offload.py:463" in run.zero_stage.source.detail


def test_stage_1_and_2_frames_fit_a_stage_1_config(tmp_path):
    # sample_logs/ds0154_fp16_loss_scale_collapse/train.log
    log = _write(tmp_path, "t.log", '[rank0]:   File "/tmp/venv-ds-015/lib/python3.11/site-packages/'
                 'deepspeed/runtime/zero/stage_1_and_2.py", line 1830, in step\n')
    cfg = _write(tmp_path, "ds.json", json.dumps({"zero_optimization": {"stage": 1}}, indent=2))
    run = _ctx([log], [cfg]).run
    assert run.zero_stage.value == 1 and run.conflicts == ()
    assert _ctx([log]).run.zero_stage.value == 2  # alone: "stage 1 or 2", inferred
    assert "stage 1 or 2" in _ctx([log]).run.zero_stage.source.detail


def test_bitsandbytes_4bit_in_a_script_is_qlora(tmp_path):
    # the loading call of the Transformers bitsandbytes docs
    script = _write(tmp_path, "train.py", "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
                    "quantization_config = BitsAndBytesConfig(load_in_4bit=True)\n"
                    "model = AutoModelForCausalLM.from_pretrained('m', quantization_config=quantization_config)\n")
    run = _ctx(scripts=[script]).run
    assert run.qlora is not None and run.qlora.value is True
    assert run.qlora.source.location == f"{script}:2"


def test_quantization_config_in_the_model_is_qlora(tmp_path):
    mdir = tmp_path / "model"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
        "intermediate_size": 128, "num_attention_heads": 4,
        "quantization_config": {"load_in_4bit": True, "quant_method": "bitsandbytes"}}))
    assert _ctx(model=str(mdir)).run.qlora.value is True
    (mdir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert _ctx(model=str(mdir)).run.qlora is None  # rewritten on disk: read again, no longer 4-bit


def test_runner_cmd_line_gives_trainer_arguments_and_world_size_with_their_line(tmp_path):
    log = _write(tmp_path, "train.log", "start\n" + RUNNER_CMD)
    run = _ctx([log]).run
    assert run.micro_batch.value == 8 and run.micro_batch.source.kind == "trainer-args"
    assert run.micro_batch.source.location == f"{log}:2"
    # --world_info=<base64 {"localhost": [0, 1]}>: two ranks on one node
    assert (run.world_size.value, run.nodes.value) == (2, 1)
    assert run.launcher.value == "deepspeed"


def test_pasted_launch_gives_batch_accumulation_world_and_train_batch(tmp_path):
    log = _write(tmp_path, "issue.log", USER_CMD)
    run = _ctx([log]).run
    assert (run.micro_batch.value, run.grad_accum.value, run.world_size.value) == (1, 8, 8)
    assert run.grad_accum.source.location == f"{log}:1"
    assert run.world_size.source.detail.startswith("--num_gpus")
    assert run.ds_config_path.value == "./code/configs/dsconfig_zero2.json"
    # micro x accum x world, inferred because no source states the train batch
    assert run.train_batch.value == 64 and run.train_batch.confidence == "inferred"


def test_peft_line_gives_peft_and_parameter_counts(tmp_path):
    log = _write(tmp_path, "peft.log", "loading\n" + PEFT_LINE)
    run = _ctx([log]).run
    assert run.peft.value is True and run.peft.source.location == f"{log}:2"
    assert (run.trainable_params.value, run.model_params.value) == (4194304, 6742609920)


def test_config_stage_2_with_stage3_frames_is_a_conflict_and_ds321(tmp_path):
    log = _write(tmp_path, "oom.log", ZERO3_OOM)
    cfg = _write(tmp_path, "ds_config.json", json.dumps(
        {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}, indent=2))
    ctx = _ctx([log], [cfg])
    (c,) = [c for c in ctx.run.conflicts if c.fact == "zero_stage"]
    assert (c.kept.value, c.kept.source.kind) == (3, "log-frames")
    assert (c.other.value, c.other.source.location) == (2, f"{cfg}:4")
    findings = [f for f in engine.evaluate(ctx) if f.rule == "DS321"]
    assert len(findings) == 1
    f = findings[0]
    assert f.severity == "warning" and (f.config_file, f.config_line) == (cfg, 4)
    assert "ZeRO-3 code" in f.message and f"{cfg}:4 says stage 2" in f.message
    assert [e.line for e in f.evidence] == [1]


def test_auto_precision_is_never_compared(tmp_path):
    # fused_optimizer frame from deepspeedai/DeepSpeedExamples#323 (fp16 optimizer)
    log = _write(tmp_path, "t.log", '  File "/home/kemove/anaconda3/envs/deepspeed/lib/python3.8/'
                 'site-packages/deepspeed/runtime/fp16/fused_optimizer.py", line 353, in backward\n')
    auto = _write(tmp_path, "auto.json", json.dumps({"fp16": {"enabled": "auto"},
                                                     "bf16": {"enabled": "auto"}}))
    assert _ctx([log], [auto]).run.conflicts == ()
    bf16 = _write(tmp_path, "bf16.json", json.dumps({"bf16": {"enabled": True}}))
    assert [c.fact for c in _ctx([log], [bf16]).run.conflicts] == ["precision"]


def test_printed_config_keeps_its_log_line(tmp_path):
    # DeepSpeed 0.19.8 run, as in rules/DS320 (print_user_config)
    log = _write(tmp_path, "t.log", """\
[2026-11-21 11:48:50,655] [INFO] [config.py:664:print_user_config]   json = {
    "train_micro_batch_size_per_gpu": 2, 
    "gradient_accumulation_steps": 4, 
    "bf16": {
        "enabled": true
    }, 
    "log_level": "info"
}
""")
    run = _ctx([log]).run
    assert run.micro_batch.source.kind == "log-config"
    assert run.micro_batch.source.location == f"{log}:1"
    assert run.precision.value == "bf16"


# --------------------------------------------------------------------------- shell launch scripts

def test_shell_launch_script_is_read_not_run(tmp_path):
    sh = _write(tmp_path, "run_llama2_7b_lora.sh", DSCHAT_SH)
    ctx = _ctx(scripts=[sh])
    assert ctx.scripts == [] and len(ctx.launch_scripts) == 1
    (la,) = ctx.launch_scripts
    assert (la.launcher, la.line, la.script) == ("deepspeed", 16, "main.py")
    assert la.script_options["zero_stage"] == "$ZERO_STAGE"  # variables stay as written
    assert la.script_options["output_dir"] == "$OUTPUT"  # the redirection is not an argument
    run = ctx.run
    assert run.micro_batch.value == 4 and run.micro_batch.source.location == f"{sh}:16"
    assert run.gradient_checkpointing.value is True
    assert run.zero_stage is None  # $ZERO_STAGE is not a number: nothing guessed


def test_shell_script_through_the_cli_is_analyzed(tmp_path, capsys):
    from dsdoctor.cli.main import main

    sh = _write(tmp_path, "run.sh", DSCHAT_SH)
    code = main(["analyze", "--script", sh, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert out["inputs"]["run"]["micro_batch"]["source"]["line"] == 16


def test_which_scripts_are_shell():
    assert is_shell_script("run.sh", "python train.py\n")
    assert is_shell_script("launch", "#!/usr/bin/env bash\ntorchrun --nproc_per_node 2 t.py\n")
    assert is_shell_script("job", "deepspeed --num_gpus 2 train.py --deepspeed ds.json\n")
    assert not is_shell_script("train.py", "deepspeed --num_gpus 2 train.py\n")
    assert not is_shell_script("train", "import deepspeed\nprint('deepspeed ok')\n")


def test_launchers_world_size():
    def world(cmd: str) -> tuple[int | None, int | None]:
        la = parse_command(cmd, "x", 1)
        assert la is not None
        return la.world_size, la.nodes

    # karpathy/nanoGPT README
    assert world("torchrun --standalone --nproc_per_node=4 train.py config/train_gpt2.py") == (4, 1)
    assert world("deepspeed --include localhost:0,1,2 a.py") == (3, 1)
    assert world("deepspeed --hostfile hosts --num_gpus 8 a.py") == (None, None)  # nodes unknown
    assert world("deepspeed --num_nodes 2 --num_gpus 8 a.py") == (16, 2)
    assert world("accelerate launch --num_processes 4 --num_machines 2 t.py") == (4, 2)
    assert world("torchrun --nnodes 1:4 --nproc_per_node 8 t.py") == (None, None)  # elastic
    assert parse_command("echo deepspeed is great", "x", 1) is None


def test_continuations_are_joined():
    lines = command_lines("# c\nA=1\ndeepspeed \\\n  --num_gpus 2 \\\n  t.py\n\nls\n")
    assert lines == [(2, "A=1"), (3, "deepspeed --num_gpus 2 t.py"), (7, "ls")]
    assert [la.line for la in read_launch_script("r.sh", "a && deepspeed t.py\n")] == [1]


# --------------------------------------------------------------------------- model values

def test_pick_prefers_the_run_and_records_the_disagreement():
    frames = Known(3, Source("log-frames", "t.log", 9, "stage3.py:947"), "inferred")
    config = Known(2, Source("config", "ds.json", 7, "zero_optimization.stage"))
    kept, conflicts = pick("zero_stage", [config, frames])
    assert kept is frames and [c.other for c in conflicts] == [config]
    assert pick("zero_stage", [config, Known(2, Source("launch"))])[1] == []


def test_run_model_is_in_the_json_report(tmp_path):
    log = _write(tmp_path, "oom.log", ZERO3_OOM)
    rep = run_analysis([log], engine="python")
    run = rep.inputs["run"]
    assert run["zero_stage"]["value"] == 3 and run["zero_stage"]["source"]["kind"] == "log-frames"
    assert run["conflicts"] == []


def test_training_arguments_in_a_script_give_batch_with_their_line(tmp_path):
    script = _write(tmp_path, "train.py", "from transformers import TrainingArguments\n"
                    "args = TrainingArguments(\n    output_dir='out',\n"
                    "    per_device_train_batch_size=8,\n    gradient_accumulation_steps=n,\n"
                    "    bf16=True,\n)\n")
    run = _ctx(scripts=[script]).run
    assert run.micro_batch.value == 8 and run.micro_batch.source.location == f"{script}:4"
    assert run.grad_accum is None  # not a literal: not guessed
    assert run.precision.value == "bf16" and run.precision.source.kind == "trainer-args"


def test_fsdp_frame_and_accelerate_config_give_fsdp(tmp_path):
    # rank-prefixed FSDP frame from a public log excerpt (see logs/formats/facts.yaml)
    log = _write(tmp_path, "t.log", '[rank4]:   File "/home/jobuser/.local/lib/python3.10/'
                 'site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py", line 863, '
                 'in forward\n')
    run = _ctx([log]).run
    assert run.fsdp.value is True and run.fsdp.source.kind == "log-frames"
    acc = _write(tmp_path, "acc.yaml", "compute_environment: LOCAL_MACHINE\n"
                 "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\n")
    run = _ctx(configs=[acc]).run
    assert run.fsdp.value is True and run.fsdp.source.location == f"{acc}:2"
    assert run.world_size.value == 2 and run.world_size.source.location == f"{acc}:4"


def test_shell_launch_commands_reach_the_report_redacted(tmp_path):
    sh = _write(tmp_path, "run.sh", "deepspeed --num_gpus 2 train.py --deepspeed ds.json \\\n"
                "  --hub_token hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    rep = run_analysis(scripts=[sh], engine="python")
    (la,) = rep.inputs["launch_scripts"]
    assert (la["line"], la["launcher"]) == (1, "deepspeed")
    assert la["command"].startswith("deepspeed --num_gpus 2 train.py --deepspeed ds.json")
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in json.dumps(rep.inputs)


def test_a_binary_shell_script_is_one_line_and_exit_2(tmp_path, capsys):
    from dsdoctor.cli.main import main

    sh = tmp_path / "run.sh"
    sh.write_bytes(b"#!/bin/bash\n\x00\x01\x02ELF")
    assert main(["analyze", "--script", str(sh)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "binary file" in err[0] and "Traceback" not in err[0]


def test_zero_optimizer_banner_states_stage_and_precision(tmp_path):
    # sample_logs/cpu_offload_oom_killed/train.log lines 41-42: ZeRO-3 prints a "fp16" line too
    log = _write(tmp_path, "t.log", """\
[2026-11-21 12:08:43,845] [INFO] [logging.py:123:log_dist] [Rank 0] Creating fp16 ZeRO stage 3 optimizer
[2026-11-21 12:08:43,845] [INFO] [logging.py:123:log_dist] [Rank 0] Creating torch.bfloat16 ZeRO stage 3 optimizer
""")
    run = _ctx([log]).run
    assert (run.zero_stage.value, run.zero_stage.source.kind) == (3, "log-banner")
    assert run.precision.value == "bf16" and run.precision.source.location == f"{log}:2"


def test_logger_module_names_the_zero_code(tmp_path):
    # tests/data/real_logs_extra/fp16-overflow__gptneo7-stage3-overflow-clean-up-deepscale.log
    line = Path(__file__).parent / "data" / "real_logs_extra" / \
        "fp16-overflow__gptneo7-stage3-overflow-clean-up-deepscale.log"
    run = _ctx([str(line)]).run
    assert run.zero_stage.value == 3 and run.zero_stage.source.kind == "log-frames"
    assert run.zero_stage.source.detail.startswith("stage3.py:2323")


def test_accelerate_failed_command_is_a_launch(tmp_path):
    # bmaltais/kohya_ss#208: accelerate's simple_launcher, argument list shortened (not changed)
    log = _write(tmp_path, "t.log", "subprocess.CalledProcessError: Command '['C:\\\\Users\\\\"
                 "ameli\\\\OneDrive\\\\Desktop\\\\kohya\\\\kohya_ss\\\\venv\\\\Scripts\\\\"
                 "python.exe', 'train_network.py', '--train_batch_size=2', "
                 "'--max_train_steps=1500', '--mixed_precision=bf16']' returned non-zero exit "
                 "status 1.\n")
    run = _ctx([log]).run
    assert run.launcher.value == "python" and run.launcher.source.location == f"{log}:1"
    assert run.micro_batch is None  # kohya's --train_batch_size is not a Trainer argument
