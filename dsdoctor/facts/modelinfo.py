"""What a model's ``config.json`` says: pretraining dtype, architecture, sizes, parameter counts.

Only the JSON is read (never weights, nothing is downloaded, nothing imported from the model).
Parameter counts are computed from the hyper-parameters with the layer shapes of the
Transformers implementations, so DeepSpeed's estimators can be fed without building the model
(DeepSpeed's own ``*_all_live`` estimators undercount a meta-device model). "Largest layer" is
DeepSpeed's notion: the module with the most parameters of its own (usually the embedding).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from dsdoctor.errors import UsageError
from dsdoctor.safeio import read_bounded

_MAX_CONFIG_BYTES = 8 * 2**20  # a config.json is a few KB; refuse to slurp a weights file
# The largest size a hyper-parameter may have (vocabularies reach 10^6, hidden sizes 10^5): a
# larger one is no model, and 10^400 would overflow the float arithmetic of the estimators.
MAX_MODEL_DIMENSION = 10**9


class ModelSizeError(ValueError):
    """A hyper-parameter outside 0..MAX_MODEL_DIMENSION: the config describes no real model."""


@dataclass(frozen=True)
class ParamCount:
    """Total parameters (shared weights counted once) and the largest single module's."""

    total: int
    largest_layer: int
    largest_layer_name: str


@dataclass(frozen=True)
class ModelInfo:
    """Facts from one config.json. ``params`` is None for architectures without a formula."""

    path: str
    model_type: str | None
    architecture: str | None
    dtype: str | None  # pretraining/saved dtype as the config states it ("bfloat16", ...)
    hidden_size: int | None
    num_layers: int | None
    vocab_size: int | None
    params: ParamCount | None
    name_or_path: str | None = None
    quantization: str | None = None  # quantization_config.quant_method / load_in_4bit
    bf16_family: str | None = None  # family from the bf16 table matched on the name or path
    size_error: str | None = None  # why ``params`` is None for a known architecture

    @property
    def pretrained_bf16(self) -> bool:
        """True when the config or the family table says the model was pretrained in bf16."""
        return self.dtype == "bfloat16" or self.bf16_family is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pretrained_bf16"] = self.pretrained_bf16
        return d


# --- loading ----------------------------------------------------------------------------------

def load_model_info(path: str | Path) -> ModelInfo:
    """Read ``config.json`` (or ``DIR/config.json``) and compute what dsdoctor needs.

    Raises UsageError (one line: file, what is wrong, what to do) for anything unreadable.
    """
    cfg, where = load_model_json(path)
    return model_info_from_config(cfg, where)


def load_model_json(path: str | Path) -> tuple[dict[str, Any], str]:
    """The model's config.json as a dict (read, never executed) and the file it came from.

    Raises UsageError (one line: file, what is wrong, what to do) for anything unreadable.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise UsageError(f"{path}: no config.json in this directory; pass the model's "
                             "config.json or the directory that holds it")
    if not p.is_file():
        raise UsageError(f"{path}: no such file; pass a model's config.json or its directory "
                         "(weights are never read or downloaded)")
    raw = read_bounded(str(p), _MAX_CONFIG_BYTES, "--model", "pass the model's config.json "
                       "(weights are never read)")
    if b"\x00" in raw[:4096]:
        raise UsageError(f"{p}: binary file, not a config.json; pass the model's config.json")
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not UTF-8 text; pass the model's config.json") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg}); pass the "
                         "model's config.json") from None
    except RecursionError:
        raise UsageError(f"{p}: nested too deeply to be a model config") from None
    except ValueError as exc:  # an integer over 4,300 digits
        raise UsageError(f"{p}: invalid JSON ({str(exc)[:80]}); pass the model's config.json") \
            from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{p}: top level is {type(cfg).__name__}, not an object; pass the "
                         "model's config.json")
    return cfg, str(p)


def model_info_from_config(cfg: dict[str, Any], path: str = "<config>") -> ModelInfo:
    """Build ModelInfo from an already parsed config dict."""
    model_type = _s(cfg.get("model_type"))
    archs = cfg.get("architectures")
    arch = _s(archs[0]) if isinstance(archs, list) and archs else None
    dtype = _s(cfg.get("torch_dtype") or cfg.get("dtype"))
    if dtype and dtype.startswith("torch."):
        dtype = dtype[len("torch."):]
    name = _s(cfg.get("_name_or_path"))
    size_error = None
    try:
        params = count_params(cfg)
    except ModelSizeError as exc:
        params, size_error = None, str(exc)
    except (TypeError, ValueError, KeyError, ZeroDivisionError):
        params = None  # a config with odd values: no count rather than a wrong one
    q = cfg.get("quantization_config")
    quant = None
    if isinstance(q, dict):
        quant = _s(q.get("quant_method")) or ("bitsandbytes" if q.get("load_in_4bit")
                                              or q.get("load_in_8bit") else None)
    family = ((name and bf16_family(name)) or (path and bf16_family(path))
              or _TYPE_FAMILIES.get(model_type or ""))
    return ModelInfo(
        path=path, model_type=model_type, architecture=arch, dtype=dtype,
        hidden_size=_i(_first(cfg, "hidden_size", "d_model", "n_embd", "n_embed")),
        num_layers=_i(_first(cfg, "num_hidden_layers", "num_layers", "n_layer")),
        vocab_size=_i(cfg.get("vocab_size")), params=params, name_or_path=name,
        quantization=quant, bf16_family=family, size_error=size_error,
    )


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _i(v: Any) -> int | None:
    """A size the rules may compute with: an int in 0..MAX_MODEL_DIMENSION, else unknown."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_MODEL_DIMENSION:
        return v
    return None


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


