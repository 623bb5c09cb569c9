"""DS223: the Trainer's --tf32 on GPUs without TF32 (the Transformers guide, fp32 precision).

TF32 exists from Ampere (compute capability 8.0) on. ``TrainingArguments.__post_init__`` refuses
``tf32=True`` elsewhere: "ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and
torch>=1.7" (Transformers 4.x and 5.x), before any training step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import ampere_ok, finding, pre_ampere_gpus, truthy_arg
from dsdoctor.diagnose.checks.launch_args import run_arg
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding

REFUSAL = "--tf32 requires Ampere"


def _refusal(ctx: Context) -> tuple[Evidence, ...]:
    s = ctx.symptom("python-exception")
    if s is None:
        return ()
    return tuple(e for e in s.evidence if REFUSAL in e.text)[:2]


def tf32_without_ampere(ctx: Context, rule: Any) -> Iterator[Finding]:
    ev = _refusal(ctx)
    asked = run_arg(ctx, "tf32")
    gpus_lack = ampere_ok(ctx) is False
    if not ev and not (asked is not None and truthy_arg(asked[0]) and gpus_lack):
        return
    which = ", ".join(pre_ampere_gpus(ctx)) or "a GPU below compute capability 8.0, or no CUDA"
    where = ("the Trainer refused it at start-up" if ev else
             "the Trainer will refuse it when TrainingArguments is created")
    where_on = f" ({asked[1]})" if asked and asked[1] != "--tf32" else ""
    yield finding(
        f"--tf32 is on{where_on}, but TF32 needs an Ampere or newer GPU (compute capability 8.0) and CUDA; "
        f"this run has {which}, so {where} (\"ValueError: --tf32 requires Ampere or a newer GPU "
        f"arch, cuda>=11 and torch>=1.7\"). Without TF32, fp32 matmuls run in full fp32 anyway.",
        path="tf32",
        fix="drop --tf32 (or pass --tf32 False); keep it for A100/H100/RTX 30xx and newer",
        evidence=ev)
