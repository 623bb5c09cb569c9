"""Checks about numeric precision: fp16 overflows and scale collapse (DS101, DS102), NaN and
zero losses (DS103, DS104), bf16 models in fp16 (DS201), bf16 before Ampere (DS204), fp16 + bf16 (DS308).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose import verdict
from dsdoctor.diagnose.checks.common import (
    ampere_ok,
    bf16_in_use,
    bf16_model,
    enabled,
    env_gpus,
    finding,
    fmt_scale,
    fp16_in_use,
    log_facts,
    model_name,
    pre_ampere_gpus,
    symptom_evidence,
    trainer_arg,
    vals,
    version_tuple,
)
from dsdoctor.diagnose.checks.runfacts import initial_scale_power, package_version, precision
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding, Symptom

# ------------------------------------------------------------------------- DS101 / DS102: fp16


#: More overflows than this, or a scale this low, is not the start-up search of the scaler.
_BURST_MAX = 50
_LOW_SCALE = 8.0
#: "Reducing hysteresis" lines between halvings when the scale never rose: DeepSpeed's default
#: hysteresis is 2 (one such line), a config may set more (precision_config.py).
_HYSTERESIS_SLACK = 4
#: A run whose step lines say this share of its steps were skipped is not learning (as the
#: verdict judges it: verdict.MAX_WARMUP_SKIPS, verdict.SKIPPED_SHARE_NOT_LEARNING).
_MOSTLY_SKIPPED_MIN = 40
_MOSTLY_SKIPPED_SHARE = 0.5
#: Patterns whose line says the trainer stopped because too many steps in a row overflowed
#: (GPT-NeoX's OverflowMonitor): the scaler's search failed, whatever the count of lines.
_GAVE_UP_PATTERNS = ("neox-overflow-monitor",)


def _gave_up(s: Symptom) -> bool:
    return any(s.patterns.get(p) for p in _GAVE_UP_PATTERNS)


def _lowest_scale(s: Symptom) -> Any:
    """The lowest loss scale the overflows reached (the next scale, else the attempted one)."""
    low = vals(s, "next_scale", "min")
    return vals(s, "attempted_scale", "min") if low is None else low


def _overflow_summary(s: Symptom) -> str:
    first = vals(s, "attempted_scale", "first")
    low = _lowest_scale(s)
    span = f" (lines {s.first.line}-{s.last.line})" if s.last.line != s.first.line else \
        f" (line {s.first.line})"
    txt = f"{s.count} fp16 overflow(s){span}"
    if first is not None:
        txt += f"; the loss scale went from {fmt_scale(first)} down to {fmt_scale(low)}"
    return txt


def _steps_after(ctx: Context, ev: Evidence) -> int:
    return sum(1 for p in ctx.timeline if p.file == ev.file and p.line > ev.line)


def overflow_events(ctx: Context, s: Symptom) -> int:
    """How many overflows the lines stand for. DeepSpeed's non-ZeRO fp16 optimizer prints its
    "Reducing dynamic loss scale" line on every rank (fused_optimizer.py:413-414 at v0.19.8), so
    one overflow can be several lines; each overflow skips one step, and DeepSpeed's step lines
    count the skipped steps, which then bound the events."""
    skipped = ctx.run.value("steps_skipped")
    if isinstance(skipped, int) and not isinstance(skipped, bool) and 0 < skipped < s.count:
        return skipped
    return s.count


def scale_rose_again(s: Symptom, events: int | None = None) -> bool:
    """More overflows than halvings from the first scale down to the lowest: the scale must have
    risen in between, which DeepSpeed's DynamicLossScaler does only after ``loss_scale_window``
    (1000 by default) steps without an overflow (loss_scaler.py:295-299 at v0.19.5), so the run
    kept training between them. ``events``: the overflows the lines stand for (overflow_events)."""
    first, low = vals(s, "attempted_scale", "first"), _lowest_scale(s)
    if not isinstance(first, (int, float)) or not isinstance(low, (int, float)) or low <= 0 \
            or first < low:
        return False
    return (s.count if events is None else events) > math.log2(first / low) + _HYSTERESIS_SLACK


def mostly_skipped(ctx: Context) -> bool:
    """DeepSpeed's step lines (``step=N, skipped=M``) say most steps were skipped."""
    done, skipped = ctx.run.value("steps_done"), ctx.run.value("steps_skipped")
    return (isinstance(done, int) and isinstance(skipped, int) and skipped > _MOSTLY_SKIPPED_MIN
            and skipped >= _MOSTLY_SKIPPED_SHARE * done)


