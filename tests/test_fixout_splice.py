"""--fix-out edits only the bytes it fixes (issue 20, item 7).

Every real config in sample_logs/*/ds_config.json and every config a rule example writes gets each
of its members set, deleted and renamed, and a key added to each object; the copy must differ from
the input only on the lines of that member (plus one comma), and read back as the fixed config.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.engine import load_rules
from dsdoctor.diagnose.fixout import apply_changes, apply_to_text
from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import json_layout, parse_json

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(ROOT.glob("sample_logs/*/ds_config.json"))


def _example_texts() -> list[tuple[str, str]]:
    out = []
    for rule in load_rules():
        for kind in ("fire", "silent"):
            for i, ex in enumerate(rule.examples[kind]):
                cfg = ex.get("config")
                if isinstance(cfg, str) and cfg.lstrip().startswith("{"):
                    out.append((f"{rule.code}-{kind}-{i}", cfg))
    return out


CONFIGS = [(p.parent.name, p.read_text(encoding="utf-8")) for p in SAMPLES] + _example_texts()


def _changed(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines removed from and added to ``before`` (a line diff)."""
    gone: list[str] = []
    new: list[str] = []
    sm = difflib.SequenceMatcher(a=before.splitlines(True), b=after.splitlines(True),
                                 autojunk=False)
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        if op != "equal":
            gone += sm.a[a0:a1]
            new += sm.b[b0:b1]
    return gone, new


