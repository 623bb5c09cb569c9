"""dsdoctor.facts.logfacts and the fact patterns of dsdoctor/logs/formats/facts.yaml."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from dsdoctor.facts.logfacts import coerce, config_from_engine_items, extract, parse_argv, parse_kv_repr
from dsdoctor.logs.formats import load_patterns
from dsdoctor.logs.literal_engine import expanded_literals
from dsdoctor.logs.prefilter import hyperscan_available, make_engine
from dsdoctor.logs.reader import normalize
from dsdoctor.logs.scan import scan_text
from dsdoctor.model import Evidence, Fact

REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "real_logs"

# A real DeepSpeed 0.19.8 run (deepspeed launcher, CPU accelerator, ZeRO-2 + optimizer offload
# to CPU, bf16, AdamW; config "log_level": "info"), excerpted: launcher lines, a subset of the
# engine's printed attributes and the whole printed user config (too long for the join window).
# (The venv path of the run is written as /opt/venv-ds: a path of the machine that ran it.)
DS_0198_ZERO2_OFFLOAD = r'''[2026-11-21 11:42:09,989] [INFO] [runner.py:618:main] cmd = /opt/venv-ds/bin/python3 -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMF19 --master_addr=127.0.0.1 --master_port=29578 --enable_each_rank_log=None --log_level=info run.py
[2026-11-21 11:42:11,278] [INFO] [launch.py:152:main] WORLD INFO DICT: {'localhost': [0]}
[2026-11-21 11:42:11,278] [INFO] [launch.py:158:main] nnodes=1, num_local_procs=1, node_rank=0
[2026-11-21 11:42:11,279] [INFO] [launch.py:169:main] global_rank_mapping=defaultdict(<class 'list'>, {'localhost': [0]})
[2026-11-21 11:42:11,279] [INFO] [launch.py:170:main] dist_world_size=1
[2026-11-21 11:42:11,279] [INFO] [launch.py:174:main] Setting CUDA_VISIBLE_DEVICES=0
[2026-11-21 11:42:11,284] [INFO] [launch.py:245:main] process 12848 spawned with command: ['/opt/venv-ds/bin/python3', '-u', 'run.py', '--local_rank=0']
[2026-11-21 11:42:18,046] [INFO] [config.py:674:print] DeepSpeedEngine configuration:
[2026-11-21 11:42:18,047] [INFO] [config.py:678:print]   bfloat16_config .............. enabled=True immediate_grad_update=False check_grad_overflow=True bf16_master_weights_and_grads=False bf16_optimizer_states=False
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   float16_config ............... enabled=False auto_cast=False loss_scale=0.0 initial_scale_power=16 loss_scale_window=1000 hysteresis=2 consecutive_hysteresis=False min_loss_scale=1 fp16_master_weights_and_grads=False
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   gradient_accumulation_steps .. 4
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   gradient_clipping ............ 1.0
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   optimizer_name ............... adamw
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   optimizer_params ............. {'lr': 3e-05, 'betas': [0.9, 0.999], 'eps': 1e-08, 'weight_decay': 0.0}
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   scheduler_name ............... None
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   train_batch_size ............. 8
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   train_micro_batch_size_per_gpu  2
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   world_size ................... 1
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   zero_config .................. stage=2 contiguous_gradients=True reduce_scatter=True reduce_bucket_size=500000000 use_multi_rank_bucket_allreduce=True allgather_partitions=True allgather_bucket_size=500000000 overlap_comm=True compute_grad_norm=True load_from_fp32_weights=True elastic_checkpoint=False offload_param=None offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu', nvme_path=None, buffer_count=4, pin_memory=True, pipeline_read=False, pipeline_write=False, fast_init=False, ratio=1.0, super_offload=False, cpuadam_cores_perc=0.8) zenflow=None sub_group_size=1000000000 cpu_offload_param=None cpu_offload_use_pin_memory=None cpu_offload=None prefetch_bucket_size=50000000 param_persistence_threshold=100000 model_persistence_threshold=9223372036854775807 max_live_parameters=1000000000 max_reuse_distance=1000000000 gather_16bit_weights_on_model_save=False module_granularity_threshold=0 use_all_reduce_for_fetch_params=False allgather_sequential=False stage3_gather_fp16_weights_on_model_save=False ignore_unused_parameters=True legacy_stage1=False round_robin_gradients=False parameter_alignment=False zero_hpz_partition_size=1 zero_quantized_weights=False zero_quantized_nontrainable_weights=False zero_quantized_gradients=False memory_efficient_linear=True pipeline_loading_checkpoint=False override_module_apply=True log_trace_cache_warnings=False enable_sanity_checks=False save_muon_momentum_buffer_in_memory=False leaf_module=DeepSpeedZeroLeafModuleConfig(classes=['transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock', 'transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock', 'transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock'], names=[], name_suffixes=[])
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   zero_force_ds_cpu_optimizer .. True
[2026-11-21 11:42:18,048] [INFO] [config.py:678:print]   zero_optimization_stage ...... 2
[2026-11-21 11:42:18,049] [INFO] [config.py:664:print_user_config]   json = {
    "train_micro_batch_size_per_gpu": 2, 
    "gradient_accumulation_steps": 4, 
    "gradient_clipping": 1.0, 
    "optimizer": {
        "type": "AdamW", 
        "params": {
            "lr": 3e-05, 
            "betas": [0.9, 0.999], 
            "eps": 1e-08, 
            "weight_decay": 0.0
        }
    }, 
    "zero_optimization": {
        "stage": 2, 
        "overlap_comm": true, 
        "reduce_bucket_size": 5.000000e+08, 
        "allgather_bucket_size": 5.000000e+08, 
        "offload_optimizer": {
            "device": "cpu", 
            "pin_memory": true
        }
    }, 
    "bf16": {
        "enabled": true
    }, 
    "steps_per_print": 1, 
    "log_level": "info"
}
[2026-11-21 11:42:19,286] [INFO] [launch.py:285:main] Process 12848 exits successfully.
'''

# The same release with a small config: the whole json block fits the pattern's join window.
DS_0198_SMALL_JSON = r'''[2026-11-21 11:48:50,655] [INFO] [config.py:664:print_user_config]   json = {
    "train_micro_batch_size_per_gpu": 2, 
    "gradient_accumulation_steps": 4, 
    "bf16": {
        "enabled": true
    }, 
    "log_level": "info"
}
[2026-11-21 11:48:55,312] [INFO] [launch.py:285:main] Process 17326 exits successfully.
'''

# --------------------------------------------------------------------------- facts.yaml samples

FACT_PATTERNS = [p for p in load_patterns() if p.format == "facts"]
SAMPLES = [(p, i, s) for p in FACT_PATTERNS for i, s in enumerate(p.samples)]
NEGATIVES = [(p, i, n) for p in FACT_PATTERNS for i, n in enumerate(p.negatives)]


def _match(pattern, line: str):
    first, *rest = line.split("\n")
    following = [normalize(x.encode("utf-8")).text for x in rest]
    return pattern.match_lines(normalize(first.encode("utf-8")).text, following)


def test_fact_patterns_are_facts_with_sources() -> None:
    assert len(FACT_PATTERNS) >= 20
    for p in FACT_PATTERNS:
        assert p.is_fact, p.id
        assert p.negatives, f"{p.id}: needs a real negative line"
        for s in p.samples:
            assert s.get("source"), p.id
        for name in p.fields:
            assert name in p.regex.groupindex, f"{p.id}: field {name} is not a group"
        assert expanded_literals(p.prefilter, p.caseless), p.id


@pytest.mark.parametrize("pattern,i,sample", SAMPLES, ids=[f"{p.id}-{i}" for p, i, _ in SAMPLES])
def test_fact_sample_matches(pattern, i, sample) -> None:
    got = _match(pattern, sample["line"])
    assert got is not None, f"{pattern.id} sample {i} did not match"
    for key, want in (sample.get("values") or {}).items():
        assert key in got, f"{pattern.id} sample {i}: {key} not extracted ({got})"
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            assert got[key] == pytest.approx(want)
        else:
            assert str(got[key]) == str(want)
    first = sample["line"].split("\n")[0]
    assert re.search(pattern.prefilter.encode(), first.encode(),
                     re.IGNORECASE if pattern.caseless else 0), f"{pattern.id}: prefilter misses"


@pytest.mark.parametrize("pattern,i,neg", NEGATIVES, ids=[f"{p.id}-neg{i}" for p, i, _ in NEGATIVES])
def test_fact_negative(pattern, i, neg) -> None:
    assert _match(pattern, neg) is None


@pytest.mark.parametrize("engine", ["python"] + (["hyperscan"] if hyperscan_available() else []))
def test_engines_select_fact_samples(engine) -> None:
    patterns = list(load_patterns())
    eng = make_engine(patterns, engine)
    index = {p.id: k for k, p in enumerate(patterns)}
    filler = b"[2023-01-15 19:09:56,630] [INFO] [utils.py:827:see_memory_usage] Engine before step\n"
    for p, i, s in SAMPLES:
        raw = s["line"].split("\n")[0].encode()
        data = filler * 3 + raw + b"\n" + filler * 3
        start = len(filler) * 3
        args = (data, len(data)) if len(inspect.signature(eng.candidates).parameters) >= 2 \
            else (data,)
        hits = {idx for off, idx in eng.candidates(*args) if start <= off < start + len(raw) + 1}
        assert index[p.id] in hits, f"{engine}: {p.id} sample {i} not selected"


# --------------------------------------------------------------------------- parsing helpers

def test_coerce() -> None:
    assert coerce("True") is True and coerce("None") is None and coerce("500,000,000") == 5 * 10**8
    assert coerce("3e-05") == 3e-05 and coerce("16") == 16 and coerce("'cpu'") == "cpu"
    assert coerce("abc") == "abc" and coerce("nan") == "nan"


def test_parse_kv_repr_real_zero_config() -> None:
    line = next(ln for ln in DS_0198_ZERO2_OFFLOAD.splitlines() if "zero_config" in ln)
    text = line.split("zero_config .................. ", 1)[1]
    d = parse_kv_repr(text)
    assert d["stage"] == 2 and d["overlap_comm"] is True and d["reduce_bucket_size"] == 500000000
    assert d["offload_param"] is None
    assert d["offload_optimizer"]["device"] == "cpu" and d["offload_optimizer"]["pin_memory"] is True
    assert d["leaf_module"]["classes"][0].startswith("transformers.models.mixtral")
    assert d["override_module_apply"] is True


def test_parse_argv() -> None:
    argv = ["/usr/bin/python3", "-u", "main.py", "--local_rank=0", "--data_path", "Dahoas/rm-static",
            "Dahoas/full-hh-rlhf", "--model_name_or_path", "facebook/opt-125m",
            "--per_device_train_batch_size", "8", "--learning_rate", "9.65e-6", "--fp16",
            "--deepspeed"]
    script, rest, args = parse_argv(argv)
    assert script == "main.py" and rest[0] == "--local_rank=0"
    assert args["data_path"] == ["Dahoas/rm-static", "Dahoas/full-hh-rlhf"]
    assert args["per_device_train_batch_size"] == 8 and args["learning_rate"] == 9.65e-6
    assert args["fp16"] is True and args["deepspeed"] is True and args["local_rank"] == 0
    assert parse_argv(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2"]) == \
        (None, (), {})


# --------------------------------------------------------------------------- end to end

def test_real_ds_0198_run() -> None:
    # scan_text: no file to re-read the long json block from, so the attribute dump is used.
    scan = scan_text(DS_0198_ZERO2_OFFLOAD, "<excerpt>", engine="python")
    lf = extract(scan.facts)
    # The runner prints its own command; the launcher prints the spawned script's argv.
    assert {li.launcher for li in lf.launches} == {"deepspeed"}
    assert lf.best_launch().script == "run.py"
    assert lf.world_size == 1 and lf.nodes == 1
    assert lf.ds_config_source == "engine"  # the 29-line json block exceeds the join window
    cfg = lf.ds_config
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 4
    assert cfg["train_batch_size"] == 8 and cfg["gradient_clipping"] == 1.0
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"]["enabled"] is False
    assert cfg["fp16"]["initial_scale_power"] == 16
    z = cfg["zero_optimization"]
    assert z["stage"] == 2 and z["overlap_comm"] is True
    assert z["offload_optimizer"]["device"] == "cpu" and "offload_param" not in z
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 3e-05, "betas": [0.9, 0.999],
                                                            "eps": 1e-08, "weight_decay": 0.0}}
    assert cfg["zero_force_ds_cpu_optimizer"] is True


def test_real_small_json_block() -> None:
    lf = extract(scan_text(DS_0198_SMALL_JSON, "ds.log", engine="python").facts)
    assert lf.ds_config_source == "json"
    assert lf.ds_config == {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                            "bf16": {"enabled": True}, "log_level": "info"}


def test_old_flat_engine_dump() -> None:
    # DeepSpeed 0.9 (deepspeedai/DeepSpeed#3544) printed flat attributes.
    cfg = config_from_engine_items({
        "fp16_enabled": "True", "initial_dynamic_scale": "65536",
        "dynamic_loss_scale_args": "{'init_scale': 65536, 'scale_window': 1000, "
                                   "'delayed_shift': 2, 'consecutive_hysteresis': False, "
                                   "'min_scale': 1}",
        "zero_optimization_stage": "3", "gradient_accumulation_steps": "2"})
    assert cfg["fp16"] == {"enabled": True, "initial_scale_power": 16, "loss_scale_window": 1000,
                           "hysteresis": 2, "min_loss_scale": 1}
    assert cfg["zero_optimization"] == {"stage": 3} and cfg["gradient_accumulation_steps"] == 2


def _ev(line: int = 1, text: str = "") -> Evidence:
    return Evidence("x.log", line, text)


def test_trainer_args_dump_wins_over_command_line() -> None:
    facts = [
        Fact("launch-cmd", {"cmd": "deepspeed --num_gpus 8 run_clm.py --model_name_or_path "
                                   "google-t5/t5-small --fp16 --per_device_train_batch_size 4"},
             _ev(1)),
        Fact("trainer-args-dump", {"cls": "TrainingArguments"}, _ev(2)),
        Fact("trainer-arg", {"key": "per_device_train_batch_size", "value": "8"}, _ev(3)),
    ]
    lf = extract(facts)
    assert lf.trainer_args["per_device_train_batch_size"] == 8 and lf.trainer_args["fp16"] is True
    assert lf.model_name == "google-t5/t5-small" and lf.uses_trainer is True
    assert lf.launches[0].launcher == "deepspeed" and lf.mixed_precision() == "fp16"


def test_versions_gpus_params() -> None:
    facts = [Fact("package-version", {"package": "PyTorch", "version": "2.0.1+cu117"}, _ev()),
             Fact("package-version", {"package": "DeepSpeed", "version": "0.9.2"}, _ev()),
             Fact("gpu-name", {"index": 0, "name": "NVIDIA A100-SXM4-80GB"}, _ev()),
             Fact("num-elems", {"num_tensors": 291, "num_elems_b": 6.74}, _ev()),
             Fact("trainable-params", {"trainable": 4194304, "total": 6742609920}, _ev()),
             Fact("accelerate-mixed-precision", {"mixed_precision": "fp16"}, _ev()),
             Fact("accelerate-ds-config", {"dict": "{'zero_optimization': {'stage': 3}}"}, _ev())]
    lf = extract(facts)
    assert lf.versions == {"torch": "2.0.1+cu117", "deepspeed": "0.9.2"}
    assert lf.gpus == [{"index": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    assert lf.num_params == 6742609920 and lf.trainable_params == 4194304
    assert lf.mixed_precision() == "fp16"
    assert lf.accelerate_ds_config == {"zero_optimization": {"stage": 3}}


def test_garbage_values_are_ignored() -> None:
    facts = [Fact("launch-argv", {"argv": "[__import__('os').system('x')]"}, _ev()),
             Fact("ds-config-json", {"json": "{not json"}, _ev()),
             Fact("accelerate-ds-config", {"dict": "{1: open('f')}"}, _ev())]
    lf = extract(facts)
    assert lf.launches == [] and lf.ds_config is None and lf.accelerate_ds_config is None


@pytest.mark.skipif(not (REAL_LOGS / "cpu-oom__ds3232-dschat-opt125m-return-code-9.log").exists(),
                    reason="shared real logs not present")
def test_real_log_sigkill_argv() -> None:
    text = (REAL_LOGS / "cpu-oom__ds3232-dschat-opt125m-return-code-9.log").read_text()
    lf = extract(scan_text(text, "ds3232.log", engine="python").facts)
    assert lf.best_launch().script == "main.py"
    assert lf.model_name == "facebook/opt-125m"
    assert lf.trainer_args.get("zero_stage") is not None


def test_json_block_with_inf() -> None:
    # The Trainer sets steps_per_print to inf; DeepSpeed prints it as a bare inf.
    lf = extract([Fact("ds-config-json", {"json": '{ "steps_per_print": inf, "train_batch_size": 8 }'},
                       _ev())])
    assert lf.ds_config_source == "json" and lf.ds_config["train_batch_size"] == 8
    assert lf.ds_config["steps_per_print"] == float("inf")


# --------------------------------------------------------------------------- robustness

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise(text: str) -> None:
    assert isinstance(parse_kv_repr(text), dict)
    coerce(text)
    parse_argv(text.split())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(
    st.sampled_from(["launch-cmd", "launch-argv", "engine-config-item", "ds-config-json",
                     "accelerate-ds-config", "package-version", "trainer-arg", "world-size",
                     "num-elems", "trainable-params", "gpu-memory", "gpu-name"]),
    st.dictionaries(st.sampled_from(["cmd", "argv", "key", "value", "json", "dict", "package",
                                     "version", "world_size", "num_elems_b", "trainable",
                                     "total", "index", "name"]),
                    st.one_of(st.text(max_size=80), st.integers(), st.floats())),
), max_size=12))
def test_extract_never_raises(items) -> None:
    lf = extract([Fact(n, v, _ev()) for n, v in items])
    assert lf.world_size is None or isinstance(lf.world_size, int)


def test_huge_integer_text_stays_text() -> None:
    assert coerce("9" * 5000) == "9" * 5000


@pytest.mark.parametrize("compressed", [False, True])
def test_long_json_block_is_read_back_from_the_file(tmp_path, compressed) -> None:
    import gzip

    from dsdoctor.logs.scan import scan_files

    data = DS_0198_ZERO2_OFFLOAD.encode()
    p = tmp_path / ("ds.log.gz" if compressed else "ds.log")
    p.write_bytes(gzip.compress(data) if compressed else data)
    lf = extract(scan_files([str(p)], engine="python").facts)
    assert lf.ds_config_source == "json"
    assert lf.ds_config == {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-05, "betas": [0.9, 0.999],
                                                  "eps": 1e-08, "weight_decay": 0.0}},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8,
                              "allgather_bucket_size": 5e8,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "bf16": {"enabled": True}, "steps_per_print": 1, "log_level": "info"}


def test_truncated_json_block_falls_back(tmp_path) -> None:
    from dsdoctor.facts.logfacts import read_json_block

    text = DS_0198_ZERO2_OFFLOAD.rsplit("}", 2)[0]  # the block's closing braces cut off
    p = tmp_path / "cut.log"
    p.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "json = {" in ln)
    assert read_json_block(str(p), line) is None
    assert read_json_block(str(tmp_path / "missing.log"), line) is None
    assert read_json_block("-", 1) is None
    lf = extract(scan_text(text, str(p), engine="python").facts)
    assert lf.ds_config_source == "engine"


def test_json_block_text_found_within_the_search_window(tmp_path) -> None:
    # The report looks for the block just after DeepSpeed's key dump: the same reader, one read.
    from dsdoctor.facts.printed import read_json_block_text

    p = tmp_path / "ds.log"
    p.write_text(DS_0198_ZERO2_OFFLOAD)
    line = next(i for i, ln in enumerate(DS_0198_ZERO2_OFFLOAD.splitlines(), 1) if "json = {" in ln)
    found = read_json_block_text(str(p), line - 2, search=3)
    assert found is not None and found[0] == line and found[1].startswith("{")
    assert found[1].rstrip().endswith("}") and '"stage": 2' in found[1]
    assert read_json_block_text(str(p), line - 2) is None  # not at that line, no search
    assert read_json_block_text(str(p), line - 3, search=2) is None  # outside the window
