"""Script facts that depend on what the script binds to names (issue 9's misfires)."""

from __future__ import annotations

from dsdoctor.facts.scriptcheck import check_source


def test_generate_with_tokenizer_inputs_does_not_hide_synced_gpus() -> None:
    facts = check_source(
        'inputs = tokenizer(prompt, return_tensors="pt").to("cuda")\n'
        "out = model.generate(**inputs, max_new_tokens=64)\n")
    assert [g.site.line for g in facts.generate_without_sync()] == [2]


def test_generate_with_batch_from_dataloader_does_not_hide_synced_gpus() -> None:
    facts = check_source("for batch in loader:\n    out = model.generate(**batch)\n")
    assert [g.site.line for g in facts.generate_without_sync()] == [2]


def test_kwargs_dict_holding_synced_gpus_or_unknown_origin_counts_as_passing_it() -> None:
    facts = check_source(
        'inputs = tokenizer(prompt, return_tensors="pt")\n'
        'gen_kwargs = {"max_new_tokens": 8}\n'
        'gen_kwargs["synced_gpus"] = True\n'
        "a = model.generate(**inputs, **gen_kwargs)\n"
        "b = model.generate(**build_kwargs())\n"
        "def f(**kwargs):\n    return model.generate(**kwargs)\n")
    assert facts.generate_without_sync() == []


def test_inputs_name_rebound_to_something_else_is_not_trusted() -> None:
    facts = check_source('inputs = tokenizer(p)\ninputs = make_inputs(p)\nmodel.generate(**inputs)\n')
    assert facts.generate_without_sync() == []


def test_hf_argument_parser_creates_training_arguments_at_the_parse_call() -> None:
    facts = check_source(
        "model = AutoModelForCausalLM.from_pretrained('m')\n"
        "parser = HfArgumentParser((ModelArguments, TrainingArguments))\n"
        "m, t = parser.parse_args_into_dataclasses()\n"
        "(a,) = HfArgumentParser(TrainingArguments).parse_json_file('args.json')\n")
    assert [s.line for s in facts.training_args] == [3, 4]
    assert [(ta.line, fp.line) for ta, fp in facts.training_args_after_from_pretrained()] == \
        [(3, 1), (4, 1)]
    assert facts.uses_trainer


def test_parser_without_training_arguments_is_not_training_arguments() -> None:
    facts = check_source("parser = HfArgumentParser(ScriptArguments)\n"
                         "(a,) = parser.parse_args_into_dataclasses()\n")
    assert facts.training_args == ()


def test_dtype_variables_resolve_to_their_single_literal() -> None:
    facts = check_source(
        "import torch\n"
        "storage = torch.bfloat16\n"
        "compute = getattr(torch, 'float16')\n"
        "maybe = torch.float16\n"
        "if cond:\n    maybe = torch.bfloat16\n"
        "BitsAndBytesConfig(bnb_4bit_quant_storage=storage, bnb_4bit_compute_dtype=compute)\n"
        "AutoModelForCausalLM.from_pretrained('m', torch_dtype=maybe)\n"
        "AutoModelForCausalLM.from_pretrained('m', torch_dtype=storage or torch.float32)\n")
    values = [(d.site.line, d.key, d.value) for d in facts.dtypes]
    assert values == [(7, "bnb_4bit_quant_storage", "bfloat16"),
                      (7, "bnb_4bit_compute_dtype", "float16"),
                      (8, "torch_dtype", None),  # two different literals: depends on the path
                      (9, "torch_dtype", "bfloat16")]
    assert facts.quant_storage_mismatches() == []
