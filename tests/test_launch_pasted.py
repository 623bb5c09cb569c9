"""Launch commands pasted over several lines (issue 23): the script, the launcher options, the
``--deepspeed`` path and the rank count come out of a command continued with ``\\``, also when the
script is named only on a continuation line or the first line is a bare ``torchrun \\``.

The pastes are real (each cites its thread); the prompt, CRLF and bare-launcher variants are
written here on the formats of those pastes and of the prompt in HuangLK/transpeeder#32.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.facts.context import build_context
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.facts.launch import parse_command
from dsdoctor.logs.formats import MAX_JOIN_CONTINUED, join_continued
from dsdoctor.logs.scan import scan_files

# https://github.com/hiyouga/LlamaFactory/issues/3301 - the whole paste, as posted (its
# "--hostfile hostfile \ " line has a blank after the backslash; its last line has none).
LLAMAFACTORY_3301 = """\
`deepspeed --num_nodes 2 \\
    --num_gpus 8 \\
    --master_addr localhost \\
    --hostfile hostfile \\ 
    src/train_bash.py \\
    --deepspeed examples/deepspeed/ds_z3_config.json \\
    --stage sft \\
    --create_new_adapter \\
    --do_train True \\
    --model_name_or_path ../../models/Mixtral-8x7B-v0.1 \\
    --finetuning_type lora \\
    --template mistral \\
    --dataset_dir data \\
    --dataset alpaca_zh,alpaca_gpt4_zh \\
    --cutoff_len 1024 \\
    --learning_rate 5e-05 \\
    --num_train_epochs 3.0 \\
    --max_samples 100000 \\
    --per_device_train_batch_size 4 \\
    --gradient_accumulation_steps 8 \\
    --lr_scheduler_type cosine \\
    --max_grad_norm 1.0 \\
    --logging_steps 5 \\
    --save_steps 100 \\
    --warmup_steps 0 \\
    --optim adamw_torch \\
    --report_to none \\
    --output_dir saves/Mixtral-8x7B/lora/train_2024-04-16 \\
    --fp16 True \\
    --lora_rank 8 \\
    --lora_alpha 16 \\
    --lora_dropout 0.1 \\
    --lora_target q_proj,v_proj \\
    --plot_loss True 
`
"""

# https://github.com/pytorch/pytorch/issues/91278 - a bare "torchrun \" in a quoted block; the
# paste's last option still ends in a backslash, then a blank line: the command was cut.
PYTORCH_91278 = """\
> torchrun \\
    --standalone \\
    --nnodes=1 \\
    --nproc_per_node=${NUM_GPU} \\
    run_clm.py \\
    --model_name_or_path ${MODEL} \\
    --dataset_name ${DS_NAME} \\
    --preprocessing_num_workers 16 \\
    --logging_steps 5000 \\
    --save_steps ${SAVE_STEPS} \\
    --do_eval \\
    --per_device_eval_batch_size ${EVAL_BATCH} \\
    --seed ${RANDOM} \\
    --evaluation_strategy steps \\
    --logging_dir ${OUTPUT_DIR} \\
    --output_dir ${OUTPUT_DIR} \\
    --overwrite_output_dir \\
    --ddp_timeout 324000 \\

### And getting the follow error:
"""

# https://github.com/hiyouga/LlamaFactory/issues/3224 - "--mix_strategy interleave_over" lacks its
# backslash, so the shell (and dsdoctor) end the command there.
LLAMAFACTORY_3224 = """\
CUDA_VISIBLE_DEVICES=0,1,2,3 accelerate launch --config_file config/default.yaml src/train_bash.py \\
    --stage sft \\
    --do_train \\
    --per_device_train_batch_size 1 \\
    --gradient_accumulation_steps 2 \\
    --mix_strategy interleave_over
    --num_train_epochs 2.0 \\
    --bf16
