"""The activation side of pre-flight memory (DS211): what one micro-batch's activations take on a
GPU, from the model config and the batch/sequence arguments, with and without gradient
checkpointing (``facts/estimate.py``: :func:`activation_memory`).

Only where the inputs allow an honest figure: a decoder-style model config with hidden size,
layers, heads and vocabulary; the micro batch from the run model; the sequence length from the
Trainer/script arguments (launch command, printed TrainingArguments, script literals). An
encoder-decoder (T5) or a missing sequence length gives no figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsdoctor.diagnose.checks.common import as_numlike, gib
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.facts.context import Context
from dsdoctor.facts.estimate import ACTIVATION_NOTE, Activations, activation_memory

#: Arguments that set the training sequence length, in the order scripts usually mean it.
SEQ_ARGS = ("max_seq_length", "max_seq_len", "seq_length", "block_size", "max_length",
            "cutoff_len", "model_max_length", "max_source_length")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")


@dataclass(frozen=True)
class ActivationEstimate:
    act: Activations
    micro_batch: int
    seq: int
    checkpointing: bool | None  # None: no input says
    where: str  # the inputs the figure comes from

    def bytes_for(self, checkpointing: bool | None = None) -> int:
        """The figure for the run's checkpointing (the lower one when unknown)."""
        on = self.checkpointing if checkpointing is None else checkpointing
        return self.act.total(on is not False)

    def describe(self) -> str:
        with_gc, without = self.act.total(True), self.act.total(False)
        state = {True: "on", False: "off", None: "not stated (--gradient_checkpointing)"}
        return (f"activations for micro batch {self.micro_batch} x sequence {self.seq} "
                f"({self.where}): about {gib(without)} per GPU without gradient checkpointing, "
                f"{gib(with_gc)} with it (checkpointing {state[self.checkpointing]}); these "
                f"figures {ACTIVATION_NOTE}; eager attention (attn_implementation=\"eager\") would add "
                f"{gib(self.act.scores_per_layer_bytes * (1 if self.checkpointing else self.act.layers))}")


def _int(v: object) -> int | None:
    n = as_numlike(v)
    return int(n) if n is not None and n > 0 and float(n).is_integer() else None


def activation_estimate(ctx: Context) -> ActivationEstimate | None:
    m, raw = ctx.model, ctx.model_config or {}
    if m is None or raw.get("is_encoder_decoder") is True:
        return None
    hidden, layers, vocab = m.hidden_size, m.num_layers, m.vocab_size
    heads = next((_int(raw.get(k)) for k in _HEADS if _int(raw.get(k))), None)
    micro = ctx.run.micro_batch
    mb = _int(micro.value) if micro is not None else None
    found = next(((k, a) for k in SEQ_ARGS for a in (run_arg(ctx, k),)
                  if a is not None and _int(a[0])), None)
    if not (hidden and layers and heads and mb and found):
        return None
    seq_arg, (raw_seq, seq_where) = found
    seq = _int(raw_seq)
    assert seq is not None and micro is not None
    gc = ctx.run.value("gradient_checkpointing")
    where = (f"{getattr(m, 'path', 'config.json')}, micro batch from "
             f"{micro.source.describe()}, {seq_where} {seq}")
    return ActivationEstimate(activation_memory(hidden, layers, heads, seq, mb, vocab), mb, seq,
                              gc if isinstance(gc, bool) else None, where)
