"""The optimizer and scheduler DeepSpeed builds from the config (DS322) and ZeRO's list of tested
optimizers (DS216).

DeepSpeed builds ``optimizer.type`` itself when it names one of its own optimizers (compared in
lower case: "AdamW", "adamw"), else it looks the name up as a class of ``torch.optim`` (exactly as
written: "SGD", not "sgd"), and fails at ``deepspeed.initialize`` when neither has it
(``runtime/engine.py: _configure_basic_optimizer``). ``scheduler.type`` is looked up in
``deepspeed.runtime.lr_schedules`` and then in ``torch.optim.lr_scheduler`` the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, lintable, show_json
from dsdoctor.diagnose.checks.runfacts import stage_source, zero_stage
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Evidence, Finding

#: DeepSpeed's own optimizers (runtime/config.py DEEPSPEED_OPTIMIZERS), as the docs spell them;
#: DeepSpeed compares them in lower case.
DS_OPTIMIZERS = ("Adam", "AdamW", "Lamb", "Adagrad", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon")
#: The 1-bit optimizers: in every release up to 0.19.6 (runtime/fp16/onebit/), deleted by
#: deepspeedai/DeepSpeed#8490 in 0.19.7 (whose runtime/config.py no longer lists them).
ONEBIT_OPTIMIZERS = ("OneBitAdam", "ZeroOneAdam", "OneBitLamb")
ONEBIT_GONE = (0, 19, 7)
#: DeepSpeed's Lion (DeepSpeedCPULion, FusedLion) joined ZeRO's tested list in 0.11.0
#: (deepspeedai/DeepSpeed#4331, runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS).
LION_TESTED = (0, 11, 0)
#: torch.optim classes (torch 2.x), looked up by their exact name.
TORCH_OPTIMIZERS = ("Adadelta", "Adafactor", "Adagrad", "Adam", "Adamax", "AdamW", "ASGD", "LBFGS",
                    "NAdam", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam", "Muon")
#: deepspeed.runtime.lr_schedules classes (VALID_LR_SCHEDULES), exact names.
DS_SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
#: torch.optim.lr_scheduler classes, exact names.
TORCH_SCHEDULERS = ("LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
                    "LinearLR", "ExponentialLR", "SequentialLR", "CosineAnnealingLR",
                    "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
                    "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR")


def onebit_removed(release: str) -> bool:
    """True for the releases without the 1-bit optimizers (0.19.7 and later)."""
    return parse_version(release) >= ONEBIT_GONE


def ds_optimizers(release: str) -> tuple[str, ...]:
    return DS_OPTIMIZERS if onebit_removed(release) else DS_OPTIMIZERS + ONEBIT_OPTIMIZERS


def optimizer_known(name: str, release: str) -> bool:
    return name.lower() in {n.lower() for n in ds_optimizers(release)} or name in TORCH_OPTIMIZERS


def scheduler_known(name: str, release: str) -> bool:
    return name in DS_SCHEDULERS or name in TORCH_SCHEDULERS


def closest(name: str, choices: tuple[str, ...]) -> str | None:
    """The spelling the user most likely meant ('AdamWW' -> 'AdamW'), compared case-blind."""
    lower = {c.lower(): c for c in choices}
    hit = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
    return lower[hit[0]] if hit else None


# ------------------------------------------------------------------- DS322 unknown type names

def unknown_optimizer_or_scheduler(ctx: Context, rule: Any) -> Iterator[Finding]:
    """optimizer.type / scheduler.type that neither DeepSpeed nor torch provides."""
    if lintable(ctx) is None:
        return
    release = ctx.ds_version
    for section, known, ds_names, torch_where in (
            ("optimizer", optimizer_known, ds_optimizers(release), "torch.optim"),
            ("scheduler", scheduler_known, DS_SCHEDULERS, "torch.optim.lr_scheduler")):
        typ = ctx.cfg_get(f"{section}.type")
        if not isinstance(typ, str) or typ == "auto" or known(typ, release):
            continue
        gone = section == "optimizer" and typ.lower() in {n.lower() for n in ONEBIT_OPTIMIZERS}
        if gone:
            yield finding(
                f"optimizer.type is {show_json(typ)}: the 1-bit optimizers (OneBitAdam, "
                f"ZeroOneAdam, OneBitLamb) were deleted from DeepSpeed in 0.19.7, and this run "
                f"is linted against DeepSpeed {release} ({ctx.ds_version_source}), so "
                f"deepspeed.initialize fails looking for torch.optim.{typ}"
                + (" (no input states the run's release: --env or --ds-version settles it)."
                   if ctx.ds_version_source == "default" else "."),
                path="optimizer.type",
                fix=f"set optimizer.type from {show_json(typ)} to \"AdamW\" (or keep it with "
                    f"DeepSpeed 0.19.6 or older, and say so with --ds-version)",
                change={"op": "set", "path": "optimizer.type", "old": typ, "new": "AdamW"})
            continue
        torch_names = TORCH_OPTIMIZERS if section == "optimizer" else TORCH_SCHEDULERS
        guess = closest(typ, ds_names + torch_names)
        if section == "scheduler" and guess is None:
            # Case slips ("warmuplr") are not matched case-blind by DeepSpeed: say the exact name.
            guess = next((n for n in ds_names + torch_names if n.lower() == typ.lower()), None)
        yield finding(
            f"{section}.type is {show_json(typ)}: DeepSpeed {ctx.ds_version} has no {section} of that "
            f"name (its own: {', '.join(ds_names)}), and {torch_where} has no class of that name "
            f"either, so deepspeed.initialize fails before the first step.",
            path=f"{section}.type",
            fix=(f"set {section}.type from {show_json(typ)} to {show_json(guess)}" if guess else
                 f"set {section}.type to one of {', '.join(ds_names)}, or the exact class name of "
                 f"a {torch_where} {section}"),
            change=({"op": "set", "path": f"{section}.type", "old": typ, "new": guess}
                    if guess else None))


# ------------------------------------------------------------------- DS216 untested optimizer

#: The assertion of runtime/engine.py (_do_optimizer_sanity_check) that ZeRO raises.
UNTESTED = "untested ZeRO Optimizer"
ALLOW_KEY = "zero_allow_untested_optimizer"


def _untested_lines(ctx: Context) -> tuple[Evidence, ...]:
    s = ctx.symptom("python-exception")
    if s is None:
        return ()
    return tuple(e for e in s.evidence if UNTESTED in e.text)[:1]


def untested_zero_optimizer(ctx: Context, rule: Any) -> Iterator[Finding]:
    """ZeRO refused a client optimizer it has not tested: the key that lets it through."""
    ev = _untested_lines(ctx)
    if not ev:
        return
    allow = ctx.cfg_get(ALLOW_KEY) if ctx.ds is not None else None
    if allow is True:
        # The config given now allows it: the log is from before the fix (or another config).
        return
    opt = ctx.cfg_get("optimizer.type") if ctx.ds is not None else None
    where = ctx.cfg_file()
    if ctx.ds is None:
        state = "the config is not given (--config ds_config.json shows whether it sets the key)"
        fix = f'add "{ALLOW_KEY}": true at the top level of the DeepSpeed config'
    elif allow is None:
        state = f"{where or 'the config'} does not set {ALLOW_KEY}"
        fix = f'add "{ALLOW_KEY}": true at the top level of {where or "the DeepSpeed config"}'
    else:
        state = f"{where or 'the config'} sets {ALLOW_KEY} to {show_json(allow)}"
        fix = f"set {ALLOW_KEY} from {show_json(allow)} to true"
    what = (f"the client optimizer passed to deepspeed.initialize (the config's optimizer.type "
            f"{show_json(opt)} is not used when the script passes its own)" if opt else
            "the optimizer the script passed to deepspeed.initialize (the config has no optimizer section)")
    tested = ("DeepSpeed's FusedAdam, CPUAdam, CPUAdagrad and Lion"
              if parse_version(ctx.ds_version) >= LION_TESTED else
              "DeepSpeed's FusedAdam, CPUAdam and CPUAdagrad")
    yield finding(
        f"ZeRO stopped at start-up: {what} is not one ZeRO has tested (torch Adam/AdamW/Adagrad, "
        f"{tested}), and {state}.",
        path=ALLOW_KEY if ctx.ds is not None and allow is not None else None,
        fix=f"{fix} (ZeRO then partitions that optimizer's states like Adam's; check the loss "
            f"curve, since ZeRO was not tested with it), or use AdamW",
        evidence=ev,
        change=({"op": "set", "path": ALLOW_KEY, "new": True} if allow is None else
                {"op": "set", "path": ALLOW_KEY, "old": allow, "new": True}
                ) if lintable(ctx) is not None else None)


# ------------------------------------------------------------------- DS217 1-bit optimizers

def onebit_optimizer_setup(ctx: Context, rule: Any) -> Iterator[Finding]:
    """A 1-bit optimizer with ZeRO (DeepSpeed asserts), and what its communication backend needs."""
    typ = ctx.cfg_get("optimizer.type")
    if not isinstance(typ, str):
        return
    canon = next((n for n in ONEBIT_OPTIMIZERS if n.lower() == typ.lower()), None)
    if canon is None or onebit_removed(ctx.ds_version):
        return  # DS322 says the name is gone in this release
    stage = zero_stage(ctx)
    backend = ctx.cfg_get("optimizer.params.comm_backend_name", "nccl")
    wanted = {"nccl": ("cupy",), "mpi": ("mpi4py", "cupy")}.get(str(backend), ())
    if stage is None:
        ctx.missing(rule.code, "whether ZeRO is on with the 1-bit optimizer", "--config")
        return
    if stage > 0:
        yield finding(
            f"optimizer.type is {show_json(typ)} with ZeRO stage {stage} ({stage_source(ctx)}): "
            f"DeepSpeed builds its 1-bit optimizers only without ZeRO and stops at "
            f"deepspeed.initialize (\"{_ONEBIT_ASSERT[canon]} is not compatible with ZeRO\").",
            path=("zero_optimization.stage" if ctx.cfg_has("zero_optimization.stage")
                  else "optimizer.type"),
            fix=(f"set zero_optimization.stage from {stage} to 0 to keep {canon} (its states are "
                 f"then not partitioned; it also needs {' and '.join(wanted) or 'its backend'}), "
                 f"or set optimizer.type from {show_json(typ)} to \"AdamW\" to keep ZeRO"))
        return
    packages = ctx.env_get("packages")
    if not wanted:
        return
    if not isinstance(packages, dict) or any(p not in packages for p in wanted):
        ctx.missing(rule.code, f"whether {' and '.join(wanted)} (the {canon} {backend} backend) "
                    "is installed", "--env snapshot.json")
        return
    absent = [p for p in wanted if not packages.get(p)]
    if not absent:
        return
    extra = "deepspeed[1bit]" if backend == "nccl" else "deepspeed[1bit_mpi]"
    yield finding(
        f"optimizer.type is {show_json(typ)} with the {backend} communication backend, and the "
        f"environment ({ctx.env_source}) has no {' or '.join(absent)}: the 1-bit optimizers' "
        f"compressed all-reduce imports it, and a plain `pip install deepspeed` (the PyPI wheel) "
        f"does not bring it, so the run stops at the optimizer's creation.",
        path="optimizer.params.comm_backend_name" if ctx.cfg_has(
            "optimizer.params.comm_backend_name") else "optimizer.type",
        fix=(f"pip install \"{extra}\" (or the cupy wheel of your CUDA, e.g. cupy-cuda12x"
             + (", and mpi4py" if "mpi4py" in absent else "") + "), or use AdamW"))

_ONEBIT_ASSERT = {"OneBitAdam": "1bit-Adam", "ZeroOneAdam": "0/1 Adam", "OneBitLamb": "1bit-Lamb"}
