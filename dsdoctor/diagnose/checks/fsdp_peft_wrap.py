"""DS225: an own Accelerate loop with FSDP and PEFT that does not give FSDP PEFT's wrap policy (the
PEFT FSDP guide: trainable and frozen parameters must be wrapped apart,
``accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)``).

The guide's Trainer-based script (TRL's SFTTrainer) sets PEFT's policy itself when the model is a
PeftModel, so only scripts that drive Accelerate directly are checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding

POLICY = "fsdp_auto_wrap_policy"
_FSDP2_IN_SCRIPT = re.compile(r"\bfsdp_version\s*=\s*2\b")


def _fsdp_version(ctx: Context, text: str) -> int:
    """The FSDP version Accelerate runs: the config's fsdp_version, a plugin built with
    fsdp_version=2 in the script, else Accelerate's default 1 (FSDP_VERSION unset)."""
    v = ctx.acc_get("fsdp_config.fsdp_version")
    if str(v).strip() in ("1", "2"):
        return int(str(v).strip())
    return 2 if _FSDP2_IN_SCRIPT.search(text) else 1


def fsdp_peft_without_wrap_policy(ctx: Context, rule: Any) -> Iterator[Finding]:
    if ctx.run.value("fsdp") is not True:
        return
    # FSDP1 only refuses mixed requires_grad in a unit when use_orig_params is false (Accelerate's
    # default); with true it wraps them together (DS315 is about the memory that costs)
    orig = ctx.acc_get("fsdp_config.fsdp_use_orig_params")
    if orig is True or str(orig).strip().lower() == "true":
        return
    for sc in ctx.scripts:
        text = ctx.script_sources.get(sc.path, "")
        if not sc.accelerators or sc.uses_trainer or "get_peft_model" not in text:
            continue
        if POLICY in text:
            continue
        if _fsdp_version(ctx, text) == 2:
            # FSDP2 keeps the original parameters (no flattening, no error), and Accelerate's
            # FSDP2 path knows no _or_policy: PEFT's policy there would turn per-layer wrapping off
            continue
        lines = text.splitlines()
        n = next((i for i, t in enumerate(lines, 1) if "get_peft_model(" in t), None)
        ev = (Evidence(file=sc.path, line=n, text=lines[n - 1].strip()[:160]),) if n else ()
        yield finding(
            f"{sc.path} wraps the model with PEFT (get_peft_model) and drives FSDP through its own "
            f"Accelerate loop on FSDP1, but never sets PEFT's wrap policy: FSDP then wraps frozen "
            f"and trainable parameters in the same units, and with use_orig_params false (what "
            f"PEFT needs to save memory, and Accelerate's default) FSDP refuses such a unit "
            f"(\"Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`\").",
            fix=("after get_peft_model add: from peft.utils.other import fsdp_auto_wrap_policy; "
                 "if getattr(accelerator.state, \"fsdp_plugin\", None) is not None: "
                 "accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)"),
            evidence=ev)
