"""DS225: an own Accelerate loop with FSDP and PEFT that does not give FSDP PEFT's wrap policy (the
PEFT FSDP guide: trainable and frozen parameters must be wrapped apart,
``accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)``).

The guide's Trainer-based script (TRL's SFTTrainer) sets PEFT's policy itself when the model is a
PeftModel, so only scripts that drive Accelerate directly are checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding

POLICY = "fsdp_auto_wrap_policy"


def fsdp_peft_without_wrap_policy(ctx: Context, rule: Any) -> Iterator[Finding]:
    if ctx.run.value("fsdp") is not True:
        return
    for sc in ctx.scripts:
        text = ctx.script_sources.get(sc.path, "")
        if not sc.accelerators or sc.uses_trainer or "get_peft_model" not in text:
            continue
        if POLICY in text:
            continue
        lines = text.splitlines()
        n = next((i for i, t in enumerate(lines, 1) if "get_peft_model(" in t), None)
        ev = (Evidence(file=sc.path, line=n, text=lines[n - 1].strip()[:160]),) if n else ()
        yield finding(
            f"{sc.path} wraps the model with PEFT (get_peft_model) and drives FSDP through its own "
            f"Accelerate loop, but never sets PEFT's wrap policy: FSDP then wraps frozen and "
            f"trainable parameters in the same units, and with use_orig_params false (what PEFT "
            f"needs to save memory) FSDP refuses such a unit (\"Must flatten tensors with "
            f"uniform `requires_grad` when `use_orig_params=False`\").",
            fix=("after get_peft_model add: from peft.utils.other import fsdp_auto_wrap_policy; "
                 "if getattr(accelerator.state, \"fsdp_plugin\", None) is not None: "
                 "accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)"),
            evidence=ev)
