"""dskeys: per-release known-key tables, did-you-mean, and what each release does with a key.

The ``deepspeed``-marked tests re-measure the claims against a real DeepSpeed, in a child process
(the interpreter given by ``--ds-python`` / ``DSDOCTOR_DS_PYTHON``, see conftest.py;
``scripts/install_deepspeed.sh VENV`` makes one), so this suite never imports DeepSpeed itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dsdoctor.facts import dskeys

ROOT = Path(__file__).resolve().parents[1]


RELEASES = ["0.9.5", "0.10.3", "0.11.2", "0.12.6", "0.13.5", "0.14.4", "0.15.4", "0.16.9",
            "0.17.6", "0.18.9", "0.19.8"]


def test_one_table_per_minor_release_from_0_9() -> None:
    assert dskeys.available_releases() == RELEASES
    t = dskeys.table_for("0.19.8")
    assert {"train_batch_size", "zero_optimization", "fp16", "bf16", "optimizer"} <= t.top_level
    assert t.is_strict("zero_optimization") and t.is_strict("zero_optimization.offload_param")
    assert t.is_strict("fp16") and not t.is_strict("optimizer.params")
    assert "stage3_gather_16bit_weights_on_model_save" in t.section_keys("zero_optimization")
    # the engine pops torch_adam / adam_w_mode itself before building the optimizer
    assert {"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode"} <= t.section_keys("optimizer.params")
    assert {"warmup_num_steps", "total_num_steps"} <= t.section_keys("scheduler.params")
    # older releases: fp16 was read key by key (not refused), amp still existed
    old = dskeys.table_for("0.9.5")
    assert not old.is_strict("fp16") and "amp" in old.top_level
    assert "overlap_comm" in old.section_keys("zero_optimization")


def test_comment_keys_are_not_typos() -> None:
    t = dskeys.table_for("0.19.8")
    assert t.check({"_comment": "see README", "aio": {"_note": 1}}) == []
    # ... but a strict section still refuses them, and optimizer.params passes them to the
    # optimizer's constructor (a TypeError), so they are reported there
    (u,) = t.check({"optimizer": {"params": {"_note": 1}}})
    assert u.rejected and "TypeError" in u.reason
    (u,) = t.check({"zero_optimization": {"_comment": "x"}})
    assert u.rejected and u.path == "zero_optimization._comment"


def test_release_selection() -> None:
    assert dskeys.table_for("0.19.8").release == "0.19.8"
    # a run's own minor release: that minor's table (the last patch), even from an earlier patch
    assert dskeys.table_for("0.16.2").release == "0.16.9"
    assert dskeys.table_for("0.10.0").release == "0.10.3"
    assert dskeys.table_for("0.14.5").release == "0.14.4"
    assert dskeys.table_for("0.13").release == "0.13.5"
    # beyond the newest table: the newest below the run
    assert dskeys.table_for("0.19.10").release == "0.19.8"
    assert dskeys.table_for("0.20.1").release == "0.19.8"
    assert dskeys.table_for("1.0.0").release == "0.19.8"
    assert dskeys.table_for("0.5.0").release == "0.9.5"  # older than every table: the oldest
    assert dskeys.table_for("0.8.3").release == "0.9.5"
    assert dskeys.table_for(None).release == "0.19.8"
    assert dskeys.parse_version("v0.14.4+cu121") == (0, 14, 4)


def test_check_reports_ignored_and_refused_keys_with_suggestions() -> None:
    cfg = {"zero_optimisation": {"stage": 3}, "stage": 3,
           "fp16": {"enabled": True, "intial_scale_power": 16},
           "zero_optimization": {"stage": 2, "overlap_com": True, "contigous_gradients": "auto",
                                 "offload_param": {"device": "cpu", "pin_mem": True}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decy": 0.1}},
           "amp": {"enabled": True}}
    got = {u.path: (u.rejected, u.suggestion) for u in dskeys.table_for("0.19.8").check(cfg)}
    assert got == {
        "zero_optimisation": (False, "zero_optimization"),
        "stage": (False, "zero_optimization.stage"),
        "amp": (True, None),
        "fp16.intial_scale_power": (True, "fp16.initial_scale_power"),
        "zero_optimization.overlap_com": (True, "zero_optimization.overlap_comm"),
        # "auto" is dropped before validation: an unknown key set to "auto" is ignored, not refused
        "zero_optimization.contigous_gradients": (False, "zero_optimization.contiguous_gradients"),
        "zero_optimization.offload_param.pin_mem": (True, "zero_optimization.offload_param.pin_memory"),
        # passed to the optimizer's constructor: a TypeError (engine.py _configure_basic_optimizer)
        "optimizer.params.weight_decy": (True, "optimizer.params.weight_decay"),
    }
    old = {u.path: u.rejected for u in dskeys.table_for("0.14.4").check(cfg)}
    assert old["fp16.intial_scale_power"] is False and "amp" not in old
    assert dskeys.releases_rejecting("fp16.intial_scale_power") == ["0.17.6", "0.18.9", "0.19.8"]
    assert dskeys.releases_rejecting("zero_optimization.overlap_com") == RELEASES


def test_healthy_configs_have_no_unknown_keys() -> None:
    for rel in dskeys.available_releases():
        t = dskeys.table_for(rel)
        ok = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8,
                                    "offload_optimizer": {"device": "cpu", "pin_memory": True}},
              "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}
        assert t.check(ok) == [], rel


PROBE = r"""
import json, logging, sys
logging.disable(logging.CRITICAL)
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
cases = json.loads(sys.stdin.read())
out = {"version": deepspeed.__version__}
for name, cfg in cases.items():
    try:
        c = DeepSpeedConfig(cfg)
        out[name] = {"ok": True, "fp16": bool(c.float16_config.enabled), "stage": int(c.zero_optimization_stage),
                     "offload_param": c.zero_config.offload_param is not None,
                     "optimizer_params": c.optimizer_params}
    except Exception as e:
        out[name] = {"ok": False, "error": type(e).__name__, "msg": str(e)[:200]}
