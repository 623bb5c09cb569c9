"""dsdoctor report: issue bodies in each project's template, the excerpt, the hint, no secrets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.model import Evidence, FileSummary, Finding, Report, Symptom
from dsdoctor.redact import Redactor
from dsdoctor.render.issue_body import (
    build_issue,
    first_error_excerpt,
    gh_command,
    read_config,
)
from dsdoctor.render.issue_launch import gather_launch, launcher_of

REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "real_logs"  # ../shared beside the clone
SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "fp16_loss_scale_collapse"

# Planted secrets (assembled at run time so scanners do not flag this file).
HF = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"
WANDB = "fedcba9876543210fedcba9876543210fedcba98"
GH = "ghp_" + "R2d2C3poBb8Yoda1Luke2Leia3Han4Solo5Chew"
OPENAI = "sk-" + "proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"
AWS = "AKIA" + "ZZZZ7QWERTY12345"
URLPASS = "Tr0ub4dor3"
BEARER = "ya29" + ".a0AfH6SMBx7longOAuthAccessToken"
SECRETS = (HF, WANDB, GH, OPENAI, AWS, URLPASS, BEARER, "plainHubTokenValue9")

# Lines in the real formats of the DeepSpeed launcher and of torch's rank-prefixed tracebacks
# (copied from sample_logs/fp16_loss_scale_collapse/train.log), with secrets planted in them.
LAUNCHER_LINE = (
    "[2026-11-21 11:40:09,632] [INFO] [runner.py:618:main] cmd = /usr/bin/python3 -u -m "
    "deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 --master_addr=127.0.0.1 "
    "--master_port=29500 --enable_each_rank_log=None --log_level=info /home/alice/proj/train.py "
    f"--deepspeed ds_config.json --hub_token {HF} --output_dir /home/alice/out --logging_steps 10 "
    "--per_device_train_batch_size 4"
)


def _traceback(rank: int, frames: list[tuple[str, int, str, str]], exc: str) -> list[str]:
    out = [f"[rank{rank}]: Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out.append(f'[rank{rank}]:   File "{path}", line {line}, in {func}')
        out.append(f"[rank{rank}]:     {code}")
    out.append(f"[rank{rank}]: {exc}")
    return out


DS_FRAMES = [
    ("/home/alice/proj/train.py", 89, "worker", "engine.step()"),
    ("/home/alice/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py", 3615, "step",
     "self._take_model_step(lr_kwargs)"),
    ("/home/alice/venv/lib/python3.11/site-packages/deepspeed/runtime/fp16/loss_scaler.py", 258,
     "update_scale", "raise Exception("),
]
DS_EXC = "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
HF_FRAMES = [
    ("/home/alice/proj/sft.py", 916, "main", "train_result = trainer.train(resume_from_checkpoint=checkpoint)"),
    ("/home/alice/venv/lib/python3.10/site-packages/transformers/trainer.py", 1555, "train",
     "return inner_training_loop("),
    ("/home/alice/venv/lib/python3.10/site-packages/transformers/deepspeed.py", 220,
     "trainer_config_finalize", "raise ValueError("),
]
HF_EXC = ("ValueError: Please correct the following DeepSpeed config values that mismatch "
          "TrainingArguments values:")


def write_log(tmp_path: Path, frames=DS_FRAMES, exc=DS_EXC, ranks=(0, 1), name="train.log",
              extra: list[str] | None = None, truncate: bool = False) -> Path:
    lines = [
        "[2026-11-21 11:40:09,291] [WARNING] [real_accelerator.py:213:get_accelerator] Setting "
        "accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.",
        LAUNCHER_LINE,
        "[2026-11-21 11:40:11,507] [INFO] [launch.py:152:main] WORLD INFO DICT: {'localhost': [0, 1]}",
        f"Downloading from https://bob:{URLPASS}@hub.internal.example/model (Authorization: Bearer {BEARER})",
        f"wandb: export WANDB_API_KEY={WANDB}; GITHUB_TOKEN={GH}; OPENAI_API_KEY={OPENAI}; "
        f"aws_access_key_id={AWS}",
        "epoch 0 | step 17 | loss nan",
    ]
    lines += extra or []
    tbs = [_traceback(r, frames, exc) for r in ranks]
    # interleave the ranks line by line, as concurrent processes print them
    for i in range(max(len(t) for t in tbs)):
        for t in tbs:
            if i < len(t) and not (truncate and i >= len(t) - 2):
                lines.append(t[i])
    if not truncate:
        lines += [
            "[2026-11-21 11:40:24,533] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11115",
            "[2026-11-21 11:40:24,539] [ERROR] [launch.py:259:sigkill_handler] ['/usr/bin/python3', "
            "'-u', 'train.py', '--local_rank=1', '--hub_token', 'plainHubTokenValue9'] exits with "
            "return code = 1",
        ]
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def make_report(log: Path) -> Report:
    """A Report as the analysis would build it (constructed directly from model classes)."""
    ev = Evidence(str(log), 0, DS_EXC, 0)
    text = log.read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if "Exception: Current loss scale" in t)
    ev = Evidence(str(log), line, DS_EXC, 0)
    sym = Symptom("loss-scale-collapse", 2, (ev,), ev, ev, ranks=(0, 1), files=(str(log),))
    finding = Finding(
        rule="DS102", name="loss-scale-collapse", severity="error",
        title="fp16 loss scale collapsed to its minimum",
        message="The dynamic loss scaler reduced the scale to min_loss_scale and DeepSpeed stopped.",
        fix="Train in bf16 if the GPU supports it (compute capability >= 8.0).",
        config_path="fp16.enabled", evidence=(ev,))
    return Report(files=(FileSummary(str(log), len(text), log.stat().st_size),), symptoms=(sym,),
                  findings=(finding,))


def write_config(tmp_path: Path) -> Path:
    p = tmp_path / "ds_config.json"
    p.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True, "loss_scale": 0},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
        "wandb": {"enabled": True, "api_key": WANDB}, "hub_token": "plainHubTokenValue9",
    }))
    return p


def write_env(tmp_path: Path) -> Path:
    p = tmp_path / "env.json"
    p.write_text(json.dumps({
        "schema_version": 1, "python": {"version": "3.10.12"},
        "os": {"distribution": "Ubuntu 22.04.3 LTS", "release": "5.15.0", "machine": "x86_64",
               "container": "docker"},
        "cpu": {"count": 96, "ram_total_bytes": 1081522278400, "ram_available_bytes": 1000000000000},
        "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 85899345920,
                  "compute_capability": "8.0", "bf16_supported": True, "driver": "535.104.05"}
                 for i in range(8)],
        "packages": {"torch": "2.1.2+cu121", "deepspeed": "0.12.6", "transformers": "4.36.2",
                     "accelerate": "0.25.0"},
        "cuda": {"torch_cuda": "12.1", "torch_nccl": "2.18.1", "nvcc_version": "12.1",
                 "cuda_home": "/usr/local/cuda"},
        # a hand-made snapshot may hold secrets unredacted: the report must still hide them
        "env_vars": {"HF_TOKEN": HF, "NCCL_IB_HCA": "mlx5_0", "MY_API_KEY": "abcdef123456",
                     "MASTER_ADDR": "gpu-node-07"},
    }))
    return p


def _sections(body: str, style: str) -> list[str]:
    pat = r"^\*\*(.+?)\*\*$" if style == "deepspeed" else r"^### (.+)$"
    return re.findall(pat, body, flags=re.M)


def test_deepspeed_template_sections_in_order(tmp_path: Path) -> None:
    log = write_log(tmp_path)
    issue = build_issue(target="deepspeed", report=make_report(log), logs=[str(log)],
                        excerpt=first_error_excerpt([str(log)]))
    heads = [h for h in _sections(issue.body, "deepspeed") if h != "Diagnosis by dsdoctor"]
    # The section headings of DeepSpeed's .github/ISSUE_TEMPLATE/training_bug_report.md
    assert heads == ["Describe the bug", "To Reproduce", "Expected behavior", "ds_report output",
                     "Screenshots", "System info (please complete the following information):",
                     "Launcher context", "Docker context", "Additional context"]
    assert issue.repo == "deepspeedai/DeepSpeed" and issue.title.startswith("[BUG] ")
    assert "fp16 loss scale collapsed" in issue.title
    assert "DS102" in issue.body and "<!-- TODO:" in issue.body


@pytest.mark.parametrize(("target", "repo", "heads"), [
    ("transformers", "huggingface/transformers",
     ["System Info", "Who can help?", "Information", "Tasks", "Reproduction", "Expected behavior"]),
    ("accelerate", "huggingface/accelerate",
     ["System Info", "Information", "Tasks", "Reproduction", "Expected behavior"]),
])
def test_hf_issue_form_sections(tmp_path: Path, target: str, repo: str, heads: list[str]) -> None:
    log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC)
    issue = build_issue(target=target, report=None, logs=[str(log)],
                        excerpt=first_error_excerpt([str(log)]), env=json.loads(write_env(tmp_path).read_text()))
    assert _sections(issue.body, "hf") == heads
    assert issue.repo == repo and not issue.title.startswith("[BUG]")
    assert "- [ ] My own modified scripts" in issue.body
    assert "8 x NVIDIA A100-SXM4-80GB" in issue.body


def test_excerpt_is_the_first_error_deduplicated_across_ranks_with_line_numbers(tmp_path: Path) -> None:
    log = write_log(tmp_path, ranks=(0, 1, 2, 3))
    ex = first_error_excerpt([str(log)])
    assert ex is not None and ex.has_traceback and ex.traceback_complete
    assert ex.error == DS_EXC
    texts = [ln.text for ln in ex.lines]
    assert sum("Traceback (most recent call last)" in t for t in texts) == 1
    assert sum("cannot decrease scale anymore" in t for t in texts) == 1
    assert ex.duplicates_dropped >= 3 * (2 * len(DS_FRAMES) + 2)
    tb = next(ln for ln in ex.lines if "Traceback" in ln.text)
    assert tb.ranks == (0, 1, 2, 3)
    # line numbers are the file's physical line numbers
    file_lines = log.read_text().splitlines()
    for ln in ex.lines:
        assert file_lines[ln.line - 1] == ln.text
    # context before the traceback and the launcher's exit line after it
    assert any("step 17 | loss nan" in t for t in texts)
    assert any("exits with return code = 1" in t for t in texts)
    body = build_issue(target="deepspeed", report=None, logs=[str(log)], excerpt=ex).body
    assert "<details><summary>Log excerpt" in body and "identical lines from other ranks dropped" in body
    assert re.search(rf"^\s*{tb.line} \| \[rank0\]: Traceback", body, re.M)


def test_not_a_deepspeed_bug_hint(tmp_path: Path) -> None:
    hf_log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC, name="hf.log")
    ds_log = write_log(tmp_path, name="ds.log")
    cut_log = write_log(tmp_path, frames=HF_FRAMES, exc=HF_EXC, name="cut.log", truncate=True)
    hint = "probably not a DeepSpeed bug"
    ex = first_error_excerpt([str(hf_log)])
    assert ex.frame_packages == ("transformers",)
    body = build_issue(target="deepspeed", report=None, logs=[str(hf_log)], excerpt=ex).body
    assert hint in body and "`transformers`" in body
    ex = first_error_excerpt([str(ds_log)])
    assert "deepspeed" in ex.frame_packages
    assert hint not in build_issue(target="deepspeed", report=None, logs=[str(ds_log)], excerpt=ex).body
    # a traceback cut before its end proves nothing
    ex = first_error_excerpt([str(cut_log)])
    assert ex is not None and not ex.traceback_complete
    assert hint not in build_issue(target="deepspeed", report=None, logs=[str(cut_log)], excerpt=ex).body


def test_launch_command_whole_from_the_scan(tmp_path: Path) -> None:
    log = write_log(tmp_path)
    launch = gather_launch(run_analysis(logs=[str(log)]))
    runner = launch.primary
    assert runner is not None and runner.launcher == "deepspeed" and runner.line == 2
    assert runner.source == "runner cmd" and runner.world == "localhost: GPUs 0,1"
    # whole: nothing dropped, not even the logging/saving arguments
    for arg in ("--deepspeed ds_config.json", "--output_dir /home/alice/out", "--logging_steps 10",
                "--per_device_train_batch_size 4", "/home/alice/proj/train.py"):
        assert arg in runner.text, arg
    assert HF not in runner.text  # the analysis's report is redacted
    # the launcher's per-rank argv (found wherever it is in the log) comes after the runner's cmd
    argv = launch.commands[-1]
    assert argv.source == "rank argv" and "train.py" in argv.text
    assert launch.config_arg() == "ds_config.json"
    for cmd, launcher in [
        ("torchrun --nproc_per_node=8 --master_port 29501 train.py --deepspeed ds.json", "torchrun"),
        ("accelerate launch --config_file acc.yaml --num_processes 8 train.py", "accelerate"),
        ("python -m torch.distributed.launch --nproc_per_node 2 run_clm.py", "torchrun"),
        ("deepspeed --num_gpus=2 train.py --deepspeed ds.json", "deepspeed"),
        ("srun --jobid $SLURM_JOBID bash -c 'deepspeed --num_gpus 8 train.py'", "srun"),
        ("mpirun -np 4 -npernode 1 -machinefile hosts.txt ./bt.E.4.mpi_io_full", "mpirun"),
    ]:
        assert launcher_of(cmd) == launcher, cmd


def test_typed_launch_commands_are_found(tmp_path: Path) -> None:
    log = tmp_path / "typed.log"
    log.write_text("some banner\n$ CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py "
                   "--model_name_or_path gpt2\nstarting\n")
    lc = gather_launch(run_analysis(logs=[str(log)])).primary
    assert lc is not None and lc.launcher == "torchrun" and lc.line == 2
    assert lc.text == "torchrun --nproc_per_node 2 train.py --model_name_or_path gpt2"


def test_no_secret_reaches_any_target(tmp_path: Path) -> None:
    log = write_log(tmp_path)
    cfg = write_config(tmp_path)
    env = json.loads(write_env(tmp_path).read_text())
    raw = log.read_text() + cfg.read_text() + json.dumps(env)
    for s in SECRETS:
        assert s in raw, s  # planted in the inputs ...
    for target in ("deepspeed", "transformers", "accelerate"):
        red = Redactor()
        issue = build_issue(target=target, report=make_report(log), logs=[str(log)],
                            configs=[read_config(str(cfg), red)], env=env, redactor=red,
                            excerpt=first_error_excerpt([str(log)]),
                            launch=gather_launch(run_analysis(logs=[str(log)])))
        text = issue.body + issue.title
        for s in SECRETS + ("abcdef123456",):
            assert s not in text, (target, s)  # ... and absent from every body
        assert "<redacted>" in text
        assert "NCCL_IB_HCA=mlx5_0" in text  # harmless env vars stay


def test_cli_report_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path)
    cfg = write_config(tmp_path)
    env = write_env(tmp_path)
    out = tmp_path / "issue.md"
    rc = main(["report", str(log), "--config", str(cfg), "--env", str(env), "--output", str(out),
               "--redact-paths", "--redact-hosts", "--force"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "gh issue create --repo deepspeedai/DeepSpeed --title '[BUG] " in err
    assert f"--body-file {out}" in err
    body = out.read_text()
    for s in SECRETS + ("alice", "gpu-node-07"):
        assert s not in body, s
    assert "ZeRO stage 2" in body and "offload optimizer to cpu" in body
    assert "8 x NVIDIA A100-SXM4-80GB" in body and "NCCL_IB_HCA=mlx5_0" in body
    assert "Running inside a docker container" in body
    assert '"stage": 2' in body  # the full config, as written

    # stdout mode: the body on stdout, the gh command on stderr
    assert main(["report", str(log), "--target", "accelerate", "--force"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("### System Info")
    assert "gh issue create --repo huggingface/accelerate" in cap.err and "gh issue" not in cap.out


@pytest.mark.parametrize("argv_tail,needle", [
    (["--config", "{dir}/bin.json"], "binary file"),
    (["--config", "{dir}"], "is a directory"),
    (["--env", "{dir}/bad_env.json"], "invalid JSON"),
    (["--config", "{dir}/missing.json"], "cannot read"),
])
def test_cli_bad_inputs_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             argv_tail: list[str], needle: str) -> None:
    log = write_log(tmp_path)
    (tmp_path / "bin.json").write_bytes(b"\x80\x04\x95\x00\x00binary\x00\x00")
    (tmp_path / "bad_env.json").write_text("{oops")
    rc = main(["report", str(log)] + [a.format(dir=tmp_path) for a in argv_tail])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_missing_log_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.log")]) == 2
    assert "nope.log" in capsys.readouterr().err


def test_read_config_keeps_broken_json_verbatim_but_redacted(tmp_path: Path) -> None:
    p = tmp_path / "broken.json"
    p.write_text('{"fp16": {"enabled": true,}, "hub_token": "plainHubTokenValue9"')
    c = read_config(str(p), Redactor())
    assert c.lang == "json" and '"enabled": true,}' in c.text and "plainHubTokenValue9" not in c.text


def test_gh_command_quotes_the_title() -> None:
    from dsdoctor.render.issue_body import Issue

    cmd = gh_command(Issue("deepspeed", "deepspeedai/DeepSpeed", "[BUG] it's broken", "body"), "my issue.md")
    assert cmd == ("gh issue create --repo deepspeedai/DeepSpeed --title '[BUG] it'\"'\"'s broken' "
                   "--body-file 'my issue.md'")


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="shared real logs not available")
@pytest.mark.parametrize("target", ["deepspeed", "transformers", "accelerate"])
def test_real_logs_never_crash(target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = {}
    for row in (REAL_LOGS / "labels.tsv").read_text().splitlines()[1:]:
        cols = row.split("\t")
        labels[cols[0]] = cols[1]
    found = 0
    for log in sorted(REAL_LOGS.glob("*.log")):
        out = tmp_path / (log.stem + ".md")
        assert main(["report", str(log), "--target", target, "-o", str(out), "--force"]) == 0, log.name
        body = out.read_text()
        assert body.count("<details>") == body.count("</details>")
        # the config is always there as printed by the run, or asked for precisely
        assert ("DeepSpeed config as printed by the run" in body
                or "The config is not attached" in body), log.name
        if labels.get(log.name) and "Log excerpt" in body:
            found += 1
    capsys.readouterr()
    failing = [n for n, exp in labels.items() if exp]
    # the first error is found in (nearly) every log of a failed run
    assert found >= len(failing) - 3, (found, len(failing))


@pytest.mark.skipif(not (SAMPLE / "train.log").exists(), reason="sample log not generated")
def test_bundled_sample_real_deepspeed_run(tmp_path: Path) -> None:
    out = tmp_path / "issue.md"
    assert main(["report", str(SAMPLE / "train.log"), "--config", str(SAMPLE / "ds_config.json"),
                 "-o", str(out), "--force"]) == 0
    body = out.read_text()
    assert "cannot decrease scale anymore" in body
    assert "probably not a DeepSpeed bug" not in body  # the traceback goes through deepspeed/
    assert "Launched with the `deepspeed` launcher; world: localhost: GPUs 0,1." in body
    assert "The DeepSpeed runner's `cmd =` (`train.log` line 3)" in body
    assert "--deepspeed_config ds_config.json" in body
    assert "Config `ds_config.json` (as written)" in body
    assert "ZeRO-1/2 code (`deepspeed/runtime/zero/stage_1_and_2.py` in the traceback)" in body
    # the script printed "epoch 0 | step 17 | loss nan" after DeepSpeed's last step=15 line
    assert "Steps done: 17" in body


def test_one_log_per_rank(tmp_path: Path) -> None:
    r0 = write_log(tmp_path, ranks=(0,), name="rank0.log")
    r1 = write_log(tmp_path, ranks=(1,), name="rank1.log")
    r2 = tmp_path / "rank2.log"
    r2.write_text("[rank2]: Traceback (most recent call last):\n"
                  '[rank2]:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 72, in wrapper\n'
                  "[rank2]:     return func(*args, **kwargs)\n"
                  "[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970\n")
    ex = first_error_excerpt([str(r0), str(r1), str(r2)])
    assert ex.file == str(r0) and ex.error == DS_EXC
    assert (str(r1), ex.error_line, DS_EXC) in ex.others
    assert any(f == str(r2) and e.startswith("torch.distributed.DistBackendError") for f, _, e in ex.others)
    body = build_issue(target="deepspeed", report=None, logs=[str(r0), str(r1), str(r2)], excerpt=ex).body
    assert "The same error is also the first error in: `rank1.log`" in body
    assert "`rank2.log` line 4: `torch.distributed.DistBackendError" in body


RICH_TB = """\
╭───────────────────── Traceback (most recent call last) ──────────────────────╮
│ /home/user/starcoder/finetune/finetune.py:322 in <module>                    │
│                                                                              │
│ ❱ 322 │   main(args)                                                         │
│                                                                              │
│ {frame}: │
│ 891 in _batch_assertion                                                      │
│                                                                              │
│ ❱  891 │   │   │   f"Check batch related parameters. train_batch_si          │
╰──────────────────────────────────────────────────────────────────────────────╯
AssertionError: Check batch related parameters. train_batch_size is not
equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 *
8 * 1
"""


@pytest.mark.parametrize(("frame", "hint"), [
    ("/opt/conda/lib/python3.7/site-packages/deepspeed/runtime/config.py", False),
    ("/opt/conda/lib/python3.7/site-packages/transformers/trainer.py", True),
])
def test_rich_traceback_frames_count(tmp_path: Path, frame: str, hint: bool) -> None:
    # Box-drawn rich tracebacks (format of the real starcoder log in shared/real_logs).
    log = tmp_path / "rich.log"
    log.write_text(RICH_TB.format(frame=frame))
    ex = first_error_excerpt([str(log)])
    assert ex.traceback_complete and ex.error.startswith("AssertionError: Check batch")
    assert ("deepspeed" in ex.frame_packages) is (not hint)
    body = build_issue(target="deepspeed", report=None, logs=[str(log)], excerpt=ex).body
    assert ("probably not a DeepSpeed bug" in body) is hint


def test_cli_anchors_on_the_strongest_evidence_and_survives_a_broken_analysis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import dsdoctor.cli.report

    log = write_log(tmp_path)
    lines = log.read_text().splitlines()
    strong = next(i for i, t in enumerate(lines, 1) if "Exception: Current loss scale" in t)
    context = next(i for i, t in enumerate(lines, 1) if "step 17 | loss nan" in t)
    report = make_report(log)
    f = report.findings[0]
    # evidence[0] is the strongest; an earlier context line follows it
    finding = Finding(**{**{k: getattr(f, k) for k in f.__dataclass_fields__},
                         "evidence": (Evidence(str(log), strong, DS_EXC, 0), Evidence(str(log), context, "loss nan"))})
    monkeypatch.setattr(dsdoctor.cli.report, "_run_pipeline",
                        lambda args: (Report(files=(), symptoms=(), findings=(finding,)), None))
    out = tmp_path / "a.md"
    assert main(["report", str(log), "-o", str(out), "--force"]) == 0
    body = out.read_text()
    assert f"(`train.log` line {strong}) is: `{DS_EXC}`" in body
    assert "**DS102 loss-scale-collapse** (error)" in body

    def broken(args):
        raise KeyError("rule bug")

    monkeypatch.setattr(dsdoctor.cli.report, "_run_pipeline", broken)
    assert main(["report", str(log), "-o", str(out), "--force"]) == 0  # -o exists: --force
    err = capsys.readouterr().err
    assert "warning: analysis failed (KeyError" in err
    body = out.read_text()
    assert "analysis failed" in body and "Log excerpt" in body
