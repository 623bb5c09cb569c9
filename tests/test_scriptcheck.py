"""dsdoctor.facts.scriptcheck: static facts from training scripts (never imported or run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.errors import UsageError
from dsdoctor.facts.scriptcheck import check_script, check_source

# The Transformers DeepSpeed guide's non-Trainer ZeRO-3 inference example (docs/main_classes/
# deepspeed.md, "Non-Trainer DeepSpeed integration" + "ZeRO Inference" with generate).
GUIDE_NON_TRAINER = '''\
from transformers.integrations import HfDeepSpeedConfig
from transformers import AutoModel
import deepspeed

ds_config = {"zero_optimization": {"stage": 3}}  # deepspeed config object or path to the file
# must run before instantiating the model to detect zero 3
dschf = HfDeepSpeedConfig(ds_config)  # keep this object alive
model = AutoModel.from_pretrained("openai-community/gpt2")
engine = deepspeed.initialize(model=model, config_params=ds_config)
with torch.no_grad():
    outputs = ds_engine.module.generate(inputs, synced_gpus=True)
'''

# The same, written the way the guide warns against.
BROKEN_NON_TRAINER = '''\
from transformers.integrations import HfDeepSpeedConfig
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
import deepspeed

def main():
    tokenizer = AutoTokenizer.from_pretrained("bigscience/T0_3B")
    model = AutoModelForSeq2SeqLM.from_pretrained("bigscience/T0_3B")
    HfDeepSpeedConfig(ds_config)
    ds_engine = deepspeed.initialize(model=model, config_params=ds_config)[0]
    ds_engine.module.eval()
    outputs = ds_engine.module.generate(inputs, max_new_tokens=20)
    more = ds_engine.module.generate(inputs, synced_gpus=False)
    maybe = ds_engine.module.generate(inputs, **gen_kwargs)
'''

# PEFT's QLoRA + DeepSpeed ZeRO-3 guide (peft docs accelerate/deepspeed.md), quant storage set.
PEFT_QLORA = '''\
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments
from peft import LoraConfig, get_peft_model
from trl import SFTTrainer

bnb_config = BitsAndBytesConfig(
    load_in_4bit=True,
    bnb_4bit_quant_type="nf4",
    bnb_4bit_compute_dtype=torch.bfloat16,
    bnb_4bit_use_double_quant=True,
    bnb_4bit_quant_storage=torch.bfloat16,
)
training_args = TrainingArguments(output_dir="out", bf16=True)
model = AutoModelForCausalLM.from_pretrained(
    args.model_name_or_path,
    quantization_config=bnb_config,
    trust_remote_code=True,
    attn_implementation="flash_attention_2",
    torch_dtype=torch.float16,
)
trainer = SFTTrainer(model=model, args=training_args)
trainer.train()
model = model.merge_and_unload()
'''


def test_guide_example_is_clean() -> None:
    f = check_source(GUIDE_NON_TRAINER, "guide.py")
    assert [g.synced_gpus for g in f.generate_calls] == [True]
    assert f.generate_without_sync() == []
    assert len(f.hf_ds_configs) == 1 and f.hf_ds_configs[0].kept_alive
    assert f.hf_ds_config_problems() == []
    assert f.uses_deepspeed and not f.uses_trainer and not f.uses_accelerate
    assert [s.line for s in f.from_pretrained] == [8]


def test_broken_example() -> None:
    f = check_source(BROKEN_NON_TRAINER, "broken.py")
    # The tokenizer load is not a model load.
    assert [s.line for s in f.from_pretrained] == [7]
    problems = f.hf_ds_config_problems()
    assert {p[0].line for p in problems} == {8}
    texts = " ".join(p[1] for p in problems)
    assert "not kept alive" in texts and "after from_pretrained (line 7)" in texts
    bad = f.generate_without_sync()
    assert [(g.site.line, g.synced_gpus) for g in bad] == [(11, None), (12, False)]
    assert f.generate_calls[2].has_kwargs  # **gen_kwargs may carry synced_gpus: not flagged
    assert bad[0].site.scope == "main" and "generate(inputs" in bad[0].site.text


def test_qlora_facts() -> None:
    f = check_source(PEFT_QLORA, "train.py")
    assert f.uses_trainer and f.uses_peft and not f.uses_deepspeed
    mism = f.quant_storage_mismatches()
    assert len(mism) == 1
    load, storage = mism[0]
    assert (load.value, load.site.line) == ("float16", 14)
    assert (storage.value, storage.site.line) == ("bfloat16", 6)
    assert [m.line for m in f.merges] == [23]
    # TrainingArguments (line 13) came before from_pretrained (line 14): fine for ZeRO-3.
    assert f.training_args_after_from_pretrained() == []


def test_training_args_after_from_pretrained() -> None:
    src = ("from transformers import AutoModelForCausalLM, TrainingArguments, Trainer\n"
           "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf')\n"
           "args = TrainingArguments('out', deepspeed='ds_z3.json')\n"
           "Trainer(model=model, args=args).train()\n")
    f = check_source(src)
    pairs = f.training_args_after_from_pretrained()
    assert [(ta.line, fp.line) for ta, fp in pairs] == [(3, 2)]


def test_matching_quant_storage_and_auto_dtype() -> None:
    src = ("bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_storage='bfloat16')\n"
           "m = AutoModelForCausalLM.from_pretrained(p, quantization_config=bnb, "
           "torch_dtype=torch.bfloat16)\n"
           "n = AutoModelForCausalLM.from_pretrained(p, quantization_config=bnb, dtype='auto')\n")
    assert check_source(src).quant_storage_mismatches() == []


def test_accelerate_and_subclassed_trainer() -> None:
    src = ("from accelerate import Accelerator\nacc = Accelerator()\n"
           "class MyTrainer(transformers.Trainer):\n    pass\n")
    f = check_source(src)
    assert f.uses_accelerate and f.uses_trainer and f.trainers[0].line == 3


def test_kept_alive_forms() -> None:
    src = ("self.dschf = HfDeepSpeedConfig(cfg)\n"
           "x: object = HfDeepSpeedConfig(cfg)\n"
           "foo(HfDeepSpeedConfig(cfg))\n")
    f = check_source(src)
    assert [h.kept_alive for h in f.hf_ds_configs] == [True, True, False]


def test_encoding_cookie_bytes(tmp_path: Path) -> None:
    p = tmp_path / "t.py"
    p.write_bytes("# -*- coding: latin-1 -*-\n# caf\xe9\nmodel.generate(x)\n".encode("latin-1"))
    f = check_script(p)
    assert [g.site.line for g in f.generate_without_sync()] == [3]


@pytest.mark.parametrize("content,needle", [
    (b"def f(:\n    pass\n", ":1:7: syntax error"),
    (b"x = 1\nprint 'py2'\n", ":2:1: syntax error"),
    (b"\x7fELF\x00\x00", "binary"),
])
def test_bad_scripts(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "train.py"
    p.write_bytes(content)
    with pytest.raises(UsageError) as ei:
        check_script(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)) and needle in msg and "\n" not in msg


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        check_script(tmp_path / "nope.py")
    with pytest.raises(UsageError, match="directory"):
        check_script(tmp_path)


def test_deep_nesting_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        check_source("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")


def test_never_executes(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    src = f"open({str(marker)!r}, 'w').write('x')\nmodel.generate(x)\n"
    check_source(src)
    assert not marker.exists()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=400), st.binary(max_size=200)))
def test_any_input_is_facts_or_usage_error(src) -> None:
    try:
        f = check_source(src, "fuzz.py")
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    f.generate_without_sync(), f.hf_ds_config_problems(), f.quant_storage_mismatches()
    f.to_dict()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([
    "model.generate(x, synced_gpus=False)\n", "d = HfDeepSpeedConfig(c)\n",
    "HfDeepSpeedConfig(c)\n", "m = AutoModel.from_pretrained(p, torch_dtype=torch.float16)\n",
    "b = BitsAndBytesConfig(bnb_4bit_quant_storage=torch.bfloat16)\n",
    "a = TrainingArguments('o')\n", "def f():\n    model.generate(**kw)\n",
    "class T(Trainer):\n    pass\n", "m.merge_and_unload()\n"]), max_size=10))
def test_generated_scripts_give_consistent_lines(lines) -> None:
    src = "".join(lines)
    f = check_source(src)
    text = src.splitlines()
    for g in f.generate_calls:
        assert "generate" in text[g.site.line - 1]
    for m in f.merges:
        assert "merge_and_unload" in text[m.line - 1]


def test_initialize_passing_an_mpu_is_recorded() -> None:
    """DS309 divides by autotp_size only when ``mpu=`` reaches deepspeed.initialize; ``mpu=None``
    and no mpu are the config-only AutoTP case (every rank counted)."""
    src = ("import deepspeed\n"
           "a = deepspeed.initialize(model=m, config=c)\n"
           "b = deepspeed.initialize(model=m, config=c, mpu=None)\n"
           "e, *_ = deepspeed.initialize(model=m, config=c, mpu=groups)\n")
    facts = check_source(src, "train.py")
    assert [s.line for s in facts.ds_initialize] == [2, 3, 4]
    assert [s.line for s in facts.ds_initialize_mpu] == [4]