print(json.dumps(out))
"""


@pytest.mark.deepspeed
def test_behaviour_claims_hold_on_installed_deepspeed(ds_python: str) -> None:
    """What the rules say DeepSpeed does, measured (0.19.8 on the dev box)."""
    cases = {
        "typo_top_level": {"train_batch_size": 8, "zero_optimisation": {"stage": 3}},
        "typo_in_zero": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}},
        "typo_auto_in_zero": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": "auto"}},
        "typo_in_optimizer_params": {"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}},
        "offload_param_stage2": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
        "fp16_auto": {"train_batch_size": 8, "fp16": {"enabled": "auto"}},
        "batch_auto": {"train_batch_size": "auto"},
        "optimizer_auto": {"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},
        "batch_string": {"train_batch_size": 8, "gradient_accumulation_steps": "8"},
        "fp16_and_bf16": {"train_batch_size": 8, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
        "batch_mismatch": {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        "bf16_with_fp16_keys": {"train_batch_size": 8, "bf16": {"enabled": True, "loss_scale": 0}},
    }
    # DS319's value rules: each value dsdoctor's table accepts/refuses, DeepSpeed must too.
    table = dskeys.table_for("0.19.8")
    values = {"device_upper": {"stage": 3, "offload_param": {"device": "CPU"}},
              "bool_yes": {"stage": 2, "overlap_comm": "yes"},
              "fractional_int": {"stage": 3, "stage3_max_live_parameters": 1500.5},
              "float_int": {"stage": 3, "sub_group_size": 1e9},
              "stage5": {"stage": 5}, "stage_str": {"stage": "2"},
              "bucket0": {"stage": 3, "reduce_bucket_size": 0}}
    for name, z in values.items():
        cases["value_" + name] = {"train_batch_size": 8, "zero_optimization": z}
    r = subprocess.run([ds_python, "-c", PROBE], input=json.dumps(cases), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if not got["version"].startswith("0.19."):
        pytest.skip(f"claims are measured for 0.19.x, found {got['version']}")
    assert got["typo_top_level"]["ok"] and got["typo_top_level"]["stage"] == 0
    assert not got["typo_in_zero"]["ok"] and "Extra inputs" in got["typo_in_zero"]["msg"]
    assert got["typo_auto_in_zero"]["ok"]
    assert got["typo_in_optimizer_params"]["ok"]
    assert got["offload_param_stage2"]["ok"] and got["offload_param_stage2"]["offload_param"]
    assert got["fp16_auto"]["ok"] and got["fp16_auto"]["fp16"] is False
    assert got["batch_auto"]["error"] == "TypeError"
    assert got["optimizer_auto"]["optimizer_params"] == {"lr": "auto"}  # handed on as a string
    assert got["batch_string"]["error"] == "TypeError"
    assert "cannot be simultaneously enabled" in got["fp16_and_bf16"]["msg"]
    assert "10 != 4 * 2 * 1" in got["batch_mismatch"]["msg"]
    assert "Extra inputs" in got["bf16_with_fp16_keys"]["msg"]
    for name, z in values.items():
        predicted_ok = not table.check_values({"zero_optimization": z})
        assert got["value_" + name]["ok"] == predicted_ok, (name, got["value_" + name])


@pytest.mark.deepspeed
def test_shipped_0_19_8_table_matches_installed_deepspeed(ds_python: str, tmp_path: Path) -> None:
    r = subprocess.run([ds_python, str(ROOT / "scripts" / "gen_ds_keys.py"), "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (made,) = list(tmp_path.glob("ds_keys_*.json"))
    if made.name != "ds_keys_0.19.8.json":
        pytest.skip(f"installed DeepSpeed is not 0.19.8 ({made.name})")
    shipped = json.loads((ROOT / "dsdoctor" / "data" / made.name).read_text())
    assert json.loads(made.read_text()) == shipped


# Keys each release introduced, read from the diffs between consecutive tables (and checked
# against DeepSpeed's git history: the field appears in that release's config model or reader).
INTRODUCED = [
    ("0.10.3", "zero_optimization.zero_quantized_weights"),  # ZeRO++ (runtime/zero/config.py)
    ("0.12.6", "zero_optimization.offload_optimizer.ratio"),  # partial optimizer offload
    ("0.13.5", "bf16.immediate_grad_update"),
    ("0.14.4", "zero_optimization.stage3_use_all_reduce_for_fetch_params"),
    ("0.15.4", "aio.use_gds"),  # GPUDirect Storage
    ("0.16.9", "aio.intra_op_parallelism"),  # replaced aio.thread_count
    ("0.17.6", "torch_autocast"),
    ("0.18.9", "bf16.bf16_master_weights_and_grads"),
]


@pytest.mark.parametrize(("release", "path"), INTRODUCED)
def test_key_introduced_in_a_release_is_unknown_to_the_one_before(release: str, path: str) -> None:
    before = RELEASES[RELEASES.index(release) - 1]
    assert dskeys.table_for(release).is_known(path), (release, path)
    assert not dskeys.table_for(before).is_known(path), (before, path)


def test_key_removed_in_a_release_is_unknown_from_then_on() -> None:
    assert dskeys.table_for("0.15.4").is_known("aio.thread_count")
    assert not dskeys.table_for("0.16.9").is_known("aio.thread_count")
    # a config written for 0.16 linted for 0.15 is told the key was renamed the other way
    (u,) = dskeys.table_for("0.15.4").check({"aio": {"intra_op_parallelism": 4}})
    assert u.path == "aio.intra_op_parallelism" and not u.rejected


def test_fp16_section_became_strict_in_0_17() -> None:
    cfg = {"fp16": {"enabled": True, "intial_scale_power": 16}}
    assert [u.rejected for u in dskeys.table_for("0.16.9").check(cfg)] == [False]
    assert [u.rejected for u in dskeys.table_for("0.17.6").check(cfg)] == [True]
    assert dskeys.releases_rejecting("fp16.intial_scale_power") == ["0.17.6", "0.18.9", "0.19.8"]


def test_value_rules_follow_pydantic_of_each_release() -> None:
    # pydantic 2 (DeepSpeed >= 0.15) refuses a fractional int; pydantic 1 truncated it
    frac = {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 3774873.6}}
    assert [b.path for b in dskeys.table_for("0.16.9").check_values(frac)] == \
        ["zero_optimization.stage3_prefetch_bucket_size"]
    assert dskeys.table_for("0.14.4").check_values(frac) == []
    # an offload device outside the enum: refused by pydantic 1 and 2 alike
    upper = {"zero_optimization": {"stage": 3, "offload_param": {"device": "CPU"}}}
    for rel in ("0.9.5", "0.14.4", "0.16.9"):
        (bad,) = dskeys.table_for(rel).check_values(upper)
        assert bad.path == "zero_optimization.offload_param.device", rel


def test_release_ranges_and_table_note() -> None:
    assert dskeys.release_ranges(["0.19.8", "0.9.5", "0.10.3", "0.11.2", "0.16.9"]) == \
        "0.9.5-0.11.2, 0.16.9, 0.19.8"
    assert "table for DeepSpeed 0.16.9, the nearest one (DeepSpeed 0.16.3, from --env" in \
        dskeys.table_note("0.16.3", "env")
    assert dskeys.table_note("0.14.4", "log").endswith("(DeepSpeed 0.14.4, from the log)")


def test_tables_are_read_from_the_release_tags() -> None:
    """Every static table says where it was read from; the 0.9.5/0.14.4 tables first came from the
    PyPI sdists, and the git tags gave the same keys plus the value rules."""
    for rel in RELEASES[:-1]:
        raw = json.loads((ROOT / "dsdoctor" / "data" / f"ds_keys_{rel}.json").read_text())
        assert raw["generated_by"] == f"scripts/gen_ds_keys.py --git DeepSpeed --tag v{rel} (static read, never imported)"


def test_keys_read_through_helpers_that_take_the_key() -> None:
    # get_communication_data_type(param_dict, SEQ_PARALLEL_COMMUNICATION_DATA_TYPE, ...): the key
    # was "seq_parallel_comm_data_type" until 0.16 renamed it
    assert dskeys.table_for("0.15.4").is_known("seq_parallel_comm_data_type")
    assert not dskeys.table_for("0.15.4").is_known("seq_parallel_communication_data_type")
    assert dskeys.table_for("0.16.9").is_known("seq_parallel_communication_data_type")
    assert dskeys.table_for("0.9.5").is_known("communication_data_type")  # the helper's default key


PROBE_ACCEPTS = r"""
import json, logging, sys
logging.disable(logging.CRITICAL)
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
out = {"version": deepspeed.__version__}
for name, cfg in json.loads(sys.stdin.read()).items():
    try:
        DeepSpeedConfig(cfg)
        out[name] = {"ok": True}
    except Exception as e:
        out[name] = {"ok": False, "error": type(e).__name__, "msg": str(e)[:200]}
