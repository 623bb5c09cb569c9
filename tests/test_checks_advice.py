"""Advice that fits the run (issue 8, items 3-4): the contradictions, gone by construction.

Each test runs the real pipeline (files -> scanner -> context -> run model -> checks) on inputs
built from real log lines; where a line comes from is said next to it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from test_rules_examples import run_example  # noqa: E402

from dsdoctor.diagnose.checks.runfacts import NEED_STAGE, overlap_comm_bucket_bytes  # noqa: E402
from dsdoctor.model import Finding  # noqa: E402

# hiyouga/LlamaFactory#7532 (also ../shared/real_logs/gpu-oom__llamafactory-236b-...): a ZeRO-3
# OOM in the optimizer step; the traceback runs through deepspeed/runtime/zero/stage3.py.
ZERO3_FRAME = ('  File "/root/anaconda3/envs/llama-factory/lib/python3.10/site-packages/deepspeed/'
               'runtime/zero/stage3.py", line 947, in _optimizer_step')
OOM_80G = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 has "
           "a total capacity of 79.32 GiB of which 2.40 GiB is free. Process 105400 has 76.92 GiB "
           "memory in use. Of the allocated memory 73.28 GiB is allocated by PyTorch, and 1.59 GiB "
           "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
           "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
           "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
           "#environment-variables)")
# deepspeedai/DeepSpeed#3869 (../shared/real_logs/gpu-oom__ds3869-...): a 4 GiB GPU.
OOM_4G = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 978.00 MiB (GPU 0; "
          "4.00 GiB total capacity; 1.68 GiB already allocated; 0 bytes free; 2.72 GiB reserved in "
          "total by PyTorch) If reserved memory is >> allocated memory try setting "
          "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
          "PYTORCH_CUDA_ALLOC_CONF")
# A torch 2.5 OOM quoted in a public GitHub repository's run notes (a Wan-Move video run): three
# processes hold memory on GPU 0.
OOM_SHARED = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 620.00 MiB. GPU 0 has "
              "a total capacity of 44.32 GiB of which 84.31 MiB is free. Process 387090 has 36.25 "
              "GiB memory in use. Process 413847 has 4.07 GiB memory in use. Process 413851 has "
              "3.89 GiB memory in use. Of the allocated memory 35.45 GiB is allocated by PyTorch, "
              "and 301.95 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
              "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
              "avoid fragmentation. See documentation for Memory Management.")
# ../shared/real_logs/loss-scale-collapse__t5-11b-stage2-...: the scaler at its floor.
COLLAPSE = ("[2021-11-27 00:36:54,800] [INFO] [stage2.py:1628:step] [deepscale] OVERFLOW! Rank 0 "
            "Skipping step. Attempted loss scale: 1, reducing to 1")


def _one(findings: list[Finding], code: str) -> Finding:
    found = [f for f in findings if f.rule == code]
    assert len(found) == 1, [f.rule for f in findings]
    return found[0]


def _run(tmp_path: Path, **example: Any) -> list[Finding]:
    return run_example(example, tmp_path)


def test_zero3_traceback_oom_starts_the_ladder_at_stage_3(tmp_path: Path) -> None:
    f = _one(_run(tmp_path, log=f"{ZERO3_FRAME}\n{OOM_80G}\n"), "DS105")
    assert "stage 2" not in f.fix and "use DeepSpeed ZeRO" not in f.fix
    assert "ZeRO stage 3" in f.message and "stage3.py" in f.message
    # the frame is the optimizer step: sub_group_size first, then the stage-3 knobs
    assert f.fix.startswith("Next: the OOM is in the optimizer step")
    assert "stage3_max_live_parameters" in f.fix
    assert f.config_path == "zero_optimization.sub_group_size"


def test_zero3_traceback_outranks_a_config_that_says_stage_2(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    f = _one(_run(tmp_path, log=f"{ZERO3_FRAME}\n{OOM_80G}\n", config=cfg), "DS105")
    assert "ZeRO stage 3" in f.message and "config given says stage 2" in f.message
    assert "stage 2 -> 3" not in f.fix and "offload_optimizer\": {\"device\": \"cpu\", \"pin" not in f.fix
    assert "sub_group_size" in f.fix


def test_oom_without_any_config_names_the_input_that_would_tell(tmp_path: Path) -> None:
    f = _one(_run(tmp_path, log=OOM_4G + "\n"), "DS105")
    assert f.fix.count(NEED_STAGE) == 1
    assert "stage 2" not in f.fix


def test_oom_reads_every_number_and_sees_a_shared_gpu(tmp_path: Path) -> None:
    f = _one(_run(tmp_path, log=OOM_SHARED + "\n"), "DS105")
    assert "620.00 MiB" in f.message and "44.32 GiB" in f.message and "84.31 MiB free" in f.message
    assert "3 processes hold memory on this one GPU" in f.message
    assert "387090: 36.25 GiB" in f.message
    assert f.fix.startswith("Next: give each rank its own GPU")


def test_one_process_is_not_called_a_shared_gpu(tmp_path: Path) -> None:
    f = _one(_run(tmp_path, log=OOM_80G + "\n"), "DS105")
    assert "processes hold memory" not in f.message and "own GPU" not in f.fix


def test_bucket_memory_is_one_number_in_ds105_and_ds312(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 2, "overlap_comm": True, "allgather_bucket_size": 5e8, "reduce_bucket_size": 5e8}}
    env = {"gpus": [{"name": "NVIDIA GeForce GTX 1650", "memory_total_bytes": 4 * 2**30,
                     "compute_capability": "7.5"}]}
    findings = _run(tmp_path, log=OOM_4G + "\n", config=cfg, env=env)
    oom, buckets = _one(findings, "DS105"), _one(findings, "DS312")
    gb = f"{overlap_comm_bucket_bytes(5e8, 5e8) / 1e9:.1f} GB"
    assert gb == "9.0 GB"
    assert gb in oom.fix and gb in buckets.message
    assert "4.5 GB" not in oom.fix + oom.message


def test_buckets_already_small_are_not_lowered_to_themselves(tmp_path: Path) -> None:
    cfg = {"zero_optimization": {"stage": 2, "overlap_comm": True,
                                 "allgather_bucket_size": 2e8, "reduce_bucket_size": 2e8}}
    env = {"gpus": [{"name": "small", "memory_total_bytes": 2 * 2**30}]}
    f = _one(_run(tmp_path, config=cfg, env=env), "DS312")
    assert "to 2e8" not in f.fix and "overlap_comm to false" in f.fix


def test_one_qlora_answer_for_ds317_and_ds210(tmp_path: Path) -> None:
    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
           "  offload_optimizer_device: cpu\n  offload_param_device: cpu\n  zero3_init_flag: false\n"
           "  zero_stage: 3\nmixed_precision: bf16\nnum_processes: 2\n")
    script = "bnb_config = BitsAndBytesConfig(load_in_4bit=True)\n"
    rules = {f.rule for f in _run(tmp_path, accelerate=acc, script=script)}
    assert {"DS317", "DS210"} <= rules


def test_collapse_at_the_minimum_never_proposes_a_higher_start(tmp_path: Path) -> None:
    """Issue 20: at the minimum (scale 1) the gradients overflow unscaled; raising
    initial_scale_power only delays the same collapse (loss_scaler.py:265-279 at v0.19.5)."""
    for power in (12, 16, 32):
        cfg = {"fp16": {"enabled": True, "initial_scale_power": power}, "zero_optimization": {"stage": 2}}
        (tmp_path / str(power)).mkdir()
        f = _one(_run(tmp_path / str(power), log=COLLAPSE + "\n", config=cfg), "DS102")
        assert "to 32" not in f.fix and "would not help" in f.fix, f.fix
        assert f.fix.startswith("lower the learning rate and set gradient_clipping (1.0)")
        assert f.config_path == "gradient_clipping"


def test_nan_under_bf16_is_not_a_precision_problem(tmp_path: Path) -> None:
    # ../shared/real_logs/nan-loss__chatglm-ptl-progress-...: a Lightning progress bar with NaN loss
    log = ("Epoch 1:   1%|          | 23/4360 [00:32<1:43:33,  1.43s/it, loss=nan, v_num=0]\n"
           "Epoch 1:   1%|          | 24/4360 [00:35<1:46:07,  1.47s/it, loss=nan, v_num=0]\n")
    cfg = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    f = _one(_run(tmp_path, log=log, config=cfg), "DS103")
    text = (f.message + " " + f.fix).lower()
    assert "bf16 instead" not in text and "switch to bf16" not in text
    assert "train in bf16" not in text and "fp16" not in f.fix.lower()
    assert "bf16 has the range of fp32" in f.message


def test_cpu_oom_with_offload_never_prescribes_more_offload(tmp_path: Path) -> None:
    # deepspeedai/DeepSpeed#3232 (../shared/real_logs/cpu-oom__ds3232-...): a rank killed with -9
    # (the argv shortened after --local_rank=0).
    log = ("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
           "'-u', 'main.py', '--local_rank=0'] exits with return code = -9\n")
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}}}
    f = _one(_run(tmp_path, log=log, config=cfg), "DS106")
    assert "adds host memory" in f.message
    assert "add \"offload" not in f.fix and "offload_optimizer to cpu" not in f.fix.lower()


def test_oom_never_asks_to_shrink_a_batch_of_one(tmp_path: Path) -> None:
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    f = _one(_run(tmp_path, log=OOM_80G + "\n", config=cfg), "DS105")
    assert "smaller per-device batch" not in f.fix and "train_micro_batch_size_per_gpu" not in f.fix
    cfg = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
           "zero_optimization": {"stage": 2}}
    (tmp_path / "b").mkdir()
    f = _one(_run(tmp_path / "b", log=OOM_80G + "\n", config=cfg), "DS105")
    assert "train_micro_batch_size_per_gpu from 8 to 4 and gradient_accumulation_steps from 2 to 4" \
        in f.fix


# The DeepSpeed op builder's CUDA check (databrickslabs/dolly#168; bytedance/lightseq#526, which
# vendors DeepSpeed's op_builder): the fix moves only what can move.
CUDA_MISMATCH = ("Exception: Installed CUDA version {inst} does not match the version torch was "
                 "compiled with {built}, unable to compile cuda/cpp extensions without a matching "
                 "cuda version.")


def test_op_build_cuda_mismatch_fix_fits_the_release(tmp_path: Path) -> None:
    """The toolkit torch was built with, never a torch wheel for the toolkit (PyTorch published
    none for many toolkits); a newer DeepSpeed or DS_SKIP_CUDA_CHECK only where the run's release
    accepts them (op_builder/builder.py cuda_minor_mismatch_ok, assert_no_cuda_mismatch); never
    DS_BUILD_OPS=1 as a way around it (setup.py runs the same check)."""
    def fix(inst: str, built: str, ds: str | None = None) -> str:
        env = None if ds is None else {"cpu": {"count": 8, "ram_total_bytes": 2**35}, "gpus": [],
                                       "packages": {"torch": "2.1.0", "deepspeed": ds}}
        where = tmp_path / f"{inst}-{built}-{ds}"
        where.mkdir()
        found = run_example({"log": CUDA_MISMATCH.format(inst=inst, built=built), "env": env}
                            if env else {"log": CUDA_MISMATCH.format(inst=inst, built=built)}, where)
        return next(f.fix for f in found if f.rule == "DS108")

    old = fix("9.1", "11.8")  # a major-version mismatch: only the toolkit can move
    assert "install the CUDA toolkit torch was built with (11.8)" in old
    assert "torch build" not in old and "DS_SKIP_CUDA_CHECK" not in old
    assert "does not get around it" in old and "DS_BUILD_OPS=1 (or" not in old
    minor = fix("12.3", "12.1")  # the release is not known: both ways, with their releases
    assert "torch build" not in minor
    assert "upgrade DeepSpeed to 0.12.1 or later" in minor and "(DeepSpeed >= 0.9.3)" in minor
    assert "upgrade DeepSpeed to 0.14.3" in fix("12.4", "12.1", "0.12.6")
    assert "DS_SKIP_CUDA_CHECK" not in fix("12.4", "12.1", "0.9.2")  # before 0.9.3
    assert "upgrade" not in fix("13.0", "12.8", "0.19.8")  # no release accepts another major


# DeepSpeed's loss scaler line (deepspeedai/DeepSpeed#931) and a Trainer log dict; a long run
# overflows about once per loss_scale_window (1000) steps, the scale back up before each.
_PERIODIC_OVERFLOW = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
                      "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")


def _analyze(tmp_path: Path, log: str) -> Any:
    from dsdoctor.diagnose.pipeline import analyze  # noqa: PLC0415
    from dsdoctor.facts.inputs import AnalysisInputs  # noqa: PLC0415

    path = tmp_path / "train.log"
    path.write_text(log, encoding="utf-8")
    return analyze(AnalysisInputs.of(logs=[str(path)]))


def test_periodic_overflows_of_a_long_run_are_no_collapse(tmp_path: Path) -> None:
    """Issue 20: 60 overflows over a long run whose scale recovered each time (the scaler doubles
    it after loss_scale_window clean steps: loss_scaler.py:295-299 at v0.19.5) are no collapse;
    the same start with most steps skipped is one."""
    lines = []
    for i in range(60):
        lines += [_PERIODIC_OVERFLOW,
                  f"{{'loss': {2.1 - i * 0.01:.4f}, 'grad_norm': 1.41, 'learning_rate': 4.8e-05, "
                  f"'epoch': {0.04 + i * 0.05:.2f}}}"]
    long_run = "\n".join(lines) + "\n"
    (tmp_path / "long").mkdir()
    rules = {f.rule for f in _run(tmp_path / "long", log=long_run)}
    assert "DS102" not in rules and "DS101" in rules
    (tmp_path / "fate").mkdir()
    assert _analyze(tmp_path / "fate", long_run).verdict.fate == "recovered"
    # deepspeedai/DeepSpeed#931's engine line format, with most steps skipped
    skipped = (_PERIODIC_OVERFLOW + "\n[2023-04-28 06:59:46,878] [INFO] [logging.py:96:log_dist] "
               "[Rank 0] step=100, skipped=90, lr=[4.8e-05], mom=[(0.9, 0.999)]\n")
    (tmp_path / "skipped").mkdir()
    f = _one(_run(tmp_path / "skipped", log=skipped), "DS102")
    assert "90 of 100 steps were skipped" in f.message and "would not help" in f.fix


def test_inf_grad_norm_of_a_skipped_fp16_step_is_no_nan_loss(tmp_path: Path) -> None:
    """Issue 20: DeepSpeed 0.19.8's ZeRO-1/2 and ZeRO-3 set the grad norm to inf on an overflow
    (stage_1_and_2.py:3050-3052, stage3.py:2828-2829) and the Trainer logs it beside a finite
    loss: a skipped step, not a NaN loss, and the run is not 'not-learning'."""
    log = (_PERIODIC_OVERFLOW + "\n"
           "{'loss': 2.3514, 'grad_norm': inf, 'learning_rate': 4.9e-05, 'epoch': 0.02}\n"
           "{'loss': 2.1107, 'grad_norm': 1.41, 'learning_rate': 4.8e-05, 'epoch': 0.04}\n")
    rules = {f.rule for f in _run(tmp_path, log=log)}
    assert "DS103" not in rules and "DS101" in rules
    (tmp_path / "fate").mkdir()
    assert _analyze(tmp_path / "fate", log).verdict.fate == "recovered"
    # a NaN loss beside it still is one
    nan = log + "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '4.7e-05', 'epoch': '0.06'}\n"
    (tmp_path / "nan").mkdir()
    assert "DS103" in {f.rule for f in _run(tmp_path / "nan", log=nan)}
