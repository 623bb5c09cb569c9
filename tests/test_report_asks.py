"""dsdoctor report, what a maintainer asks next: the config as written or as printed, the whole
launch command (log and shell scripts), the first error intact, the run's state, triage, reports
without a log, several nodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.render.issue_asks import node_differences
from dsdoctor.render.issue_launch import read_shell_script
from dsdoctor.render.issue_log import first_error_excerpt
from tests.test_report import HF_EXC, HF_FRAMES, write_env, write_log

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
EXTRA = ROOT / "tests" / "data" / "real_logs_extra"
SHARED = ROOT.parent / "shared" / "real_logs"  # ../shared beside the clone, when present

# The SLURM batch script of deepspeedai/DeepSpeedExamples#893 as its reporter pasted it (the paste
# stops after --num_train_epochs; the closing quote of bash -c is added here).
SLURM_SCRIPT = """#!/bin/bash

#SBATCH --job-name=pretrain_7                     # name
#SBATCH --nodes=2                                     # nodes
#SBATCH -w server-gpu-[10,15] 
#SBATCH --ntasks-per-node=1                            # crucial - only 1 task per dist per node!
#SBATCH --cpus-per-task=80                              # number of cores per tasks
#SBATCH --gres=gpu:8                                   # number of gpus
#SBATCH --gpus-per-task=8  

srun --jobid $SLURM_JOBID bash -c '
    deepspeed --master_port 28727  \\
    --num_gpus 16 \\
    --num_nodes  2 \\
    --hostfile hostfile \\
    pre_train_ft_7b_ds.py \\
    --model_path="/demo/Llama2-7b-Instruct-hf/" \\
    --dataset_name="/demo/train.json" \\
    --seq_length 8192 \\
    --num_train_epochs 1