print(json.dumps(out))
"""


@pytest.mark.deepspeed
def test_table_of_the_installed_release_predicts_what_it_refuses(ds_python: str) -> None:
    """Whatever DeepSpeed is installed (0.19.8 on the dev box; run with --ds-python pointing at
    another install to check its table: passed with 0.16.9 and 0.14.4 made by
    scripts/install_deepspeed.sh): its table's refuse/ignore/accept predictions hold."""
    cases = {
        "zero_typo": {"zero_optimization": {"stage": 2, "overlap_com": True}},
        "fp16_typo": {"fp16": {"enabled": True, "intial_scale_power": 16}},
        "top_typo": {"zero_optimisation": {"stage": 3}},
        "frac_prefetch": {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 3774873.6}},
        "whole_prefetch": {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 3774873}},
        "device_upper": {"zero_optimization": {"stage": 3, "offload_param": {"device": "CPU"}}},
        "stage5": {"zero_optimization": {"stage": 5}},
    }
    probe = {k: {"train_batch_size": 8, **v} for k, v in cases.items()}
    r = subprocess.run([ds_python, "-c", PROBE_ACCEPTS], input=json.dumps(probe), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    table = dskeys.table_for(got["version"])
    for name, cfg in cases.items():
        refused = any(u.rejected for u in table.check(cfg)) or bool(table.check_values(cfg))
        assert got[name]["ok"] == (not refused), (got["version"], table.release, name, got[name])
