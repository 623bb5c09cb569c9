"""dsdoctor.facts.estimate reproduces DeepSpeed's ZeRO-2/ZeRO-3 estimators exactly."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsdoctor.facts.estimate import SCOPE_NOTE, estimate_zero2, estimate_zero3, offload_need

# The Transformers DeepSpeed guide's bigscience/T0_3B table (docs "Memory requirements").
# The guide prints the rounded count "2783M"; the six figures pin the exact count it used to
# 2,783,90x,xxx-2,783,96x,xxx, and the largest layer is the 32128 x 2048 shared embedding.
GUIDE_T0_3B = """\
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 1 GPU per node.
SW: Model with 2783M total params, 65M largest layer params.
  per CPU  |  per GPU |   Options
   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
   62.23GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=1
   62.23GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=0
    0.37GB |  46.91GB | offload_param=none, offload_optimizer=none, zero_init=1
   15.56GB |  46.91GB | offload_param=none, offload_optimizer=none, zero_init=0"""

# Printed by DeepSpeed 0.19.8 estimate_zero3_model_states_mem_needs_all_cold(2783e6, 65e6)
# (its enum device name is shown as the guide shows it: 'cpu ').
DS_0198_T0_ROUND = """\
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 1 GPU per node.
SW: Model with 2783M total params, 65M largest layer params.
  per CPU  |  per GPU |   Options
   69.98GB |   0.24GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
   69.98GB |   0.24GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
   62.20GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=1
   62.20GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=0
    0.36GB |  46.90GB | offload_param=none, offload_optimizer=none, zero_init=1
   15.55GB |  46.90GB | offload_param=none, offload_optimizer=none, zero_init=0"""

# DeepSpeed 0.19.8 estimate_zero2_model_states_mem_needs_all_cold(124439808, 8, 2)
DS_0198_GPT2_Z2 = """\
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 2 nodes, 8 GPUs per node.
SW: Model with 124M total params.
  per CPU  |  per GPU |   Options
   11.13GB |   0.23GB | offload_optimizer=cpu 
    5.56GB |   0.36GB | offload_optimizer=none"""


def test_guide_t0_3b_table() -> None:
    est = estimate_zero3(2_783_930_000, 32128 * 2048, 1, 1)
    assert est.table() == GUIDE_T0_3B


def test_deepspeed_0198_printed_tables() -> None:
    assert estimate_zero3(int(2783e6), int(65e6)).table() == DS_0198_T0_ROUND
    assert estimate_zero2(124_439_808, 8, 2).table() == DS_0198_GPT2_Z2


def test_rows_and_selection() -> None:
    est = estimate_zero3(int(2783e6), int(65e6))
    assert len(est.rows) == 6
    both = est.row(offload_optimizer=True, offload_param=True, zero_init=True)
    assert both.cpu_bytes == int(2783e6 * 18 * 1.5)
    assert both.gpu_bytes == 4 * int(65e6)
    with pytest.raises(KeyError):
        est.row(offload_optimizer=False, offload_param=True)
    z2 = offload_need(2, int(2783e6), None, 1, 1, offload_optimizer=True, offload_param=False)
    assert z2.cpu_bytes == int(2783e6 * 16 * 1.5) and z2.gpu_bytes == 2 * int(2783e6)
    # Multi-node: ZeRO-3 CPU need is divided across nodes (gpus_factor = 1/nodes).
    one = offload_need(3, 10**9, 10**7, 8, 1, True, True)
    two = offload_need(3, 10**9, 10**7, 8, 2, True, True)
    assert two.cpu_bytes == one.cpu_bytes // 2


def test_to_dict_carries_scope_note() -> None:
    d = estimate_zero2(10**9).to_dict()
    assert d["note"] == SCOPE_NOTE and "per node" in SCOPE_NOTE and "not activations" in SCOPE_NOTE
    json.dumps(d)


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        estimate_zero2(0)
    with pytest.raises(ValueError):
        estimate_zero3(10, 1, num_gpus_per_node=0)


# --- against DeepSpeed itself, where it is installed -------------------------------------------

def _ds():
    pytest.importorskip("torch")
    s12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    s3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    return s12, s3


def _normalize(text: str) -> str:
    # Python >= 3.11 formats DeepSpeed's str-enum as 'OffloadDeviceEnum.cpu' (DeepSpeed means 'cpu ').
    return re.sub(r"OffloadDeviceEnum\.cpu", "cpu ", text).strip()


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 10**12), largest=st.integers(1, 10**10),
       gpus=st.integers(1, 16), nodes=st.integers(1, 64))
def test_matches_deepspeed_functions(total: int, largest: int, gpus: int, nodes: int) -> None:
    s12, s3 = _ds()
    for off in (True, False):
        assert offload_need(2, total, None, gpus, nodes, off, False) == \
            estimate_zero2(total, gpus, nodes).row(off)
        cpu, gpu = s12.estimate_zero2_model_states_mem_needs(total, gpus, nodes, off)
        row = estimate_zero2(total, gpus, nodes).row(off)
        assert (row.cpu_bytes, row.gpu_bytes) == (cpu, gpu)
        for offp in ((True, False) if off else (False,)):
            for zi in (True, False):
                cpu, gpu, _ = s3.estimate_zero3_model_states_mem_needs(
                    total, largest, gpus, nodes, off, offp, zi)
                row = estimate_zero3(total, largest, gpus, nodes).row(off, offp, zi)
                assert (row.cpu_bytes, row.gpu_bytes) == (cpu, gpu)


@pytest.mark.parametrize("total,largest,gpus,nodes", [
    (2_783_930_000, 65_798_144, 1, 1), (124_439_808, 38_597_376, 4, 1),
    (6_738_415_616, 131_072_000, 8, 2), (70_553_706_496, 1_050_673_152, 8, 16)])
def test_matches_deepspeed_printed_table(total: int, largest: int, gpus: int, nodes: int) -> None:
    s12, s3 = _ds()
    for fn, mine in ((lambda: s3.estimate_zero3_model_states_mem_needs_all_cold(
                          total, largest, gpus, nodes), estimate_zero3(total, largest, gpus, nodes)),
                     (lambda: s12.estimate_zero2_model_states_mem_needs_all_cold(total, gpus, nodes),
                      estimate_zero2(total, gpus, nodes))):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn()
        assert _normalize(mine.table()) == _normalize(buf.getvalue())


# --- the command -------------------------------------------------------------------------------

def _t0_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 5120,
        "d_kv": 64, "d_model": 2048, "feed_forward_proj": "gated-gelu", "num_heads": 32,
        "num_layers": 24, "vocab_size": 32128}))
    return tmp_path


def test_cli_text_reproduces_guide(tmp_path, capsys) -> None:
    from dsdoctor.cli.main import main

    assert main(["estimate", "--model", str(_t0_dir(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert GUIDE_T0_3B.split("\n", 1)[1] in out  # the guide's ZeRO-3 table, verbatim
    assert "ZeRO-2" in out and "not activations" in out and "per node" in out


def test_cli_json_and_markdown(tmp_path, capsys) -> None:
    from dsdoctor.cli.main import main

    d = _t0_dir(tmp_path)
    assert main(["estimate", "--model", str(d), "--gpus", "8", "--nodes", "2",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["zero3"]["num_nodes"] == 2 and len(data["zero3"]["rows"]) == 6
    assert data["zero3"]["rows"][0]["cpu_bytes"] == int(2_783_959_040 * 18 / 2 * 1.5)
    assert "per node" in data["note"]
    assert main(["estimate", "--model", str(d), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| 70.00 GB | 0.25 GB |" in md and "per node" in md


@pytest.mark.parametrize("argv,needle", [
    (["--params", "abc", "--largest-layer", "1"], "not a number"),
    (["--params", "7e9"], "--largest-layer"), ([], "--model"),
    (["--model", "/nonexistent/x"], "no such file"), (["--params", "1e9", "--gpus", "0",
                                                        "--largest-layer", "1"], "at least 1")])
def test_cli_bad_usage(argv, needle, capsys) -> None:
    from dsdoctor.cli.main import main

    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_unknown_architecture(tmp_path, capsys) -> None:
    from dsdoctor.cli.main import main

    (tmp_path / "config.json").write_text('{"model_type": "mamba", "hidden_size": 768}')
    assert main(["estimate", "--model", str(tmp_path)]) == 2
    assert "--params" in capsys.readouterr().err


# --- fits on this GPU / in this RAM (issue 23) ---------------------------------------------------

def test_cli_fits_column_for_the_given_gpu_and_ram(tmp_path, capsys) -> None:
    from dsdoctor.cli.main import main

    d = _t0_dir(tmp_path)
    assert main(["estimate", "--model", str(d), "--gpu-memory", "24GB", "--host-ram", "64GB"]) == 0
    out = capsys.readouterr().out
    assert "Checked against: 24.00GB per GPU, 64.00GB RAM per node (from --gpu-memory, --host-ram)." in out
    # DeepSpeed's rows, each with whether it fits (70 GB of RAM > 64, 51.86 GB per GPU > 24)
    assert "   62.23GB |   5.19GB | offload_optimizer=cpu  | fits" in out
    assert "   15.56GB |  51.86GB | offload_optimizer=none | no: GPU" in out
    assert "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1 | no: RAM" in out
    assert "activations need room besides" in out


def test_cli_json_is_structured_and_takes_the_snapshots_gpu(tmp_path, capsys) -> None:
    from dsdoctor.cli.main import main

    d = _t0_dir(tmp_path)
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"schema_version": 1, "cpu": {"count": 96, "ram_total_bytes": 1 << 40},
                               "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB",
                                         "memory_total_bytes": 85899345920},
                                        {"index": 1, "name": "NVIDIA A10", "memory_total_bytes": 24 << 30}]}))
    assert main(["estimate", "--model", str(d), "--env", str(env), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    model = data["model"]
    assert model["architecture"] == "T5ForConditionalGeneration" and model["parameters"] == 2_783_959_040
    assert model["layers"] == 24 and model["hidden_size"] == 2048 and model["vocab_size"] == 32128
    assert model["largest_layer"] == {"name": "shared", "parameters": 65_798_144}
    # the smallest GPU fills first
    assert data["hardware"] == {"gpu_memory_bytes": 24 << 30, "host_ram_bytes": 1 << 40,
                                "gpu_name": "NVIDIA A10", "source": str(env)}
    fits = [r["fit"] for r in data["zero2"]["rows"]]
    assert fits == [{"gpu": True, "cpu": True, "fits": True}, {"gpu": False, "cpu": True, "fits": False}]
    # --gpu-memory wins over the snapshot's
    assert main(["estimate", "--model", str(d), "--env", str(env), "--gpu-memory", "80GiB",
                 "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| 15.56 GB | 51.86 GB | `offload_optimizer=none` | fits |" in md
    # without a machine: no fit column, the table as DeepSpeed prints it
    assert main(["estimate", "--params", "7e9", "--largest-layer", "1e8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"] is None and "fit" not in data["zero3"]["rows"][0]
    assert data["model"] == {"name": None, "parameters": 7_000_000_000,
                             "largest_layer": {"name": None, "parameters": 100_000_000}}


@pytest.mark.parametrize("argv,needle", [(["--gpu-memory", "lots"], "not a size"),
                                         (["--host-ram", "0"], "between 1 byte")])
def test_cli_bad_sizes(tmp_path, argv, needle, capsys) -> None:
    from dsdoctor.cli.main import main

    assert main(["estimate", "--model", str(_t0_dir(tmp_path)), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
