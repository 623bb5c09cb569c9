"""DS332: fp16 without ZeRO (stage 0) on a DeepSpeed release whose ``engine.backward`` does not
multiply the loss by the fp16 optimizer's loss scale, while that optimizer's step still divides
the gradients by it (from 0.18.3, PR #7665's backward rewrite; no fix released as of 0.19.8).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, fp16_in_use, lintable, show_json
from dsdoctor.diagnose.checks.runfacts import zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import as_real, parse_version
from dsdoctor.model import Finding

#: engine.backward scales the loss only for a ZeROOptimizer (or torch autocast's GradScaler) from
#: 0.18.3; up to 0.18.2 it called FP16_Optimizer.backward, which multiplies by cur_scale.
BROKEN_SINCE = (0, 18, 3)
#: the newest release read for this rule: still broken there (PR #8393 is open)
LAST_CHECKED = (0, 19, 8)
LOSS_SCALE_KEY = "fp16.loss_scale"
INITIAL_POWER_KEY = "fp16.initial_scale_power"


def _dotted(t: tuple[int, ...]) -> str:
    return ".".join(map(str, t))


def _divisor(ctx: Context) -> tuple[float | None, str]:
    """What the step divides by at the start: a static fp16.loss_scale, else the dynamic scale
    (2^initial_scale_power, 2^16 when the config does not say); with a description."""
    static = as_real(ctx.cfg_get(LOSS_SCALE_KEY))
    if static is not None and static > 0:
        return static, f"the static {LOSS_SCALE_KEY} {show_json(ctx.cfg_get(LOSS_SCALE_KEY))}"
    power = ctx.cfg_get(INITIAL_POWER_KEY)
    if isinstance(power, int) and not isinstance(power, bool):
        return 2.0 ** power, f"the dynamic loss scale (2^{power} at the start)"
    return None, "the dynamic loss scale (2^16 at the start by default)"


def fp16_zero0_unscaled_backward(ctx: Context, rule: Any) -> Iterator[Finding]:
    if lintable(ctx) is None or zero_stage(ctx) != 0:
        return
    where = [desc for path, desc in fp16_in_use(ctx) if path == "fp16.enabled"]
    if not where:
        return
    release = parse_version(ctx.ds_version)
    if release < BROKEN_SINCE:
        return
    divisor, scale_text = _divisor(ctx)
    if divisor == 1.0:
        return  # a static scale of 1: nothing is divided (plain unscaled fp16 gradients)
    if ctx.ds_version_source == "default":
        on = (f"on DeepSpeed {_dotted(BROKEN_SINCE)} to {_dotted(LAST_CHECKED)} (no input names "
              "the run's release: the check assumes it is in that range; --env or --ds-version "
              "settles it)")
    elif release > LAST_CHECKED:
        on = (f"on DeepSpeed {ctx.ds_version} ({ctx.ds_version_source}; {_dotted(LAST_CHECKED)} "
              "is the last release checked, and none up to it has the fix)")
    else:
        on = f"on DeepSpeed {ctx.ds_version} ({ctx.ds_version_source})"
    yield finding(
        f"fp16 at ZeRO stage 0 ({where[0]}) {on}: engine.backward does not multiply the loss "
        f"by the fp16 optimizer's loss scale, but its step still divides the gradients by "
        f"{scale_text}, so the optimizer receives gradients that many times too small: with SGD "
        "every update is that many times too small, with Adam the updates shrink where a divided "
        "gradient nears eps, and gradient clipping sees a norm that many times too small. No "
        "error and no overflow; training stalls or slows silently.",
        fix="use bf16 instead of fp16, or set zero_optimization.stage to 1 or higher (the ZeRO "
            "optimizer scales the loss itself); no DeepSpeed release has the fix as of "
            f"{_dotted(LAST_CHECKED)} (DeepSpeed PR 8393 is open)",
        path="zero_optimization.stage" if ctx.cfg_has("zero_optimization.stage") else "fp16.enabled")


__all__ = ["fp16_zero0_unscaled_backward"]