def is_collapse(ctx: Context) -> bool:
    """The scaler gave up or is about to: minimum reached, a very low scale, most steps skipped,
    or a long run of overflows that never let the scale rise again. A long healthy fp16 run
    overflows about once per ``loss_scale_window`` all its life: its count alone says nothing."""
    if ctx.has_symptom("loss-scale-collapse"):
        return True
    s = ctx.symptom("fp16-overflow")
    if s is None:
        return False
    low = _lowest_scale(s)
    if isinstance(low, (int, float)) and low <= _LOW_SCALE:
        return True
    if _gave_up(s) or mostly_skipped(ctx):
        return True
    events = overflow_events(ctx, s)
    return events > _BURST_MAX and not scale_rose_again(s, events)


def fp16_overflow_warmup(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS101: a short burst of overflows while the dynamic scaler searches (normal)."""
    s = ctx.symptom("fp16-overflow")
    if s is None or is_collapse(ctx) or (
            ctx.has_symptom("nan-loss") and not skipped_step_norms(ctx)):
        return
    after = _steps_after(ctx, s.last)
    tail = (f" Training went on: {after} progress line(s) after the last overflow."
            if after else "")
    power = initial_scale_power(ctx)
    start = (f" (fp16.initial_scale_power {power.value})"
             if power is not None and power.source.kind != "default" else "")
    yield finding(
        f"{_overflow_summary(s)}{start}. {_overflow_why(s, overflow_events(ctx, s))}{tail}",
        fix="Nothing to do while the scale keeps recovering; if most steps are skipped or the "
            "scale reaches its minimum, see DS102.",
        evidence=s.evidence)


def _overflow_why(s: Symptom, events: int) -> str:
    if scale_rose_again(s, events):
        return ("The scale rose again between them: DeepSpeed's dynamic scaler doubles it after "
                "loss_scale_window steps without an overflow (1000 by default) and halves it on "
                "the next overflow, so a long fp16 run overflows now and then all its life; it "
                "recovered each time.")
    return ("A few skipped steps at the start of fp16 training are the dynamic loss scaler "
            "searching for a scale that fits; it recovered.")


def loss_scale_collapse(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS102: the scaler cannot find a scale (minimum reached or a long run of overflows)."""
    if not is_collapse(ctx):
        return
    parts: list[str] = []
    ev: list[Evidence] = []
    col = ctx.symptom("loss-scale-collapse")
    ovf = ctx.symptom("fp16-overflow")
    if ovf is not None:
        skipped = vals(ovf, "skipped", "max")
        if _gave_up(ovf) and isinstance(skipped, int):
            parts.append(f"the trainer stopped after {skipped} iterations in a row were skipped "
                         f"for fp16 overflows (line {ovf.last.line})")
        else:
            parts.append(_overflow_summary(ovf))
        ev.extend(ovf.evidence)
    if col is not None:
        # every rank prints the one collapse: "on 2 ranks", not "2 time(s)"
        times = (f"on {len(col.ranks)} ranks (one line each)" if len(col.ranks) > 1
                 and col.count == len(col.ranks) else f"{col.count} time(s)")
        parts.append(f"the scaler reached its minimum {times} (line {col.first.line}"
                     f": {col.first.text[:120]!r})")
        ev[:0] = col.evidence
    if mostly_skipped(ctx):
        known = ctx.run.steps_skipped
        where = f" (line {known.source.line})" if known is not None and known.source.line else ""
        parts.append(f"{ctx.run.value('steps_skipped')} of {ctx.run.value('steps_done')} steps "
                     f"were skipped{where}")
    why = ("This is not the start-up search: the scale keeps halving because the fp16 "
           "gradients overflow whatever the scale, so every step is skipped (the model does "
           "not learn) or the run stops")
    known_power = initial_scale_power(ctx)
    power = known_power.value if known_power is not None else None
    yield _collapse_finding(ctx, parts, why, bf16_model(ctx), power, ev)


def _collapse_finding(ctx: Context, parts: list[str], why: str, bf16: str | None,
                      power: int | None, ev: list[Evidence]) -> Finding:
    """DS102's finding: a higher start is no fix (issue 20).

    DeepSpeed's dynamic scaler halves the scale on every overflow down to ``min_loss_scale`` and
    raises "Current loss scale already at minimum" there (deepspeed/runtime/fp16/loss_scaler.py,
    DynamicLossScaler.update_scale, lines 265-279 at v0.19.5; ZeRO-1/2 and ZeRO-3 build the same
    scaler with CreateLossScaler: stage_1_and_2.py:645, stage3.py:511). At the minimum (1 by
    default) the gradients overflow fp16 even unscaled, so starting from 2^32 only adds halvings
    before the same collapse (issue 20 reports the README sample's run collapsing again with 32).
    Before the minimum the same holds: an overflow only ever halves the scale, so a higher start
    adds overflows and never removes one.
    1.0 is the Trainer's default max_grad_norm (TrainingArguments, Transformers 5.23.0)."""
    clip = ctx.ds.get("gradient_clipping") if ctx.ds is not None else None
    fixes = []
    if bf16:
        fixes.append(f"train in bf16 instead of fp16 ({bf16}): "
                     '"bf16": {"enabled": true}, "fp16": {"enabled": false} (Ampere or newer), '
                     "or fp32")
    fixes.append("lower the learning rate" + ("" if clip else " and set gradient_clipping (1.0)"))
    if not bf16:
        fixes.append("or train in bf16 (Ampere or newer) / fp32")
    start = f" ({power})" if power is not None else ""
    fixes.append(f"not a higher initial_scale_power{start}: it would not help, it only delays "
                 "the collapse")
    return finding("; ".join(parts) + f". {why}.", fix="; ".join(fixes) + ".",
                   path=None if clip else "gradient_clipping", evidence=tuple(ev[:8]))


# ------------------------------------------------------------------------------- DS103 nan-loss

def skipped_step_norms(ctx: Context) -> bool:
    """The NaN/inf lines are only skipped fp16 steps' grad norms (verdict.skipped_step_norms)."""
    return verdict.skipped_step_norms(ctx.symptom("nan-loss"), ctx.symptom("fp16-overflow"))


def nan_loss(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS103: NaN/inf loss or gradient norm, with the causes this run makes likely."""
    s = ctx.symptom("nan-loss")
    if s is None or skipped_step_norms(ctx):
        return
    causes: list[str] = []
    fixes: list[str] = []
    path = None
    bf16 = bf16_model(ctx)
    fp16 = fp16_in_use(ctx)
    in_bf16 = precision(ctx) == "bf16"
    if in_bf16:
        # bf16 has fp32's exponent range: no precision switch fixes a NaN here.
        causes.append("not the number format: the run is in bf16 (bf16 has the range of fp32, so "
                      "values do not overflow the way fp16's do)")
    elif bf16 and fp16:
        causes.append(f"the model was pretrained in bf16 ({bf16}) and runs in fp16 "
                      f"({fp16[0][1]}): its activations can exceed fp16's range (max 65504)")
        fixes.append("train in bf16 (Ampere or newer) or fp32, not fp16")
        path = fp16[0][0]
    elif fp16:
        causes.append(f"fp16 mixed precision ({fp16[0][1]})")
        path = fp16[0][0]
    ovf = ctx.symptom("fp16-overflow")
    if ovf is not None and ovf.first.file == s.first.file and ovf.first.line < s.first.line:
        causes.append(f"{ovf.count} fp16 overflow(s) came first (line {ovf.first.line})")
    lr = trainer_arg(ctx, "learning_rate")
    if lr is None:
        lr = ctx.cfg_get("optimizer.params.lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr >= 1e-3:
        causes.append(f"a high learning rate ({lr:g})")
        fixes.append(f"lower the learning rate (now {lr:g}) or add warmup")
    clip = ctx.cfg_get("gradient_clipping")
    if ctx.ds is not None and (clip in (None, 0, 0.0)):
        fixes.append("set gradient_clipping (e.g. 1.0)")
    if bf16 is None and fp16 and not ctx.model:
        fixes.append("check the model's pretraining dtype: pass --model PATH (config.json "
                     "torch_dtype)")
    if not causes:
        causes.append("no precision or learning-rate cause is visible in the inputs given")
    if not fixes:
        fixes.append("check the data for empty/all-masked batches and lower the learning rate"
                     + ("" if in_bf16 else ", and compare with a run in fp32"))
    where = f"first at line {s.first.line}" + (f", {s.count} times" if s.count > 1 else "")
    yield finding(f"The loss or gradient norm became NaN/inf ({where}). Likely cause(s): "
                  + "; ".join(causes) + ".", fix="; ".join(fixes) + ".", path=path,
                  severity="error", evidence=s.evidence)


# ------------------------------------------------------------------------- DS104 loss stuck at 0

_ZERO_MIN = 3


def loss_stuck_at_zero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS104: the loss is exactly 0 for several logged steps."""
    s = ctx.symptom("loss-zero")
    if s is None or s.count < _ZERO_MIN:
        return
    notes = []
    nan = ctx.symptom("nan-loss")
    if nan is not None:
        notes.append(f"the gradient norm is NaN too ({nan.count} line(s)): the weights are "
                     "probably NaN already and the loss is reported as 0")
    fp16 = fp16_in_use(ctx)
    bf16 = bf16_model(ctx)
    if fp16 and bf16:
        notes.append(f"a bf16-pretrained model runs in fp16 ({bf16})")
    hpz = _hpz_with_offload(ctx)
    if hpz:
        notes.append(hpz)
    extra = (" " + "; ".join(notes) + ".") if notes else ""
    yield finding(
        f"The loss is exactly 0 on {s.count} logged steps (first at line {s.first.line}).{extra} "
        "A real loss is never exactly 0: either every label is masked (-100, e.g. a prompt "
        "template that masks the answer, or sequences truncated before the answer), or the "
        "model produces NaN/inf that the logger shows as 0.",
        fix="Check a batch: count labels != -100; if the gradient norm is NaN, see DS103 "
            "(fp16 vs bf16, learning rate).",
        path=fp16[0][0] if (fp16 and bf16) else None, evidence=s.evidence)


def _hpz_with_offload(ctx: Context) -> str | None:
    """A note when ZeRO++'s hpZ runs with an offload: users report a loss stuck at 0 or a constant
    loss with grad norm 0 there (DeepSpeed#6926, ms-swift#3697), undiagnosed upstream, and a CPU
    run here trains normally (tests/test_upstream_live_runs.py), so it is a suspect, not a cause."""
    size = ctx.cfg_get("zero_optimization.zero_hpz_partition_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 1:
        return None
    offloaded = [k for k in ("offload_optimizer", "offload_param")
                 if str(ctx.cfg_get(f"zero_optimization.{k}.device") or "none").lower()
                 in ("cpu", "nvme")]
    if not offloaded:
        return None
    return (f"hpZ is on (zero_hpz_partition_size {size}) with {' and '.join(offloaded)}: users "
            "report a loss stuck at 0 or grad norm 0 with this pair on multi-GPU runs "
            "(DeepSpeed#6926, ms-swift#3697), not diagnosed upstream; a run with "
            "zero_hpz_partition_size 1 tells whether it is the cause")


# ---------------------------------------------------------------- DS201 bf16 model run in fp16


def bf16_model_in_fp16(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS201: a bf16-pretrained model trained or inferred in fp16."""
    uses = fp16_in_use(ctx)
    if not uses:
        return
    why = bf16_model(ctx)
    if why is None:
        if ctx.model is None and model_name(ctx) is None:
            ctx.missing(rule.code, "the model's pretraining dtype", "--model PATH")
        return
    trouble = [k for k in ("nan-loss", "loss-scale-collapse", "fp16-overflow", "loss-zero")
               if ctx.has_symptom(k)]
    sev = "error" if trouble else "warning"
    if trouble:
        first = ctx.symptoms[trouble[0]].first
        seen = (f" The log already shows {', '.join(trouble)} (first at line {first.line}).")
    else:
        seen = " No overflow or NaN has shown up yet; it typically does later in training."
    ok = ampere_ok(ctx)
    if ok is False:
        gpu_fix = (f"these GPUs have no bf16 ({', '.join(pre_ampere_gpus(ctx))}): train in fp32 "
                   "(no fp16/bf16), or use Ampere-or-newer GPUs for bf16")
    else:
        gpu_fix = ('switch to bf16: "bf16": {"enabled": true} and "fp16": {"enabled": false} '
                   "(Trainer: --bf16 instead of --fp16; Accelerate: mixed_precision: bf16)"
                   + ("" if ok else ", on Ampere or newer GPUs; otherwise fp32"))
    path, where = uses[0]
    file = line = None
    if path == "mixed_precision" and ctx.accelerate is not None:
        file, line = ctx.accelerate.path, ctx.accelerate.line(path)
    yield finding(
        f"The model is pretrained in bf16 ({why}) but runs in fp16 ({where}). bf16 has fp32's "
        "range while fp16 tops out at 65504: activations of bf16-pretrained models overflow in "
        f"fp16, giving OVERFLOW! loops, loss-scale collapse or NaN loss (training and ZeRO "
        f"inference alike).{seen}",
        fix=gpu_fix[0].upper() + gpu_fix[1:] + ".", path=path, severity=sev,
        evidence=symptom_evidence(ctx, *trouble), file=file, line=line)


# -------------------------------------------------------------------- DS204 bf16 before Ampere


def bf16_on_pre_ampere(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS204: bf16 enabled on GPUs without bf16 support (compute capability < 8.0)."""
    uses = bf16_in_use(ctx)
    if not uses:
        return
    ds_v, ds_src = package_version(ctx, "deepspeed")
    dsv = version_tuple(ds_v)
    if dsv is not None and dsv < (0, 6, 0) and uses[0][0] == "bf16.enabled":
        yield finding(
            f"bf16 is enabled ({uses[0][1]}) but DeepSpeed {ds_v} (from the {ds_src}) predates "
            "bf16 support, added in DeepSpeed 0.6.0: the bf16 section is ignored.",
            fix="Upgrade DeepSpeed to 0.6.0 or newer (pip install -U deepspeed).",
            path="bf16.enabled")
    old = pre_ampere_gpus(ctx)
    if not old:
        if not env_gpus(ctx) and not log_facts(ctx).gpus:
            ctx.missing(rule.code, "whether the GPUs support bf16", "--env snapshot.json")
        return
    path, where = uses[0]
    yield finding(
        f"bf16 is enabled ({where}) but these GPUs predate Ampere: {', '.join(old)}. bf16 "
        "needs compute capability 8.0 or newer (A100, A10, RTX 30xx, H100, ...); it fails or "
        "is emulated very slowly.",
        fix="Use fp32, or fp16 for a model pretrained in fp16/fp32 (not for bf16-pretrained "
            "models, see DS201), or run on Ampere or newer GPUs.",
        path=path)


# --------------------------------------------------------------------- DS308 fp16 and bf16

def fp16_and_bf16(ctx: Context, rule: Any) -> Iterator[Finding]:
    """fp16 and bf16 both enabled: DeepSpeed asserts at start-up."""
    if not (enabled(ctx.cfg_get("fp16.enabled")) and
            (enabled(ctx.cfg_get("bf16.enabled")) or enabled(ctx.cfg_get("bfloat16.enabled")))):
        return
    bkey = "bf16" if ctx.cfg_has("bf16.enabled") else "bfloat16"
    gpu_note = ""
    gpus = ctx.env_get("gpus") or []
    ccs = [g.get("compute_capability") for g in gpus if isinstance(g, dict)]
    if ccs and all(isinstance(c, (str, int, float)) for c in ccs):
        try:
            ok = all(float(str(c)) >= 8.0 for c in ccs)
            gpu_note = (" The GPUs in --env are Ampere or newer: prefer bf16." if ok else
                        " The GPUs in --env are older than Ampere (compute capability < 8.0): bf16 "
                        "is not supported there, keep fp16.")
        except ValueError:
            pass
    yield finding(
        f"fp16.enabled and {bkey}.enabled are both true: the two precisions are exclusive and "
        f"DeepSpeed stops at start-up ('bfloat16 and fp16 modes cannot be simultaneously "
        f"enabled').{gpu_note}",
        path="fp16.enabled",
        fix=f"keep one: set fp16.enabled to false (bf16 needs Ampere or newer GPUs) or "
            f"{bkey}.enabled to false")
