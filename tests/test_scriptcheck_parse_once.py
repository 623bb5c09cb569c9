"""A script is parsed once per analysis: scriptcheck's one visit gives its facts, the bindings
they depend on, and the loop calls DS220/DS221 read (a 7 MB script was parsed three times)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.facts import scriptcheck
from dsdoctor.facts.loopcalls import loop_calls

# the bindings come after their uses: facts that depend on them are resolved after the visit
LATE_BINDINGS = """\
from accelerate import Accelerator
model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=DTYPE)
model, opt, dl = acc.prepare(model, opt, dl)
for batch in dl:
    out = model.generate(**inputs)
    loss = model(**batch).loss
    loss.backward()
acc = Accelerator()
DTYPE = torch.bfloat16
inputs = tokenizer("hi", return_tensors="pt")
"""


def _counting_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = ast.parse

    def parse(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs.get("filename", args[0] if args else "<unknown>"))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    return seen


def test_bindings_after_their_uses_are_resolved_in_one_visit(monkeypatch) -> None:
    parses = _counting_parse(monkeypatch)
    facts = scriptcheck.check_source(LATE_BINDINGS, "train.py")
    assert len(parses) == 1
    assert [d.value for d in facts.dtypes] == ["bfloat16"]  # DTYPE bound on line 9
    assert facts.generate_calls[0].has_kwargs is False  # **inputs: a tokenizer output
    calls = facts.loop_calls
    assert calls is not None and "acc" in calls.accelerators  # bound on line 8
    assert [n for n, _ in calls.prepares] == [3] and [n for n, _ in calls.bare_backward] == [7]
    assert calls == loop_calls("train.py", LATE_BINDINGS)  # the same as a walk of its own


def test_a_big_script_parses_each_piece_once(monkeypatch) -> None:
    monkeypatch.setattr(scriptcheck, "_CHUNK_CHARS", 2048)
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 10_000)
    src = LATE_BINDINGS + "".join(f"def f{i}(x):\n    return x.to(DTYPE) + {i}\n"
                                  for i in range(600))
    parses = _counting_parse(monkeypatch)
    chunked = scriptcheck.check_source(src, "train.py")
    pieces = len(scriptcheck._chunks(src))
    assert pieces > 3 and len(parses) == pieces
    monkeypatch.setattr(scriptcheck, "CHUNKED_SOURCE_BYTES", 1 << 40)
    assert scriptcheck.check_source(src, "train.py") == chunked


def test_analyze_parses_the_script_once(tmp_path: Path, monkeypatch, capsys) -> None:
    script = tmp_path / "train.py"
    script.write_text(LATE_BINDINGS)
    parses = _counting_parse(monkeypatch)
    assert main(["analyze", "--script", str(script), "--format", "json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert len(parses) == 1
    assert "DS220" in json.dumps(out)  # loss.backward() after acc.prepare(): found all the same
