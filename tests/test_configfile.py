"""configfile: positions of every key, duplicates, Accelerate configs, bad input -> one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import load_config, lookup, parse_json, split_path

# The ZeRO-3 template of the Transformers DeepSpeed guide (auto values filled by the Trainer).
ZERO3 = """{
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1
    },
    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": "auto",
            "betas": "auto",
            "eps": "auto",
            "weight_decay": "auto"
        }
    },
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {
            "device": "cpu",
            "pin_memory": true
        },
        "stage3_gather_16bit_weights_on_model_save": true
    },
    "train_micro_batch_size_per_gpu": "auto"
}
"""


def write(tmp: Path, name: str, text: str | bytes) -> str:
    p = tmp / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return str(p)


def test_json_positions_match_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "ds.json", ZERO3)
    doc = load_config(path)
    lines = ZERO3.splitlines()
    assert doc.kind == "deepspeed"
    assert doc.get("zero_optimization.offload_optimizer.device") == "cpu"
    for dotted in ("fp16.enabled", "optimizer.params.lr", "zero_optimization.stage",
                   "zero_optimization.offload_optimizer.pin_memory", "train_micro_batch_size_per_gpu"):
        pos = doc.locate(dotted)
        assert pos is not None
        key = dotted.rsplit(".", 1)[-1]
        # line and column point at the opening quote of the key itself
        assert lines[pos.line - 1][pos.col - 1:].startswith(f'"{key}"'), dotted
    assert doc.data == json.loads(ZERO3)
    # an unwritten key falls back to its nearest written ancestor
    assert doc.line("zero_optimization.offload_param.device") == doc.line("zero_optimization")


def test_list_items_and_paths(tmp_path: Path) -> None:
    doc = load_config(write(tmp_path, "ds.json",
                            '{"optimizer": {"params": {"betas": [0.9,\n 0.95]}}}'))
    assert doc.get("optimizer.params.betas[1]") == 0.95
    assert doc.locate("optimizer.params.betas[1]").line == 2
    assert split_path("a.b[2].c") == ["a", "b", 2, "c"]
    assert lookup({"a": [1, {"c": 3}]}, "a[1].c") == 3


def test_duplicates_are_recorded_not_fatal(tmp_path: Path) -> None:
    text = '{\n  "zero_optimization": {\n    "stage": 2,\n    "stage": 3\n  }\n}\n'
    doc = load_config(write(tmp_path, "ds.json", text))
    assert doc.get("zero_optimization.stage") == 3  # last wins, like json.load
    (dup,) = doc.duplicates
    assert (dup.path, dup.first.line, dup.pos.line) == ("zero_optimization.stage", 3, 4)


def test_hjson_tolerances_deepspeed_accepts(tmp_path: Path) -> None:
    # DeepSpeed reads its config with hjson: comments and trailing commas load there.
    doc = load_config(write(tmp_path, "ds.json",
                            '{\n  // ZeRO-2\n  "zero_optimization": {"stage": 2,},\n  # x\n}\n'))
    assert doc.get("zero_optimization.stage") == 2
    assert doc.line("zero_optimization.stage") == 3


@pytest.mark.parametrize("text,expect", [
    ('{"a": [1, 2', "ds.json:1:12: expected ',' or ']'"),
    ('[1, 2]', "ds.json:1:1: the top level must be a JSON object"),
    ('', "ds.json:1:1: the file is empty"),
    ('{"a": tru}', "ds.json:1:7: unexpected character"),
    ('{"a": 1}\n{"b": 2}', "ds.json:2:1: extra data"),
    ('{"a": "unterminated}', "ds.json:1:7: unterminated string"),
])
def test_bad_json_is_one_line_usage_error(tmp_path: Path, text: str, expect: str) -> None:
    path = write(tmp_path, "ds.json", text)
    with pytest.raises(UsageError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(str(tmp_path / expect.split(":")[0]) + ":" + expect.split(":", 1)[1]), msg


def test_absurd_nesting_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "ds.json", '{"a":' * 150 + "1" + "}" * 150)
    with pytest.raises(UsageError, match="nested deeper than 100"):
        load_config(path)
    ypath = write(tmp_path, "deep.yaml", "compute_environment: LOCAL_MACHINE\nx: " + "[" * 150 + "]" * 150)
    with pytest.raises(UsageError, match="nested deeper than 100"):
        load_config(ypath)


def test_binary_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"bin\.json:2:1: binary data"):
        load_config(write(tmp_path, "bin.json", b'{\n\x00\x01}'))
    with pytest.raises(UsageError, match="not UTF-8"):
        load_config(write(tmp_path, "latin.json", b'{"a": "\xe9"}'))
    with pytest.raises(UsageError, match="no such config file"):
        load_config(str(tmp_path / "absent.json"))
    with pytest.raises(UsageError, match="is a directory"):
        load_config(str(tmp_path))


def test_yaml_errors_and_alias_bomb(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"bad\.yaml:2:\d+: "):
        load_config(write(tmp_path, "bad.yaml", "distributed_type: DEEPSPEED\n  x: : ]\n"))
    with pytest.raises(UsageError, match="top level must be a mapping"):
        load_config(write(tmp_path, "list.yaml", "- a\n- b\n"))
    bomb = "compute_environment: LOCAL_MACHINE\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
    prev = "a"
    for i in range(8):
        bomb += f"l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        prev = f"l{i}"
    with pytest.raises(UsageError, match="alias bomb"):
        load_config(write(tmp_path, "bomb.yaml", bomb))
    # Python tags are not constructed (SafeLoader only): refused, never executed.
    with pytest.raises(UsageError):
        load_config(write(tmp_path, "evil.yaml",
                          "compute_environment: LOCAL_MACHINE\nx: !!python/object/apply:os.system ['echo hi']\n"))


ACCEL = """compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_multinode_launcher: standard
  gradient_accumulation_steps: 4
  offload_optimizer_device: cpu
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
mixed_precision: bf16
num_processes: 8
"""


def test_accelerate_config_synthesizes_its_deepspeed_config(tmp_path: Path) -> None:
    doc = load_config(write(tmp_path, "default_config.yaml", ACCEL))
    assert doc.kind == "accelerate"
    ds = doc.deepspeed
    assert ds is not None and ds.synthesized
    assert ds.data == {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                       "gradient_accumulation_steps": 4, "bf16": {"enabled": True}}
    # positions point at the YAML line of the Accelerate key it came from
    assert ds.line("zero_optimization.stage") == 9
    assert ds.line("bf16.enabled") == 11
    assert doc.line("deepspeed_config.zero3_init_flag") == 8


def test_accelerate_config_follows_deepspeed_config_file(tmp_path: Path) -> None:
    sub = tmp_path / "configs"
    sub.mkdir()
    write(sub, "ds_z3.json", ZERO3)
    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
           "deepspeed_config:\n  deepspeed_config_file: ds_z3.json\n  zero3_init_flag: true\n")
    doc = load_config(write(sub, "acc.yaml", acc))
    assert doc.deepspeed is not None and not doc.deepspeed.synthesized
    assert doc.deepspeed.path.endswith("ds_z3.json")
    assert doc.deepspeed.get("zero_optimization.stage") == 3
    # a missing referenced file is a note, not a crash
    doc2 = load_config(write(tmp_path, "acc2.yaml", acc.replace("ds_z3.json", "nope.json")))
    assert doc2.deepspeed is None and "not found" in doc2.notes[0]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_json_parser_agrees_with_json_module(value) -> None:
    text = json.dumps({"root": value}, indent=1)
    data, positions, dups = parse_json(text, "x.json")
    assert data == json.loads(text) and not dups
    for pos in positions.values():
        assert 1 <= pos.line <= text.count("\n") + 1


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_json_parser_never_crashes(text: str) -> None:
    try:
        parse_json(text, "x.json")
    except UsageError as exc:
        assert "\n" not in str(exc)
