"""Symptom diagnoses (DS1xx) and cross-checks (DS2xx) end to end: real logs and the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import run_analysis

REAL = Path(__file__).resolve().parents[2] / "shared" / "real_logs"
LABELS = REAL / "labels.tsv"

# The rule that names the cause of each labelled class of real log.
CLASS_RULE = {"batch-size-mismatch": "DS110", "config-mismatch": "DS109", "cpu-oom": "DS106",
              "fp16-overflow": "DS101", "gpu-oom": "DS105", "hang": "DS107",
              "loss-scale-collapse": "DS102", "nan-loss": "DS103",
              "offload-client-optimizer": "DS111", "op-build-failure": "DS108"}


def _labels() -> list[tuple[str, str, str]]:
    if not LABELS.exists():
        return []
    with LABELS.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [(r["file"], r["expected_classes"], r["must_not_classes"]) for r in rows
            if (REAL / r["file"]).exists()]


@pytest.mark.skipif(not _labels(), reason="shared real logs not present")
@pytest.mark.parametrize("name,expected,must_not", _labels(), ids=[r[0] for r in _labels()])
def test_real_log_diagnosis(name: str, expected: str, must_not: str) -> None:
    report = run_analysis([str(REAL / name)], engine="python")
    rules = {f.rule for f in report.findings}
    classes = [c for c in expected.split(",") if c]
    if not classes:  # healthy logs: no error finding at all
        assert not [f for f in report.findings if f.severity == "error"], rules
        return
    # The primary class (first) is diagnosed by its rule.
    primary = "loss-scale-collapse" if "loss-scale-collapse" in classes else classes[0]
    if primary == "fp16-overflow":
        # A burst that recovered: DS101 unless the scale fell very low (then DS102).
        assert rules & {"DS101", "DS102"}, rules
    else:
        assert CLASS_RULE[primary] in rules, (primary, rules)
    for bad in (c for c in must_not.split(",") if c):
        rule = CLASS_RULE.get(bad)
        if rule and bad not in classes:
            assert rule not in rules, f"{rule} fired on a log labelled not-{bad}"


# ------------------------------------------------------------------------------ helpers

T5_SMALL = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 2048,
            "d_kv": 64, "d_model": 512, "num_heads": 8, "num_layers": 6, "vocab_size": 32128}
LLAMA2_7B = {"_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"],
             "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "torch_dtype": "float16", "vocab_size": 32000}
NAN_LINE = "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '4.9e-05', 'epoch': '0.2'}\n"
HANG_LINE = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=775693, OpType=_ALLGATHER_BASE, NumelIn=262668288, "
             "NumelOut=1050673152, Timeout(ms)=1800000) ran for 1800042 milliseconds before "
             "timing out.\n")
SIGKILL_LINES = (
    "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n"
    "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u',"
    " 'main.py', '--local_rank=0', '--model_name_or_path', 'meta-llama/Llama-2-7b-hf', "
    "'--deepspeed'] exits with return code = -9\n")


def _w(tmp: Path, name: str, content) -> str:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content if isinstance(content, str) else json.dumps(content, indent=2),
                 encoding="utf-8")
    return str(p)


def _env(ram_gib: int, gpus: int = 1, tf: str | None = None, cc: str = "8.0") -> dict:
    return {"cpu": {"count": 16, "ram_total_bytes": ram_gib * 2**30},
            "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "memory_total_bytes": 40 * 2**30,
                      "compute_capability": cc}] * gpus,
            "packages": {"transformers": tf, "deepspeed": "0.14.0"}}


def _analyze_json(argv: list[str], capsys) -> tuple[int, dict]:
    rc = main(["analyze", *argv, "--format", "json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def _by_rule(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == code]


# ------------------------------------------------------------ the three cross-checks, CLI


def test_cli_bf16_model_in_fp16(tmp_path: Path, capsys) -> None:
    cfg = _w(tmp_path, "ds.json", {"train_micro_batch_size_per_gpu": 4,
                                   "fp16": {"enabled": True}, "zero_optimization": {"stage": 2}})
    model = _w(tmp_path, "t5/config.json", T5_SMALL)
    # Pre-flight (no log): a warning, exit 0.
    rc, rep = _analyze_json(["--config", cfg, "--model", str(Path(model).parent)], capsys)
    f = _by_rule(rep, "DS201")
    assert rc == 0 and len(f) == 1 and f[0]["severity"] == "warning"
    assert f[0]["config_path"] == "fp16.enabled" and f[0]["config_line"] == 4
    # With NaN in the log: an error, exit 1, and DS103 names the same cause.
    log = _w(tmp_path, "train.log", NAN_LINE)
    rc, rep = _analyze_json([log, "--config", cfg, "--model", str(Path(model).parent)], capsys)
    assert rc == 1 and _by_rule(rep, "DS201")[0]["severity"] == "error"
    assert "pretrained in bf16" in _by_rule(rep, "DS103")[0]["message"]


def test_cli_bf16_model_from_command_line_name(tmp_path: Path, capsys) -> None:
    log = _w(tmp_path, "train.log",
             "deepspeed examples/pytorch/translation/run_translation.py --deepspeed "
             "tests/deepspeed/ds_config_zero3.json --model_name_or_path google-t5/t5-small "
             "--per_device_train_batch_size 1 --output_dir output_dir --fp16 --do_train\n" + NAN_LINE)
    rc, rep = _analyze_json([log], capsys)
    f = _by_rule(rep, "DS201")
    assert rc == 1 and f and f[0]["severity"] == "error" and f[0]["config_path"] == "fp16"
    assert "google-t5/t5-small" in f[0]["message"]


def test_cli_zero3_generate_hang(tmp_path: Path, capsys) -> None:
    cfg = _w(tmp_path, "z3.json", {"train_micro_batch_size_per_gpu": 1,
                                   "zero_optimization": {"stage": 3}})
    script = _w(tmp_path, "gen.py", "out = ds_engine.module.generate(inputs, synced_gpus=False)\n")
    env = _w(tmp_path, "env.json", _env(256, gpus=2, tf="4.40.0"))
    log = _w(tmp_path, "hang.log", HANG_LINE)
    rc, rep = _analyze_json([log, "--config", cfg, "--script", script, "--env", env], capsys)
    f = _by_rule(rep, "DS202")
    assert rc == 1 and f and f[0]["severity"] == "error"
    assert f[0]["config_file"] == script and f[0]["config_line"] == 1
    assert "synced_gpus=False" in f[0]["message"] and "2 ranks" in f[0]["message"]
    # The hang diagnosis names the same cause.
    assert "synced_gpus" in _by_rule(rep, "DS107")[0]["message"]
    # Not passed at all on Transformers >= 4.28 that knows ZeRO-3 is on: set automatically.
    script2 = _w(tmp_path, "gen2.py", "dschf = HfDeepSpeedConfig(cfg)\nout = model.generate(inputs)\n")
    rc, rep = _analyze_json(["--config", cfg, "--script", script2, "--env", env], capsys)
    assert not _by_rule(rep, "DS202")


def test_cli_offload_exceeds_ram(tmp_path: Path, capsys) -> None:
    cfg = _w(tmp_path, "off.json", {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})
    model = str(Path(_w(tmp_path, "llama/config.json", LLAMA2_7B)).parent)
    env = _w(tmp_path, "env.json", _env(64, gpus=8))
    log = _w(tmp_path, "oom.log", SIGKILL_LINES)
    rc, rep = _analyze_json([log, "--config", cfg, "--model", model, "--env", env], capsys)
    f = _by_rule(rep, "DS203")
    assert rc == 1 and f and f[0]["severity"] == "error"
    msg = f[0]["message"]
    # 6,738,415,616 x 18 x 1.5 bytes (zero_init, 1 node) = 169.44 GiB > 64 GiB.
    assert "169.44 GiB" in msg and "64.00 GiB" in msg
    assert "per node" in msg and "not activations" in msg
    assert f[0]["config_path"] == "zero_optimization.offload_param.device"
    # Enough RAM: silent.
    env2 = _w(tmp_path, "env2.json", _env(512, gpus=8))
    rc, rep = _analyze_json(["--config", cfg, "--model", model, "--env", env2], capsys)
    assert not _by_rule(rep, "DS203")


def test_missing_facts_name_the_flag(tmp_path: Path, capsys) -> None:
    cfg = _w(tmp_path, "off.json", {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}})
    model = str(Path(_w(tmp_path, "llama/config.json", LLAMA2_7B)).parent)
    rc, rep = _analyze_json(["--config", cfg, "--model", model], capsys)
    assert any("DS203" in n and "--env" in n for n in rep["notes"]), rep["notes"]
    rc, rep = _analyze_json(["--config", cfg], capsys)
    assert any("DS203" in n and "--model" in n for n in rep["notes"]), rep["notes"]


# ------------------------------------------------------------------ symptom diagnoses


def test_string_number_mismatch_said_plainly(tmp_path: Path) -> None:
    log = _w(tmp_path, "t.log",
             "ValueError: Please correct the following DeepSpeed config values that mismatch "
             "TrainingArguments values:\n- ds gradient_accumulation_steps=8 vs hf "
             "gradient_accumulation_steps=8\n")
    rep = run_analysis([log], engine="python")
    f = [x for x in rep.findings if x.rule == "DS109"]
    assert f and 'compares the string "8" with the number 8' in f[0].message


def test_overflows_that_halve_the_scale_to_the_bottom_are_a_collapse(tmp_path: Path) -> None:
    # A healthy long fp16 run overflows once per loss_scale_window and the scale climbs back
    # (test_periodic_overflows_of_a_long_run_are_no_collapse); overflows that only ever halve it,
    # down to 1, are the collapse DeepSpeed then stops on (loss_scaler.py:265-275 at v0.19.5).
    line = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
            "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}\n")
    text = "".join(line.format(a=65536 >> i, b=65536 >> (i + 1)) for i in range(16))
    rep = run_analysis([_w(tmp_path, "o.log", text)], engine="python")
    rules = {f.rule for f in rep.findings}
    assert "DS102" in rules and "DS101" not in rules


def test_gpu_oom_ladder_uses_the_estimator(tmp_path: Path) -> None:
    oom = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 "
           "has a total capacity of 79.32 GiB of which 2.40 GiB is free. Process 105400 has "
           "76.92 GiB memory in use.\n")
    cfg = _w(tmp_path, "z2.json", {"train_micro_batch_size_per_gpu": 1,
                                   "zero_optimization": {"stage": 2}})
    model = str(Path(_w(tmp_path, "m/config.json", LLAMA2_7B)).parent)
    rep = run_analysis([_w(tmp_path, "oom.log", oom)], configs=[cfg], model=model,
                       engine="python")
    f = next(x for x in rep.findings if x.rule == "DS105")
    # ZeRO-2 on 1 GPU: 2 x 6.74e9 + 18 x 6.74e9 bytes = 125.51 GiB of model states.
    assert "125.51 GiB per GPU" in f.message
    # The first rung that fits in half of 79.32 GiB: ZeRO-2 + optimizer offload (12.55 GiB).
    assert f.fix.startswith("Next: by DeepSpeed's estimator, ZeRO-2 + offload_optimizer")


def test_rank_exit_points_at_first_exception(tmp_path: Path) -> None:
    log = _w(tmp_path, "x.log",
             "ValueError: Tokenizer class LLaMATokenizer does not exist or is not currently "
             "imported.\n[2024-03-20 20:31:29,269] [ERROR] [launch.py:321:sigkill_handler] "
             "['/data/anaconda3/envs/llama/bin/python', '-u', 'src/train_bash.py', "
             "'--local_rank=4'] exits with return code = 1\n")
    rep = run_analysis([log], engine="python")
    f = next(x for x in rep.findings if x.rule == "DS113")
    assert "ValueError" in f.message and "line 1" in f.message


def test_sigsegv_is_named(tmp_path: Path) -> None:
    log = _w(tmp_path, "x.log", "exits with return code = -11\n")
    rep = run_analysis([log], engine="python")
    f = next(x for x in rep.findings if x.rule == "DS113")
    assert "SIGSEGV" in f.message


def test_real_zero3_generate_scenario(capsys) -> None:
    """The sample run (real DeepSpeed, 2 ranks, gloo timeout) with its script: DS202 error."""
    root = Path(__file__).resolve().parents[1]
    d = root / "sample_logs" / "zero3_generate_hang"
    script = root / "scripts" / "scenarios" / "zero3_generate_hang.py"
    if not (d / "generate.log").exists() or not script.exists():
        pytest.skip("sample run not present")
    rc, rep = _analyze_json([str(d / "generate.log"), "--config", str(d / "ds_config.json"),
                             "--script", str(script)], capsys)
    f = _by_rule(rep, "DS202")
    assert rc == 1 and f and f[0]["severity"] == "error"
    assert "does not know ZeRO-3 is on" in f[0]["message"]
    synced = root / "scripts" / "scenarios" / "zero3_generate_synced.py"
    d2 = root / "sample_logs" / "zero3_generate_synced"
    if synced.exists() and (d2 / "generate.log").exists():
        rc, rep = _analyze_json([str(d2 / "generate.log"), "--config", str(d2 / "ds_config.json"),
                                 "--script", str(synced)], capsys)
        assert not _by_rule(rep, "DS202") and not _by_rule(rep, "DS107")


# ------------------------------------------------------------------------- robustness

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**10), st.sampled_from(
    ["auto", "cpu", "nvme", "none", "3", "", "5e8", "true"]), st.floats(allow_nan=False),
    st.just({}), st.just([]))
_CFG = st.fixed_dictionaries({}, optional={
    "train_batch_size": _ODD, "train_micro_batch_size_per_gpu": _ODD,
    "gradient_accumulation_steps": _ODD, "gradient_clipping": _ODD,
    "fp16": st.fixed_dictionaries({}, optional={"enabled": _ODD, "initial_scale_power": _ODD}),
    "bf16": st.fixed_dictionaries({}, optional={"enabled": _ODD}),
    "optimizer": st.fixed_dictionaries({}, optional={"type": _ODD, "params": st.just({"lr": 1})}),
    "zero_optimization": st.fixed_dictionaries({}, optional={
        "stage": _ODD, "overlap_comm": _ODD, "allgather_bucket_size": _ODD,
        "reduce_bucket_size": _ODD, "stage3_max_live_parameters": _ODD,
        "offload_optimizer": st.fixed_dictionaries({}, optional={"device": _ODD}),
        "offload_param": st.fixed_dictionaries({}, optional={"device": _ODD})})})
_LOG_LINES = st.lists(st.sampled_from([
    NAN_LINE, HANG_LINE, SIGKILL_LINES,
    "[2021-11-27 00:36:54,800] [INFO] [stage2.py:1628:step] [deepscale] OVERFLOW! Rank 0 "
    "Skipping step. Attempted loss scale: 1, reducing to 1\n",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 978.00 MiB (GPU 0; 4.00 "
    "GiB total capacity; 1.68 GiB already allocated; 0 bytes free; 2.72 GiB reserved in total by "
    "PyTorch)\n",
    "exits with return code = -11\n",
    "- ds fp16.enabled=True vs hf fp16|fp16_full_eval+fp16_backend(amp)=False\n",
    "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.5e-06, 'epoch': 0.66}\n",
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 7, for "
    "key: store_based_barrier_key:32 (world_size=8, worker_count=4, timeout=0:00:30)\n"]),
    max_size=6)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cfg=_CFG, lines=_LOG_LINES, with_model=st.booleans(), ram=st.integers(0, 2**40),
       script=st.sampled_from(["", "model.generate(x, synced_gpus=False)\n",
                               "HfDeepSpeedConfig(c)\nm.merge_and_unload()\n"]))
def test_rules_never_crash(tmp_path_factory, cfg, lines, with_model, ram, script) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    configs = [_w(tmp, "ds.json", cfg)]
    logs = [_w(tmp, "t.log", "".join(lines))] if lines else []
    model = str(Path(_w(tmp, "m/config.json", LLAMA2_7B)).parent) if with_model else None
    env = _w(tmp, "env.json", {"cpu": {"count": 4, "ram_total_bytes": ram}, "gpus": [],
                               "packages": {}})
    scripts = [_w(tmp, "s.py", script)] if script else []
    rep = run_analysis(logs, configs=configs, model=model, env=env, scripts=scripts,
                       engine="python")
    for f in rep.findings:
        assert f.rule and f.message and f.severity in ("error", "warning", "info")


def test_gpu_oom_in_optimizer_step_lowers_sub_group_size(tmp_path: Path) -> None:
    # hiyouga/LlamaFactory#7532: the OOM traceback runs through ZeRO-3's _optimizer_step.
    log = _w(tmp_path, "oom.log",
             '  File "/root/anaconda3/envs/llama-factory/lib/python3.10/site-packages/deepspeed/'
             'runtime/zero/stage3.py", line 947, in _optimizer_step\n'
             "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 "
             "has a total capacity of 79.32 GiB of which 2.40 GiB is free.\n")
    cfg = _w(tmp_path, "z3.json", {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})
    rep = run_analysis([log], configs=[cfg], engine="python")
    f = next(x for x in rep.findings if x.rule == "DS105")
    assert f.config_path == "zero_optimization.sub_group_size"
    assert f.fix.startswith("Next: the OOM is in the optimizer step (stage3.py _optimizer_step")
    assert f.fix.count("sub_group_size") == 1


def test_bf16_on_t4_from_nvidia_smi_in_the_log(tmp_path: Path) -> None:
    log = _w(tmp_path, "t.log",
             "|   0  Tesla T4            Off  | 00000000:00:04.0 Off |                    0 |\n")
    cfg = _w(tmp_path, "bf.json", {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True}})
    rep = run_analysis([log], configs=[cfg], engine="python")
    f = next(x for x in rep.findings if x.rule == "DS204")
    assert "Tesla T4" in f.message and f.config_path == "bf16.enabled"


def test_lost_peer_after_a_kill_is_left_to_the_kill(tmp_path: Path) -> None:
    # gloo reports the dead rank's closed socket on the survivor; DS106 explains it.
    log = _w(tmp_path, "t.log",
             "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
             "pair.cc:553] Connection closed by peer [127.0.0.1]:8099\n" + SIGKILL_LINES)
    rules = {f.rule for f in run_analysis([log], engine="python").findings}
    assert "DS106" in rules and "DS107" not in rules