# --- bf16 families ----------------------------------------------------------------------------

# model_type values whose every published checkpoint was pretrained in bf16 (see the JSON table).
_TYPE_FAMILIES = {"t5": "T5/T0/mT5/Flan-T5/ByT5/UL2", "mt5": "T5/T0/mT5/Flan-T5/ByT5/UL2",
                  "umt5": "T5/T0/mT5/Flan-T5/ByT5/UL2", "bloom": "BLOOM", "gemma": "Gemma",
                  "gemma2": "Gemma", "qwen2": "Qwen", "qwen3": "Qwen", "mixtral": "Mistral/Mixtral"}


@lru_cache(maxsize=1)
def _families() -> tuple[tuple[re.Pattern[str], dict[str, str]], ...]:
    from dsdoctor.datacache import package_dir  # noqa: PLC0415

    with open(os.path.join(package_dir("dsdoctor.data"), "bf16_families.json"),
              encoding="utf-8") as fh:
        text = fh.read()
    return tuple((re.compile(f["pattern"], re.I), f) for f in json.loads(text)["families"])


def family_of(name: str) -> dict[str, str] | None:
    """The first family-table entry matching a model name or path, or None."""
    for rx, fam in _families():
        if rx.search(name):
            return fam
    return None


def bf16_family(name: str) -> str | None:
    """The family name if ``name`` (e.g. ``google-t5/t5-small``) is a bf16-pretrained family."""
    fam = family_of(name)
    return fam["family"] if fam and fam["dtype"] == "bfloat16" else None


# --- parameter counts ---------------------------------------------------------------------------

def _need(cfg: dict[str, Any], *keys: str, default: Any = None) -> int:
    v = _first(cfg, *keys)
    if v is None:
        v = default
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ModelSizeError(f"{keys[0]} is missing or not a whole number")
    if v > MAX_MODEL_DIMENSION:
        shown = f"{v}" if v < 10**30 else f"a {len(str(v))}-digit number"  # json: <= 4300
        raise ModelSizeError(f"{keys[0]} is {shown}, more than {MAX_MODEL_DIMENSION:,} (no model "
                             "has it)")
    return v


def _opt_int(cfg: dict[str, Any], key: str, default: int) -> int:
    """An optional integer hyper-parameter: its default when absent/null/0, else a valid int."""
    v = cfg.get(key)
    if v is None or v == 0:
        return default
    return _need(cfg, key)


class _Counter:
    """Accumulates module sizes; remembers the largest module (DeepSpeed's 'largest layer')."""

    def __init__(self) -> None:
        self.total = 0
        self.largest = 0
        self.largest_name = ""

    def add(self, name: str, n: int, times: int = 1) -> None:
        self.total += n * times
        if n > self.largest:
            self.largest, self.largest_name = n, name

    def linear(self, name: str, fan_in: int, fan_out: int, bias: bool, times: int = 1) -> None:
        self.add(name, fan_in * fan_out + (fan_out if bias else 0), times)

    def result(self) -> ParamCount:
        return ParamCount(self.total, self.largest, self.largest_name)


def _tied(cfg: dict[str, Any], default: bool) -> bool:
    v = cfg.get("tie_word_embeddings")
    return default if v is None else bool(v)


