"""dsdoctor.facts.modelinfo: config.json facts and parameter counts against published counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdoctor.errors import UsageError
from dsdoctor.facts.modelinfo import (
    SUPPORTED_MODEL_TYPES,
    bf16_family,
    count_params,
    family_of,
    load_model_info,
    model_info_from_config,
)

# Hyper-parameters copied from the models' config.json on the Hugging Face Hub, with the
# parameter count the model card / Transformers' num_parameters() publishes.
CONFIGS: dict[str, tuple[dict, int]] = {
    "openai-community/gpt2": ({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
        "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
        "activation_function": "gelu_new"}, 124_439_808),
    "facebook/opt-125m": ({
        "_name_or_path": "facebook/opt-125m", "architectures": ["OPTForCausalLM"],
        "model_type": "opt", "do_layer_norm_before": True, "ffn_dim": 3072, "hidden_size": 768,
        "max_position_embeddings": 2048, "num_attention_heads": 12, "num_hidden_layers": 12,
        "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 768}, 125_239_296),
    "facebook/opt-350m": ({
        "_name_or_path": "facebook/opt-350m", "architectures": ["OPTForCausalLM"],
        "model_type": "opt", "do_layer_norm_before": False, "ffn_dim": 4096, "hidden_size": 1024,
        "max_position_embeddings": 2048, "num_attention_heads": 16, "num_hidden_layers": 24,
        "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 512}, 331_196_416),
    "google-t5/t5-small": ({
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 2048,
        "d_kv": 64, "d_model": 512, "num_heads": 8, "num_layers": 6,
        "relative_attention_num_buckets": 32, "vocab_size": 32128}, 60_506_624),
    "google/flan-t5-small": ({
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 1024,
        "d_kv": 64, "d_model": 512, "feed_forward_proj": "gated-gelu", "num_decoder_layers": 8,
        "num_heads": 6, "num_layers": 8, "tie_word_embeddings": False, "torch_dtype": "float32",
        "vocab_size": 32128}, 76_961_152),
    "meta-llama/Llama-2-7b-hf": ({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 32, "tie_word_embeddings": False, "torch_dtype": "float16",
        "vocab_size": 32000}, 6_738_415_616),
    "meta-llama/Meta-Llama-3-8B": ({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 128256}, 8_030_261_248),
    "mistralai/Mistral-7B-v0.1": ({
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 32000}, 7_241_732_096),
    "Qwen/Qwen2-0.5B": ({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "intermediate_size": 4864, "num_attention_heads": 14, "num_hidden_layers": 24,
        "num_key_value_heads": 2, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "vocab_size": 151936}, 494_032_768),
    "EleutherAI/pythia-160m": ({
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": 768,
        "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
        "tie_word_embeddings": False, "torch_dtype": "float16", "vocab_size": 50304},
        162_322_944),
    "bigscience/bloom-560m": ({
        "architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 1024,
        "n_head": 16, "n_layer": 24, "vocab_size": 250880}, 559_214_592),
    "google/gemma-2b": ({
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "head_dim": 256,
        "hidden_size": 2048, "intermediate_size": 16384, "num_attention_heads": 8,
        "num_hidden_layers": 18, "num_key_value_heads": 1, "torch_dtype": "bfloat16",
        "vocab_size": 256000}, 2_506_172_416),
}

# Filled from Transformers when it is installed (no published count to copy verbatim).
EXTRA_CONFIGS: dict[str, dict] = {
    "tiiuae/falcon-7b": {
        "architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544,
        "num_attention_heads": 71, "num_hidden_layers": 32, "multi_query": True,
        "parallel_attn": True, "bias": False, "new_decoder_architecture": False,
        "torch_dtype": "bfloat16", "vocab_size": 65024},
    "tiiuae/falcon-40b": {
        "architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 8192,
        "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
        "new_decoder_architecture": True, "parallel_attn": True, "bias": False,
        "torch_dtype": "bfloat16", "vocab_size": 65024},
    "bigscience/T0_3B": {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 5120,
        "d_kv": 64, "d_model": 2048, "feed_forward_proj": "gated-gelu", "num_heads": 32,
        "num_layers": 24, "vocab_size": 32128},
    "Qwen/Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128,
        "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
        "num_hidden_layers": 28, "num_key_value_heads": 8, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "vocab_size": 151936},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_published_counts(name: str) -> None:
    cfg, published = CONFIGS[name]
    pc = count_params(cfg)
    assert pc is not None and pc.total == published


def test_largest_layer_is_deepspeed_notion() -> None:
    # gpt2: the token embedding 50257 x 768 is the largest module with its own parameters.
    pc = count_params(CONFIGS["openai-community/gpt2"][0])
    assert (pc.largest_layer, pc.largest_layer_name) == (50257 * 768, "transformer.wte")
    # Llama-2-7b: embed_tokens and lm_head are both 32000 x 4096 (first wins).
    pc = count_params(CONFIGS["meta-llama/Llama-2-7b-hf"][0])
    assert pc.largest_layer == 32000 * 4096
    # T0_3B (the guide's example): 65M largest layer = shared embedding.
    pc = count_params(EXTRA_CONFIGS["bigscience/T0_3B"])
    assert pc.largest_layer == 65_798_144 and int(pc.largest_layer / 1e6) == 65


def test_t0_3b_config_reproduces_the_guide_table() -> None:
    # End to end: config -> counts -> DeepSpeed's estimator -> the guide's printed table.
    from dsdoctor.facts.estimate import estimate_zero3

    pc = count_params(EXTRA_CONFIGS["bigscience/T0_3B"])
    assert pc.total == 2_783_959_040
    table = estimate_zero3(pc.total, pc.largest_layer).table()
    assert "SW: Model with 2783M total params, 65M largest layer params." in table
    got = [line.split(" | ")[:2] for line in table.splitlines()[4:]]
    assert [[c.strip() for c in row] for row in got] == [
        ["70.00GB", "0.25GB"], ["70.00GB", "0.25GB"], ["62.23GB", "5.43GB"],
        ["62.23GB", "5.43GB"], ["0.37GB", "46.91GB"], ["15.56GB", "46.91GB"]]


def test_load_file_and_dir(tmp_path: Path) -> None:
    cfg = dict(CONFIGS["mistralai/Mistral-7B-v0.1"][0], _name_or_path="mistralai/Mistral-7B-v0.1")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for p in (tmp_path, tmp_path / "config.json"):
        info = load_model_info(p)
        assert info.dtype == "bfloat16" and info.pretrained_bf16
        assert info.architecture == "MistralForCausalLM" and info.model_type == "mistral"
        assert info.hidden_size == 4096 and info.num_layers == 32
        assert info.params and info.params.total == 7_241_732_096
        assert info.to_dict()["pretrained_bf16"] is True


def test_new_dtype_key_and_unknown_arch(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "mamba", "dtype": "bfloat16", "hidden_size": 768}))
    info = load_model_info(tmp_path)
    assert info.dtype == "bfloat16" and info.params is None and info.hidden_size == 768


def test_fp16_model_is_not_bf16(tmp_path: Path) -> None:
    cfg = dict(CONFIGS["EleutherAI/pythia-160m"][0], _name_or_path="EleutherAI/pythia-160m")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    info = load_model_info(tmp_path)
    assert info.dtype == "float16" and not info.pretrained_bf16


def test_t5_without_dtype_is_bf16_family(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS["google-t5/t5-small"][0]))
    info = load_model_info(tmp_path)
    assert info.dtype is None and info.pretrained_bf16 and "T5" in (info.bf16_family or "")


@pytest.mark.parametrize("name,family", [
    ("google-t5/t5-small", "T5"), ("t5-base", "T5"), ("google/flan-t5-xl", "T5"),
    ("bigscience/T0_3B", "T5"), ("google/mt5-base", "T5"), ("bigscience/bloom-7b1", "BLOOM"),
    ("meta-llama/Meta-Llama-3-8B", "Llama 3"), ("mistralai/Mistral-7B-v0.1", "Mistral"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen"), ("google/gemma-2b", "Gemma"),
    ("tiiuae/falcon-7b", "Falcon"), ("/data/models/Llama-2-13b-hf", "Llama 2")])
def test_bf16_family_names(name: str, family: str) -> None:
    assert family in (bf16_family(name) or "")


@pytest.mark.parametrize("name", ["gpt2", "openai-community/gpt2", "facebook/opt-125m",
                                  "EleutherAI/pythia-1b", "bert-base-uncased", "my-t5x-like-net"])
def test_not_bf16_family(name: str) -> None:
    assert bf16_family(name) is None


def test_family_table_has_sources() -> None:
    fam = family_of("google-t5/t5-small")
    assert fam and fam["source"] and fam["dtype"] == "bfloat16"


@pytest.mark.parametrize("content,needle", [
    (b"{not json", ":1:2: invalid JSON"), (b"[1, 2]", "not an object"),
    (b"\x00\x01PK", "binary"), (b"\xff\xfe{}", "not UTF-8"), (b"[" * 100000 + b"]" * 100000, "")])
def test_bad_files(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(UsageError) as ei:
        load_model_info(p)
    assert str(ei.value).startswith(str(p)) and needle in str(ei.value)
    assert "\n" not in str(ei.value)


def test_missing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no config.json"):
        load_model_info(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        load_model_info(tmp_path / "nope.json")


def test_odd_values_give_no_count_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llama", "hidden_size": "4096", "torch_dtype": "float16"}))
    info = load_model_info(tmp_path)
    assert info.params is None and info.dtype == "float16"


# --- against Transformers itself (meta device, no weights), where it is installed ---------------

def _hf_count(cfg: dict) -> tuple[int, int]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conf = transformers.AutoConfig.for_model(**cfg)
    auto = (transformers.AutoModelForSeq2SeqLM if cfg["model_type"] in ("t5", "mt5", "umt5")
            else transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(conf)
    seen = {}
    for p in model.parameters():  # shared tensors once (meta tensors: identity, not data_ptr)
        seen[id(p)] = p.numel()
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return sum(seen.values()), largest


@pytest.mark.parametrize("name", sorted(CONFIGS) + sorted(EXTRA_CONFIGS))
def test_matches_transformers(name: str) -> None:
    cfg = CONFIGS[name][0] if name in CONFIGS else EXTRA_CONFIGS[name]
    if name in ("meta-llama/Meta-Llama-3-8B", "tiiuae/falcon-40b", "mistralai/Mistral-7B-v0.1",
                "meta-llama/Llama-2-7b-hf", "google/gemma-2b"):
        # Same formula as the smaller llama-like configs; shrink to keep the test fast.
        cfg = dict(cfg, num_hidden_layers=2)
    total, largest = _hf_count(cfg)
    import transformers
    if cfg["model_type"] == "t5" and int(transformers.__version__.split(".")[0]) >= 5:
        # Transformers 5 always ties T5's lm_head to the embedding (configuration_t5.py);
        # dsdoctor follows the config's tie_word_embeddings, as Transformers 4 builds it.
        cfg = dict(cfg, tie_word_embeddings=True)
    pc = count_params(cfg)
    assert pc is not None and (pc.total, pc.largest_layer) == (total, largest)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(),
                    st.text(max_size=12), st.lists(st.integers(), max_size=3))
_KEYS = st.sampled_from(["model_type", "hidden_size", "num_hidden_layers", "vocab_size",
                         "intermediate_size", "num_attention_heads", "num_key_value_heads",
                         "head_dim", "n_embd", "n_layer", "n_positions", "d_model", "d_kv",
                         "num_heads", "d_ff", "num_layers", "ffn_dim", "max_position_embeddings",
                         "torch_dtype", "dtype", "tie_word_embeddings", "word_embed_proj_dim",
                         "num_kv_heads", "new_decoder_architecture", "quantization_config",
                         "architectures", "_name_or_path", "feed_forward_proj"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=14),
       st.sampled_from(list(SUPPORTED_MODEL_TYPES) + ["bert"]))
def test_any_config_dict_gives_info_not_a_crash(cfg, mt) -> None:
    cfg = dict(cfg, model_type=mt)
    info = model_info_from_config(cfg)
    if info.params is not None:
        assert isinstance(info.params.total, int) and isinstance(info.params.largest_layer, int)
        assert info.params.total >= 0 and info.params.largest_layer <= info.params.total