'
"""


def _report(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    out = tmp_path / "issue.md"
    if out.exists():
        out.unlink()
    rc = main(["report", *argv, "-o", str(out)])
    return rc, (out.read_text() if out.exists() else ""), str(out)


# ------------------------------------------------------------------------------ the config

def test_config_quoted_as_written_with_a_note_per_finding(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "ds_config.json"
    text = ('{\n  "train_micro_batch_size_per_gpu": 4,\n  "zero_optimization": {\n    "stage": 2,\n'
            '    "reduce_bucket_size": 2e8,\n    "stage": 3\n  },\n  "hub_token": "plainHubTokenValue9"\n}\n')
    cfg.write_text(text)
    rc, body, _ = _report(tmp_path, "--config", str(cfg), "--force")
    capsys.readouterr()
    assert rc == 0
    assert '"reduce_bucket_size": 2e8' in body and "200000000" not in body  # not re-serialized
    assert body.count('"stage":') == 2  # the duplicate key DS301 reports is still there
    assert "plainHubTokenValue9" not in body  # but secrets are not
    assert "Config `ds_config.json` (as written)" in body
    assert "- dsdoctor, line 6 `zero_optimization.stage`: DS301" in body
    assert "No log: the config was checked without running it." in body


def test_config_as_printed_by_the_run_when_no_file_is_given(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = SAMPLES / "fp16_overflow_warmup" / "train.log"
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert rc == 0
    lines = log.read_text().splitlines()
    start = next(i for i, t in enumerate(lines, 1) if "json = {" in t)
    assert f"DeepSpeed config as printed by the run (`train.log` line {start}; no config file given)" in body
    # the printed block, whole and as printed (DeepSpeed's own indentation)
    end = next(i for i in range(start, len(lines) + 1) if lines[i - 1] == "}")
    for t in lines[start:end]:
        assert t.rstrip() in body, t


def test_config_ask_names_the_launch_commands_config(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC)  # its cmd passes --deepspeed ds_config.json
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert "The config is not attached: run `dsdoctor report` again with `--config ds_config.json`" in body


# ------------------------------------------------------------------------------ the first error

def test_first_error_keeps_the_exit_code_of_a_long_launcher_line(tmp_path: Path) -> None:
    log = SAMPLES / "cpu_offload_oom_killed" / "train.log"
    ex = first_error_excerpt([str(log)])
    assert ex is not None
    line = next(t for t in log.read_text().splitlines() if "exits with return code = -9" in t)
    if len(line) > 400:
        assert ex.error.endswith("exits with return code = -9") or "return code = -9" in ex.error
    long = tmp_path / "long.log"
    argv = ", ".join(f"'--arg{i}', 'value{i}'" for i in range(60))
    long.write_text(f"[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] "
                    f"['/usr/bin/python3', '-u', 'main.py', '--local_rank=0', {argv}] exits with return code = -9\n")
    ex = first_error_excerpt([str(long)])
    assert ex.error.endswith("exits with return code = -9") and "[...]" in ex.error
    assert ex.error.startswith("[2023-04-14 13:11:27,885] [ERROR]")


def test_cut_traceback_asks_for_the_ranks_whole_log(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC, ranks=(3,), truncate=True)
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert "**The traceback is cut:** attach all of rank 3's log (`train.log`" in body


def test_stage_in_the_log_disagrees_with_the_config(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    frames = [("/home/alice/proj/train.py", 89, "worker", "engine.step()"),
              ("/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", 2093, "step",
               "self._optimizer_step(sub_group_id)")]
    log = write_log(tmp_path, frames=frames, exc="RuntimeError: CUDA error: an illegal memory access was encountered")
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}')
    rc, body, _ = _report(tmp_path, str(log), "--config", str(cfg), "--force")
    capsys.readouterr()
    assert "ZeRO stage in the log: ZeRO-3 code (`deepspeed/runtime/zero/stage3.py` in the traceback)" in body
    assert "the log comes from ZeRO-3 code but the config says stage 2 (`ds.json`): same run?" in body


# ------------------------------------------------------------------------------ triage

def test_triage_stops_before_filing_unless_forced(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    log = SAMPLES / "fp16_loss_scale_collapse" / "train.log"
    cfg = SAMPLES / "fp16_loss_scale_collapse" / "ds_config.json"
    rc, body, out = _report(tmp_path, str(log), "--config", str(cfg))
    err = capsys.readouterr().err
    assert rc == 1 and not Path(out).exists() and body == ""
    assert "configuration or environment problem with a fix (DS102" in err and "--force" in err
    assert "gh issue create" not in err
    rc, body, _ = _report(tmp_path, str(log), "--config", str(cfg), "--force")
    capsys.readouterr()
    assert rc == 0 and body.index("[!IMPORTANT]") < body.index("A training run")
    assert "**DS102** fp16 loss scale collapsed" in body


def test_no_triage_for_what_may_be_a_bug(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # NCCL watchdog timeout (DS107): a hang may be a bug; the issue is written without --force.
    rc, body, _ = _report(tmp_path, str(SAMPLES / "gpu_nccl_watchdog" /
                                         "hang__ds4781-zero3-checkpoint-watchdog-terminated-frames.log"))
    capsys.readouterr()
    assert rc == 0 and "[!IMPORTANT]" not in body


# ------------------------------------------------------------------------------ launch scripts

def test_shell_launch_script_is_read_not_rejected(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "run.sh"
    script.write_text(SLURM_SCRIPT)
    parsed = read_shell_script(str(script))
    assert [c.launcher for c in parsed.commands] == ["srun", "deepspeed"]
    ds = parsed.commands[1]
    assert ds.line == 12 and ds.text.startswith("deepspeed --master_port 28727 --num_gpus 16")
    assert ds.text.endswith('--seq_length 8192 --num_train_epochs 1')  # continuations joined
    assert '--model_path="/demo/Llama2-7b-Instruct-hf/"' in ds.text  # quotes as written
    assert "--nodes=2" in parsed.sbatch and "--job-name=pretrain_7" in parsed.sbatch
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC)
    rc, body, _ = _report(tmp_path, str(log), "--script", str(script), "--force")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "$SLURM_JOBID" in body  # variables left as written
    assert "Launch script (`run.sh` line 12):" in body
    assert "SLURM (`srun`) in a batch job (`#SBATCH --job-name=pretrain_7 --nodes=2" in body
    assert "→ the `deepspeed` launcher" in body


def test_report_reads_a_launch_script_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The shell test, the report's reader and the analysis share one bounded read of the script.
    from dsdoctor.facts.inputs import cache_stats, clear_cache

    script = tmp_path / "run.sh"
    script.write_text(SLURM_SCRIPT)
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC)
    clear_cache()
    rc, body, _ = _report(tmp_path, str(log), "--script", str(script), "--force")
    capsys.readouterr()
    assert rc == 0 and "Launch script (`run.sh` line 12):" in body
    stats = cache_stats()
    assert stats["loads"] >= 1 and stats["hits"] >= 1  # read once, then served from the cache
    clear_cache()
    read_shell_script(str(script))
    read_shell_script(str(script))
    assert cache_stats() == {"loads": 1, "hits": 1}


def test_report_refuses_a_fifo_as_launch_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "run.sh"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC)
    rc, _, _ = _report(tmp_path, str(log), "--script", str(fifo), "--force")
    err = capsys.readouterr().err
    assert rc == 2 and "not a regular file" in err and "Traceback" not in err


# ------------------------------------------------------------------------------ without a log

def test_install_log_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = EXTRA / "op-build-failure__chattts3-pip-install-missingcudaexception.log"
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert rc == 0
    assert "Installing DeepSpeed or building its ops fails" in body
    assert "DS_BUILD_FUSED_ADAM=1 pip install deepspeed" in body  # the precise ask
    assert "MissingCUDAException: CUDA_HOME does not exist" in body
    assert "Not applicable: the failure is in installing/building DeepSpeed" in body
    assert "The launch command is not" not in body


def test_env_only_report_and_nodes_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = json.loads(write_env(tmp_path).read_text())
    other = json.loads(json.dumps(base))
    other["cuda"]["torch_nccl"] = "2.21.5"
    other["packages"]["torch"] = "2.4.0+cu121"
    for g in other["gpus"]:
        g["driver"] = "550.54.15"
    (tmp_path / "env-node1.json").write_text(json.dumps(base))
    (tmp_path / "env-node2.json").write_text(json.dumps(other))
    diffs = dict(node_differences([("env-node1.json", base), ("env-node2.json", other)]))
    assert set(diffs) == {"NVIDIA driver", "NCCL (torch)", "torch"}
    assert diffs["NCCL (torch)"] == {"node1": "2.18.1", "node2": "2.21.5"}
    rc, body, _ = _report(tmp_path, "--env", str(tmp_path / "env-*.json"))
    capsys.readouterr()
    assert rc == 0
    assert "**Finding: the nodes differ** in NVIDIA driver, NCCL (torch), torch" in body
    assert "classic cause of hangs at init" in body
    assert "| NCCL (torch) | 2.18.1 | 2.21.5 |" in body
    assert "A question about versions with deepspeed 0.12.6" in body
    assert "hf_" + "QwErTy" not in body  # the snapshots' planted token stays redacted


def test_report_without_any_input_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--config" in err and "--env" in err


# ------------------------------------------------------------------------------ real logs

def _real_logs() -> list[Path]:
    logs = sorted(EXTRA.glob("*.log"))
    if SHARED.is_dir():
        logs += sorted(SHARED.glob("*.log"))
    return logs


def test_real_logs_carry_config_launch_and_first_error(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with_launch = 0
    for log in _real_logs():
        rc, body, _ = _report(tmp_path, str(log), "--force")
        assert rc == 0, log.name
        assert ("DeepSpeed config as printed by the run" in body or "The config is not attached" in body
                or "Not applicable" in body), log.name
        assert ("#### Launch command" in body or "The launch command is not in the log" in body
                or "Installing DeepSpeed" in body), log.name
        with_launch += "#### Launch command" in body
        for text in log.read_text(errors="replace").splitlines():
            if "exits with return code = -" in text and "sigkill_handler" in text:
                assert "exits with return code = -" in body.split("#### What the log says")[0], log.name
                break
    capsys.readouterr()
    assert with_launch >= 3


def test_ds3232_launcher_argv_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = SHARED / "cpu-oom__ds3232-dschat-opt125m-return-code-9.log"
    if not log.exists():
        pytest.skip("shared real logs not available")
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    # the launcher's per-rank argv on line 2 is the launch command, whole
    assert "What each rank ran" in body and "`cpu-oom__ds3232-dschat-opt125m-return-code-9.log` line 2" in body
    assert "--output_dir /content/DeepSpeedExamples/applications/DeepSpeed-Chat/output/actor-models/125m" in body
    desc = body.split("**Diagnosis by dsdoctor**")[0]
    assert "exits with return code = -9`." in desc  # the one-line first error is not cut at its end
    assert ("DeepSpeed-Chat's step scripts write it to `/content/DeepSpeedExamples/applications/"
            "DeepSpeed-Chat/output/actor-models/125m/training.log`") in body


def test_accelerate_failure_block_gives_the_command(tmp_path: Path) -> None:
    from dsdoctor.diagnose.pipeline import run_analysis
    from dsdoctor.render.issue_launch import gather_launch

    # The last line of accelerate's simple_launcher failure (kohya-ss/sd-scripts#1354), and the
    # op builder's ninja command, which is not a launch.
    log = tmp_path / "acc.log"
    log.write_text("subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
                   "subprocess.CalledProcessError: Command '['/Users/kleinsun/open/kohya_ss/venv/bin/python', "
                   "'/Users/kleinsun/Documents/open/kohya_ss/sd-scripts/sdxl_train.py', '--config_file', "
                   "'/Users/kleinsun/Documents/open/kohya_ss/outputs/config_dreambooth-20240531-163416.toml']' "
                   "returned non-zero exit status 1.\n")
    launch = gather_launch(run_analysis(logs=[str(log)]))
    assert [(c.source, c.line) for c in launch.commands] == [("accelerate failure", 2)]
    assert launch.commands[0].text.endswith("--config_file /Users/kleinsun/Documents/open/kohya_ss/"
                                            "outputs/config_dreambooth-20240531-163416.toml")
    assert launch.config_arg() == "/Users/kleinsun/Documents/open/kohya_ss/outputs/config_dreambooth-20240531-163416.toml"


def test_one_log_per_rank_from_the_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_report import DS_EXC

    r0 = write_log(tmp_path, ranks=(0,), name="rank0.log")
    r1 = write_log(tmp_path, ranks=(1,), name="rank1.log")
    rc, body, _ = _report(tmp_path, str(r0), str(r1), "--force")
    capsys.readouterr()
    assert rc == 0
    assert f"(`rank0.log` line {r0.read_text().splitlines().index('[rank0]: ' + DS_EXC) + 1}) is: `{DS_EXC}`" in body
    assert "The same error is also the first error in: `rank1.log`." in body


def test_a_log_without_an_error_is_not_called_a_failure(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    log = EXTRA / "negative__ds4781-healthy-trainer-dicts-before-checkpoint.log"
    rc, body, _ = _report(tmp_path, str(log))
    capsys.readouterr()
    assert rc == 0 and "the log shows no error line" in body and " fails" not in body.split("\n\n")[0]


def test_launch_script_secrets_are_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_report import HF

    script = tmp_path / "train.sh"
    script.write_text("#!/usr/bin/env bash\n# fine-tune\nexport MASTER_PORT=29500\n"
                      "torchrun --nproc_per_node 8 train.py \\\n  --deepspeed ds.json \\\n"
                      f"  --hub_token {HF}\n")
    rc, body, _ = _report(tmp_path, "--config", str(_small_config(tmp_path)), "--script", str(script),
                          "--force")
    capsys.readouterr()
    assert rc == 0 and HF not in body
    assert "Launch script (`train.sh` line 4):" in body and "--deepspeed ds.json" in body
    assert "Launched with `torchrun` (torch.distributed.run)." in body


def _small_config(tmp_path: Path) -> Path:
    p = tmp_path / "ds.json"
    p.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}\n')
    return p


# ------------------------------------------------------------------------------ issue 23's asks

def test_pasted_launch_command_continued_over_indented_lines_is_kept_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A command pasted as users type it: options one per line, each line ending in a backslash.
    log = tmp_path / "train.log"
    log.write_text("$ deepspeed --num_gpus 2 train.py \\\n"
                   "    --deepspeed ds_config.json \\\n"
                   "    --model_name_or_path facebook/opt-125m \\\n"
                   "    --per_device_train_batch_size 4\n\n"
                   "Traceback (most recent call last):\n"
                   '  File "/home/alice/proj/train.py", line 89, in <module>\n'
                   "    main()\n"
                   "ValueError: boom\n")
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert rc == 0
    assert ("deepspeed \\\n    --num_gpus 2 \\\n    train.py \\\n    --deepspeed ds_config.json \\\n"
            "    --model_name_or_path facebook/opt-125m \\\n    --per_device_train_batch_size 4\n```") in body
    # the config the joined command passes is the one asked for
    assert "run `dsdoctor report` again with `--config ds_config.json`" in body


def test_paste_ending_in_a_cut_traceback_header_is_a_cut_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text("{'loss': 2.1234, 'learning_rate': 1e-05, 'epoch': 0.01}\n"
                   "{'loss': 2.0876, 'learning_rate': 2e-05, 'epoch': 0.02}\n"
                   "Traceback (most r\n")
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert rc == 0
    assert "no error line" not in body.lower()
    assert "a traceback cut in its first line (the log ends with 'Traceback (most r')" in body
    assert "**The traceback is cut:**" in body


def test_nearly_every_step_skipped_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 15 of the 17 steps of this real run were skipped by the loss scaler
    log = SAMPLES / "fp16_loss_scale_collapse" / "train.log"
    rc, body, _ = _report(tmp_path, str(log), "--force")
    capsys.readouterr()
    assert "- **Nearly every step was skipped:** 15 of 17 steps (88%)" in body
    # a few skips while the scale warms up are normal: not said
    rc, body, _ = _report(tmp_path, str(SAMPLES / "fp16_overflow_warmup" / "train.log"), "--force")
    capsys.readouterr()
    assert "steps skipped by the fp16 loss scaler: 11" in body and "Nearly every step" not in body


def test_title_names_the_cause_the_analysis_found(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    titles = {}
    for name in ("stopped_sigterm", "gpu_nccl_watchdog", "dataloader_stall"):
        log = sorted((SAMPLES / name).glob("*.log"))[0]
        rc, _, _ = _report(tmp_path, str(log), "--force")
        err = capsys.readouterr().err
        assert rc == 0, err
        titles[name] = err.split("--title ", 1)[1].split(" --body-file", 1)[0]
    # not the launcher's "Killing subprocess" line nor the rule's title: what the verdict found
    assert titles["stopped_sigterm"] == "'[BUG] The run received SIGTERM after step 5'"
    assert titles["gpu_nccl_watchdog"] == ("'[BUG] Hang: an _REDUCE_SCATTER_BASE (SeqNum 4210) timed "
                                           "out after 600 s on rank 6'")
    assert titles["dataloader_stall"] == "'[BUG] Hang: rank 1 never entered all_reduce'"


def test_ds314_never_headlines_a_report(tmp_path: Path) -> None:
    from dsdoctor.model import Evidence, Finding, Report
    from dsdoctor.render.issue_body import build_issue

    ev = Evidence(str(tmp_path / "train.log"), 3, "RuntimeError: CUDA error: an illegal memory access "
                  "was encountered", 0)
    ds314 = Finding(rule="DS314", name="stage3-16bit-weights-not-saved", severity="error",
                    title="ZeRO-3 without stage3_gather_16bit_weights_on_model_save",
                    message="m", fix="Set stage3_gather_16bit_weights_on_model_save.",
                    config_path="zero_optimization")
    other = Finding(rule="DS999", name="illegal-access", severity="warning",
                    title="CUDA illegal memory access", message="m", fix="", evidence=(ev,))
    report = Report(files=(), symptoms=(), findings=(ds314, other))
    issue = build_issue(target="deepspeed", report=report, logs=[ev.file], kind="training")
    assert "stage3_gather" not in issue.title and "CUDA illegal memory access" in issue.title
    assert "[!IMPORTANT]" not in issue.body  # a side note is no triage
    assert issue.body.index("**DS999") < issue.body.index("**DS314")
    assert "diagnosis: DS999 CUDA illegal memory access; DS314" in issue.body


def test_env_local_fills_the_op_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from dsdoctor.facts import envinfo

    asked: list[bool] = []
    snap = json.loads(write_env(tmp_path).read_text())

    def collect(*, ops: bool = False, **_: object) -> dict:
        asked.append(ops)
        ds_ops = {"version": "0.19.8", "accelerator": "cpu", "ninja": True,
                  "compiled_with": {"version": "2.13", "cuda_version": "0.0"},
                  "ops": {"cpu_adam": {"installed": False, "compatible": True}}, "warnings": []}
        return {**snap, "deepspeed_ops": ds_ops if ops else None}

    monkeypatch.setattr(envinfo, "collect", collect)
    monkeypatch.setattr(envinfo, "_LOCAL", {})
    log = sorted((SAMPLES / "stopped_sigterm").glob("*.log"))[0]
    rc, body, _ = _report(tmp_path, str(log), "--env", "local", "--force")
    capsys.readouterr()
    assert rc == 0 and asked == [True]  # collected once, with the op report; the analysis reuses it
    assert "Please run `ds_report`" not in body
    assert "cpu_adam ..............." in body