"""


def _launch_cmds(tmp_path: Path, text: str, newline: str = "\n") -> list[tuple[str, int]]:
    log = tmp_path / "issue.log"
    log.write_bytes(text.replace("\n", newline).encode("utf-8"))
    scan = scan_files([str(log)], engine="python")
    return [(str(f.values["cmd"]), f.evidence.line) for f in scan.facts if f.name == "launch-cmd"]


def _run(tmp_path: Path, text: str):
    log = tmp_path / "issue.log"
    log.write_text(text, encoding="utf-8")
    inputs = AnalysisInputs.of(logs=[str(log)])
    return build_context(inputs, scan_files([str(log)], engine="python")).run, str(log)


def test_script_named_only_on_a_continuation_line_is_found(tmp_path: Path) -> None:
    ((cmd, line),) = _launch_cmds(tmp_path, LLAMAFACTORY_3301)
    assert line == 1
    assert cmd.startswith("deepspeed --num_nodes 2 --num_gpus 8 --master_addr localhost "
                          "--hostfile hostfile src/train_bash.py --deepspeed ")
    assert cmd.endswith("--lora_target q_proj,v_proj --plot_loss True")
    launch = parse_command(cmd, "issue.log", line)
    assert launch is not None and launch.script == "src/train_bash.py"
    assert launch.ds_config == "examples/deepspeed/ds_z3_config.json"
    assert launch.launcher_options["num_nodes"] == 2 and launch.launcher_options["num_gpus"] == 8
    assert (launch.world_size, launch.nodes) == (16, 2)
    assert launch.script_options["gradient_accumulation_steps"] == 8


def test_run_model_takes_the_joined_command(tmp_path: Path) -> None:
    run, log = _run(tmp_path, LLAMAFACTORY_3301)
    assert run.launcher is not None and run.launcher.value == "deepspeed"
    assert run.ds_config_path is not None
    assert run.ds_config_path.value == "examples/deepspeed/ds_z3_config.json"
    assert run.ds_config_path.source.location == f"{log}:1"
    assert (run.world_size.value, run.nodes.value) == (16, 2)
    assert (run.micro_batch.value, run.grad_accum.value) == (4, 8)


def test_bare_torchrun_line_cut_by_the_paste(tmp_path: Path) -> None:
    ((cmd, line),) = _launch_cmds(tmp_path, PYTORCH_91278)
    assert line == 1
    assert cmd.startswith("torchrun --standalone --nnodes=1 --nproc_per_node=${NUM_GPU} run_clm.py ")
    assert cmd.endswith("--overwrite_output_dir --ddp_timeout 324000")  # the blank line ends it
    assert "###" not in cmd
    launch = parse_command(cmd, "issue.log", line)
    assert launch is not None and launch.launcher == "torchrun" and launch.script == "run_clm.py"
    assert launch.world_size is None  # ${NUM_GPU}: not guessed


def test_command_ends_at_the_first_line_without_a_backslash(tmp_path: Path) -> None:
    ((cmd, _),) = _launch_cmds(tmp_path, LLAMAFACTORY_3224)
    assert cmd.endswith("--gradient_accumulation_steps 2 --mix_strategy interleave_over")
    assert "num_train_epochs" not in cmd
    launch = parse_command(cmd, "issue.log", 1)
    assert launch is not None and launch.launcher == "accelerate"
    assert launch.launcher_options["config_file"] == "config/default.yaml"
    assert launch.script == "src/train_bash.py"


@pytest.mark.parametrize("prompt", ["$ ", "(venv) alice@gpu01:~/proj$ ",
                                    "(gh_llama-deepspeed) amd00@asus00:~/llm_dev/llama-deepspeed$ "])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_prompt_prefix_and_crlf(tmp_path: Path, prompt: str, newline: str) -> None:
    text = (f"{prompt}deepspeed --num_gpus 8 \\\n    train.py \\\n    --deepspeed ds.json\n"
            "Traceback (most recent call last):\n")
    ((cmd, line),) = _launch_cmds(tmp_path, text, newline)
    assert (cmd, line) == ("deepspeed --num_gpus 8 train.py --deepspeed ds.json", 1)


@pytest.mark.parametrize("first,rest,launcher,world", [
    ("deepspeed \\", ["  --num_gpus 8 \\", "  train.py \\", "  --deepspeed ds.json"], "deepspeed", 8),
    ("torchrun \\", ["  --nproc_per_node 4 \\", "  train.py"], "torchrun", 4),
    ("accelerate launch \\", ["  --num_processes 2 \\", "  train.py \\", "  --bf16"], "accelerate", 2),
])
def test_bare_launcher_first_line(tmp_path: Path, first: str, rest: list[str], launcher: str,
                                  world: int) -> None:
    ((cmd, _),) = _launch_cmds(tmp_path, "\n".join([first, *rest]) + "\n")
    launch = parse_command(cmd, "issue.log", 1)
    assert launch is not None
    assert (launch.launcher, launch.script, launch.world_size) == (launcher, "train.py", world)


def test_bare_launcher_with_nothing_after_it_is_no_command(tmp_path: Path) -> None:
    assert _launch_cmds(tmp_path, "deepspeed \\\n\nfoo\n") == []


def test_joining_is_bounded() -> None:
    following = [f"  --opt{i} \\" for i in range(500)]
    joined = join_continued("deepspeed train.py \\", following, MAX_JOIN_CONTINUED)
    assert joined.count("--opt") == MAX_JOIN_CONTINUED
    # an escaped backslash ends no line continued
    assert join_continued("deepspeed train.py \\", ["  --a \\\\", "  --b"], 64) == \
        "deepspeed train.py --a \\\\"