def _llama_like(cfg: dict[str, Any]) -> ParamCount:
    """Llama, Mistral, Mixtral, Qwen2/Qwen3, Gemma (Transformers' LlamaForCausalLM family)."""
    mt = cfg.get("model_type")
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "hidden_size")
    n_layers = _need(cfg, "num_hidden_layers")
    nh = _need(cfg, "num_attention_heads")
    nkv = _need(cfg, "num_key_value_heads", default=nh)
    hd = _opt_int(cfg, "head_dim", h // nh)
    inter = _need(cfg, "intermediate_size")
    qkv_bias = mt == "qwen2" or bool(cfg.get("attention_bias"))
    o_bias = bool(cfg.get("attention_bias")) and mt != "qwen2"
    mlp_bias = bool(cfg.get("mlp_bias"))
    c = _Counter()
    c.add("model.embed_tokens", v * h)
    L = n_layers
    c.linear("self_attn.q_proj", h, nh * hd, qkv_bias, L)
    c.linear("self_attn.k_proj", h, nkv * hd, qkv_bias, L)
    c.linear("self_attn.v_proj", h, nkv * hd, qkv_bias, L)
    c.linear("self_attn.o_proj", nh * hd, h, o_bias, L)
    if mt == "qwen3":
        c.add("self_attn.q_norm", hd, L)
        c.add("self_attn.k_norm", hd, L)
    if mt == "mixtral":
        experts = _need(cfg, "num_local_experts")
        c.linear("block_sparse_moe.gate", h, experts, False, L)
        for proj in ("w1", "w3"):
            c.linear(f"experts.{proj}", h, inter, False, L * experts)
        c.linear("experts.w2", inter, h, False, L * experts)
    else:
        c.linear("mlp.gate_proj", h, inter, mlp_bias, L)
        c.linear("mlp.up_proj", h, inter, mlp_bias, L)
        c.linear("mlp.down_proj", inter, h, mlp_bias, L)
    c.add("input_layernorm", h, L)
    c.add("post_attention_layernorm", h, L)
    c.add("model.norm", h)
    if not _tied(cfg, default=mt == "gemma"):
        c.add("lm_head", v * h)
    return c.result()


def _gpt2(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "n_embd", "hidden_size")
    L = _need(cfg, "n_layer", "num_hidden_layers")
    pos = _need(cfg, "n_positions", "max_position_embeddings")
    inner = _opt_int(cfg, "n_inner", 4 * h)
    c = _Counter()
    c.add("transformer.wte", v * h)
    c.add("transformer.wpe", pos * h)
    c.add("ln_1", 2 * h, L)
    c.linear("attn.c_attn", h, 3 * h, True, L)
    c.linear("attn.c_proj", h, h, True, L)
    c.add("ln_2", 2 * h, L)
    c.linear("mlp.c_fc", h, inner, True, L)
    c.linear("mlp.c_proj", inner, h, True, L)
    c.add("transformer.ln_f", 2 * h)
    if not _tied(cfg, default=True):
        c.add("lm_head", v * h)
    return c.result()


def _gpt_neox(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "hidden_size")
    L = _need(cfg, "num_hidden_layers")
    inter = _need(cfg, "intermediate_size", default=4 * h)
    bias = cfg.get("attention_bias", True) is not False
    c = _Counter()
    c.add("gpt_neox.embed_in", v * h)
    c.add("input_layernorm", 2 * h, L)
    c.add("post_attention_layernorm", 2 * h, L)
    c.linear("attention.query_key_value", h, 3 * h, bias, L)
    c.linear("attention.dense", h, h, bias, L)
    c.linear("mlp.dense_h_to_4h", h, inter, True, L)
    c.linear("mlp.dense_4h_to_h", inter, h, True, L)
    c.add("gpt_neox.final_layer_norm", 2 * h)
    if not _tied(cfg, default=False):
        c.add("embed_out", v * h)
    return c.result()


def _opt(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "hidden_size")
    L = _need(cfg, "num_hidden_layers")
    ffn = _need(cfg, "ffn_dim")
    pos = _need(cfg, "max_position_embeddings")
    wd = _opt_int(cfg, "word_embed_proj_dim", h)
    bias = cfg.get("enable_bias", True) is not False
    affine = cfg.get("layer_norm_elementwise_affine", True) is not False
    ln = 2 * h if affine else 0
    c = _Counter()
    c.add("model.decoder.embed_tokens", v * wd)
    c.add("model.decoder.embed_positions", (pos + 2) * h)  # OPT offsets positions by 2
    if wd != h:
        c.linear("model.decoder.project_out", h, wd, False)
        c.linear("model.decoder.project_in", wd, h, False)
    if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm", False):
        c.add("model.decoder.final_layer_norm", ln)
    for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
        c.linear(f"self_attn.{proj}", h, h, bias, L)
    c.add("self_attn_layer_norm", ln, L)
    c.linear("fc1", h, ffn, bias, L)
    c.linear("fc2", ffn, h, bias, L)
    c.add("final_layer_norm", ln, L)
    if not _tied(cfg, default=True):
        c.add("lm_head", v * wd)
    return c.result()


def _bloom(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "hidden_size", "n_embed")
    L = _need(cfg, "n_layer", "num_hidden_layers")
    c = _Counter()
    c.add("transformer.word_embeddings", v * h)
    c.add("transformer.word_embeddings_layernorm", 2 * h)
    c.add("input_layernorm", 2 * h, L)
    c.linear("self_attention.query_key_value", h, 3 * h, True, L)
    c.linear("self_attention.dense", h, h, True, L)
    c.add("post_attention_layernorm", 2 * h, L)
    c.linear("mlp.dense_h_to_4h", h, 4 * h, True, L)
    c.linear("mlp.dense_4h_to_h", 4 * h, h, True, L)
    c.add("transformer.ln_f", 2 * h)
    if not _tied(cfg, default=True):
        c.add("lm_head", v * h)
    return c.result()


def _falcon(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    h = _need(cfg, "hidden_size")
    L = _need(cfg, "num_hidden_layers", "n_layer")
    nh = _need(cfg, "num_attention_heads", "n_head")
    hd = h // nh
    new_arch = bool(cfg.get("new_decoder_architecture"))
    if new_arch:
        nkv = _need(cfg, "num_kv_heads", default=nh)
        qkv_out = (2 * nkv + nh) * hd
    elif cfg.get("multi_query", True):
        qkv_out = h + 2 * hd
    else:
        qkv_out = 3 * h
    bias = bool(cfg.get("bias", False))
    ffn = _opt_int(cfg, "ffn_hidden_size", 4 * h)
    c = _Counter()
    c.add("transformer.word_embeddings", v * h)
    c.linear("self_attention.query_key_value", h, qkv_out, bias, L)
    c.linear("self_attention.dense", h, h, bias, L)
    c.linear("mlp.dense_h_to_4h", h, ffn, bias, L)
    c.linear("mlp.dense_4h_to_h", ffn, h, bias, L)
    n_ln = _opt_int(cfg, "num_ln_in_parallel_attn", 2 if new_arch else 1)
    if not cfg.get("parallel_attn", True):
        n_ln = 2
    c.add("layernorm", 2 * h, L * n_ln)
    c.add("transformer.ln_f", 2 * h)
    if not _tied(cfg, default=True):
        c.add("lm_head", v * h)
    return c.result()


def _t5(cfg: dict[str, Any]) -> ParamCount:
    v = _need(cfg, "vocab_size")
    d = _need(cfg, "d_model")
    dkv = _need(cfg, "d_kv")
    nh = _need(cfg, "num_heads")
    ff = _need(cfg, "d_ff")
    le = _need(cfg, "num_layers")
    ld = _need(cfg, "num_decoder_layers", default=le)
    buckets = _need(cfg, "relative_attention_num_buckets", default=32)
    inner = nh * dkv
    gated = str(cfg.get("feed_forward_proj", "relu")).startswith("gated")
    c = _Counter()
    c.add("shared", v * d)  # encoder/decoder embed_tokens are the same tensor
    for proj in ("q", "k", "v"):  # self-attention (both stacks) and cross-attention (decoder)
        c.linear(f"Attention.{proj}", d, inner, False, le + 2 * ld)
    c.linear("Attention.o", inner, d, False, le + 2 * ld)
    # Only the first block of each stack owns a relative position bias (umT5: every block).
    per_stack = (le, ld) if cfg.get("model_type") == "umt5" else (1, 1)
    c.add("relative_attention_bias", buckets * nh, sum(per_stack))
    c.linear("DenseReluDense.wi", d, ff, False, (le + ld) * (2 if gated else 1))
    c.linear("DenseReluDense.wo", ff, d, False, le + ld)
    c.add("layer_norm", d, 2 * le + 3 * ld + 2)
    if not _tied(cfg, default=True):
        c.add("lm_head", v * d)
    return c.result()


_COUNTERS: dict[str, Callable[[dict[str, Any]], ParamCount]] = {
    "llama": _llama_like, "mistral": _llama_like, "mixtral": _llama_like, "qwen2": _llama_like,
    "qwen3": _llama_like, "gemma": _llama_like,
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "bloom": _bloom, "falcon": _falcon,
    "RefinedWeb": _falcon, "RefinedWebModel": _falcon,
    "t5": _t5, "mt5": _t5, "umt5": _t5,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_COUNTERS)


def count_params(cfg: dict[str, Any]) -> ParamCount | None:
    """Parameters of the model a config describes (its ``*ForCausalLM``/``*ForConditionalGeneration``
    head included), or None for an architecture without a formula."""
    fn = _COUNTERS.get(str(cfg.get("model_type")))
    return fn(cfg) if fn else None