def _without_one_comma(gone: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """Drop a pair of lines that differ only by the comma after a value (the neighbour's)."""
    for g in gone:
        for n in new:
            if _cut(g, n) == "," or _cut(n, g) == ",":
                return [x for x in gone if x is not g], [x for x in new if x is not n]
    return gone, new


def _cut(longer: str, shorter: str) -> str:
    """The one contiguous piece ``longer`` lost to become ``shorter`` ("" when it is not one)."""
    head = len(os.path.commonprefix([longer, shorter]))
    tail = len(os.path.commonprefix([longer[head:][::-1], shorter[head:][::-1]]))
    return longer[head:len(longer) - tail] if head + tail == len(shorter) else ""


def _leaf_members(text: str) -> list[str]:
    """Members whose value is not an object and sits on its key's line (one line to edit)."""
    layout = json_layout(text, "x.json")
    out = []
    for path, m in layout.members.items():
        value = text[m.value_start:m.value_end]
        if "\n" not in text[m.key_start:m.value_end] and not value.startswith("{") \
                and path not in layout.shadowed and "[" not in path:
            out.append(path)
    return out


@pytest.mark.parametrize("name,text", CONFIGS, ids=[n for n, _ in CONFIGS])
def test_every_untouched_byte_stays(name: str, text: str) -> None:
    data, _pos, _dups = parse_json(text, name)
    leaves = _leaf_members(text)
    assert leaves or not data, name
    for path in leaves:
        key = json.dumps(path.rsplit(".", 1)[-1])
        m = json_layout(text, name).members[path]
        key_line = text.splitlines(True)[text.count("\n", 0, m.key_start)]
        # set: only the member's line changes
        out, done = apply_to_text(text, [{"op": "set", "path": path, "new": "x-y"}])
        gone, new = _changed(text, out)
        assert done and len(gone) == len(new) == 1 and key in gone[0], (name, path, gone, new)
        assert new[0] == gone[0].replace(text[m.value_start:m.value_end], '"x-y"', 1)
        # delete: its line goes (or, among siblings on one line, its bytes), and one comma
        out, done = apply_to_text(text, [{"op": "delete", "path": path}])
        assert done, (name, path)
        gone, new = _without_one_comma(*_changed(text, out))
        if new:
            assert len(gone) == len(new) == 1 and key in _cut(gone[0], new[0]), (name, path)
        else:
            assert gone == [key_line], (name, path, gone)
        # rename in place: only the key's spelling changes
        out, done = apply_to_text(text, [{"op": "rename", "path": path,
                                          "new_path": path + "_x"}])
        gone, new = _changed(text, out)
        assert len(gone) == len(new) == 1 and new[0] == gone[0].replace(
            key, json.dumps(path.rsplit(".", 1)[-1] + "_x"), 1), (name, path, gone, new)
    # add a key to each object: one new line (or the siblings' line), one comma
    layout = json_layout(text, name)
    for obj_path in list(layout.objects)[:20]:
        key = f"{obj_path}.dsdoctor_new" if obj_path else "dsdoctor_new"
        out, done = apply_to_text(text, [{"op": "set", "path": key, "new": 5e8}])
        assert done
        gone, new = _without_one_comma(*_changed(text, out))
        assert len(new) - len(gone) <= 1 and all("dsdoctor_new" in n or n.strip() in ("{", "}")
                                                 for n in new), (name, key, gone, new)
        assert "5e8" in out or "500000000" in out


def test_layout_comments_numbers_and_crlf_stay(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        {
            // ZeRO-2 for the 7B run
            "train_micro_batch_size_per_gpu": "4",   # quoted by the launcher script
            "zero_optimization": {
                "stage": 2,
                "reduce_bucket_size": 5e8,  /* the guide's value */
                "allgather_bucket_size": 5E8,
                "overlap_com": true,
                "offload_param": {
                    "device": "cpu"
                }
            },
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}},
        }""").replace("\n", "\r\n")
    changes = [
        {"op": "set", "path": "train_micro_batch_size_per_gpu", "old": "4", "new": 4},
        {"op": "rename", "path": "zero_optimization.overlap_com",
         "new_path": "zero_optimization.overlap_comm"},
        {"op": "delete", "path": "zero_optimization.offload_param"},
        {"op": "set", "path": "zero_optimization.reduce_bucket_size", "old": 5e8, "new": 2e8},
        {"op": "set", "path": "bf16.enabled", "new": True},
        {"op": "set", "path": "optimizer.params.weight_decay", "new": 0.01},
    ]
    out, done = apply_to_text(text, changes)
    assert len(done) == 6
    assert out == textwrap.dedent("""\
        {
            // ZeRO-2 for the 7B run
            "train_micro_batch_size_per_gpu": 4,   # quoted by the launcher script
            "zero_optimization": {
                "stage": 2,
                "reduce_bucket_size": 2e8,  /* the guide's value */
                "allgather_bucket_size": 5E8,
                "overlap_comm": true
            },
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.01}},
            "bf16": {
                "enabled": true
            },
        }""").replace("\n", "\r\n")
    assert json_layout(out, "x").data == apply_changes(json_layout(text, "x").data, changes)[0]


def test_a_moved_section_keeps_its_text_and_duplicates_go(tmp_path: Path) -> None:
    text = ('{\n  "zero_optimization": {\n    "stage": 3,\n    "aio": {\n      "block_size": 1048576,'
            '\n      "queue_depth": 8  // NVMe\n    }\n  },\n  "steps_per_print": 1e3\n}\n')
    out, done = apply_to_text(text, [{"op": "rename", "path": "zero_optimization.aio",
                                      "new_path": "aio"}])
    assert done == ["renamed zero_optimization.aio -> aio"]
    assert out == ('{\n  "zero_optimization": {\n    "stage": 3\n  },\n  "steps_per_print": 1e3,\n'
                   '  "aio": {\n    "block_size": 1048576,\n    "queue_depth": 8  // NVMe\n  }\n}\n')
    dup = '{\n  "gradient_clipping": 1.0,\n  "stage": 1,\n  "gradient_clipping": "1.0"\n}'
    out, done = apply_to_text(dup, [{"op": "delete", "path": "gradient_clipping"}])
    assert out == '{\n  "stage": 1\n}'


def test_fix_out_keeps_bytes_mode_and_refuses_bad_targets(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "ds.json"
    raw = ('\ufeff{\r\n\t"train_micro_batch_size_per_gpu": 1,\r\n\t"zero_optimization": {\r\n'
           '\t\t"stage": 2,\r\n\t\t"reduce_bucket_size": 5e8,\r\n\t\t"offload_param": '
           '{"device": "cpu"}\r\n\t},\r\n\t"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}'
           '\r\n}').encode("utf-8")
    cfg.write_bytes(raw)
    os.chmod(cfg, 0o666)
    out = tmp_path / "fixed.json"
    assert main(["analyze", "--config", str(cfg), "--fix-out", str(out), "--format", "json"]) in (0, 1)
    capsys.readouterr()
    assert cfg.read_bytes() == raw
    assert out.read_bytes() == raw.replace(
        b',\r\n\t\t"offload_param": {"device": "cpu"}', b"")
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # the input's bits, less group/other write
    os.chmod(cfg, 0o600)
    assert main(["analyze", "--config", str(cfg), "--fix-out", str(out), "--force",
                 "--format", "json"]) in (0, 1)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    capsys.readouterr()
    link = tmp_path / "link.json"
    link.symlink_to(cfg)
    for target, said in ((link, "input config"), (tmp_path, "is a directory"),
                         (Path(os.devnull), "not a regular file")):
        assert main(["analyze", "--config", str(cfg), "--fix-out", str(target), "--force"]) == 2
        assert said in capsys.readouterr().err
    log = tmp_path / "train.log"
    log.write_text("hello\n")
    assert main(["analyze", str(log), "--config", str(cfg), "--fix-out", str(log),
                 "--force"]) == 2
    assert "input files" in capsys.readouterr().err and log.read_text() == "hello\n"
    assert cfg.read_bytes() == raw


def test_an_edit_that_cannot_be_made_in_place_writes_nothing() -> None:
    with pytest.raises(UsageError, match="nothing written"):
        apply_to_text('{"a": [{"b": 1}]}', [{"op": "set", "path": "a[0].c", "new": 2}])
