"""Failures that come from a combination of releases (DeepSpeed, Transformers, Accelerate, torch):
ZeRO's no_sync assertion (DS126, DS238), torch >= 2.6's weights-only resume (DS127) and MoE
models at ZeRO-3 without leaf modules (DS239).

Each check reads the versions from the run model (env snapshot or log) and says which release
stops the failure; when no input names a version it says which one to check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, script_trees
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.model import Evidence, Finding

# ------------------------------------------------------------------ DS126/DS238 no_sync at ZeRO-2/3

#: DeepSpeed's engine.no_sync (>= 0.16.0) asserts when gradients are partitioned (stage >= 2).
NO_SYNC = "no_sync context manager is incompatible with gradient partitioning"
NO_SYNC_DEEPSPEED = "0.16.0"
#: Transformers' Trainer stops calling accelerator.no_sync under DeepSpeed (trainer.py@v4.47.1).
NO_SYNC_TRANSFORMERS = "4.47.1"
#: The one Transformers release whose Trainer enters no_sync on the last micro-batch of each step.
NO_SYNC_INVERTED_TRANSFORMERS = "4.46.2"
#: Accelerate's no_sync skips a DeepSpeed engine at ZeRO >= 2 (accelerator.py@v1.9.0).
NO_SYNC_ACCELERATE = "1.9.0"
_STAGE_IN_MESSAGE = re.compile(r"ZeRO stage (\d)")


def _version(ctx: Context, package: str) -> str | None:
    known = ctx.run.version(package)
    return str(known.value) if known is not None and known.value else None


def _older(version: str | None, than: str) -> bool | None:
    """True/False when the version is known, None when no input names it."""
    return None if version is None else parse_version(version) < parse_version(than)


def _exception_lines(ctx: Context, text: str) -> tuple[Evidence, ...]:
    s = ctx.symptom("python-exception")
    return tuple(e for e in s.evidence if text in e.text)[:1] if s is not None else ()


def _frames(ctx: Context) -> list[str]:
    return [f.evidence.text for f in ctx.facts_named("traceback-frame")]


def _caller(ctx: Context, frames: list[str]) -> str | None:
    """Who entered no_sync: the Trainer's loop, Accelerate's accumulate, or not known."""
    if any("trainer.py" in f and "_inner_training_loop" in f for f in frames):
        return "trainer"
    if any("accelerator.py" in f and "in accumulate" in f for f in frames):
        return "accumulate"
    if ctx.run.value("uses_trainer") is True:
        return "trainer"
    return None


def _no_sync_fix(caller: str | None, transformers: str | None) -> str:
    if caller == "trainer":
        if transformers is not None and not _older(transformers, NO_SYNC_TRANSFORMERS):
            # A Trainer that already skips it: the call comes through Accelerate's accumulate
            # (a subclass, TRL) and Accelerate is the release to raise.
            return (f"upgrade accelerate to {NO_SYNC_ACCELERATE} or later (its no_sync skips "
                    "ZeRO-2/3); the Trainer itself stopped calling it in transformers "
                    f"{NO_SYNC_TRANSFORMERS}")
        return (f"upgrade transformers to {NO_SYNC_TRANSFORMERS} or later (its Trainer does not "
                f"call no_sync under DeepSpeed), or accelerate to {NO_SYNC_ACCELERATE} or later "
                "(its no_sync skips ZeRO-2/3)")
    if caller == "accumulate":
        return (f"upgrade accelerate to {NO_SYNC_ACCELERATE} or later: its accumulate/no_sync "
                "then skips a DeepSpeed engine at ZeRO-2/3 (DeepSpeed accumulates by itself)")
    return (f"upgrade accelerate to {NO_SYNC_ACCELERATE} or later, and transformers to "
            f"{NO_SYNC_TRANSFORMERS} or later for the Trainer; a script of your own must not "
            "enter engine.no_sync() at ZeRO-2/3")


def _versions_said(pairs: list[tuple[str, str | None]]) -> str:
    said = [f"{name} {v}" for name, v in pairs if v]
    return ", ".join(said) if said else "no input names the versions (--env local shows them)"


def zero_no_sync_assertion(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DeepSpeed >= 0.16 refused no_sync at ZeRO-2/3: who called it and which release stops it."""
    ev = _exception_lines(ctx, NO_SYNC)
    if not ev:
        return
    m = _STAGE_IN_MESSAGE.search(ev[0].text)
    stage = m.group(1) if m else "2/3"
    frames = _frames(ctx)
    caller = _caller(ctx, frames)
    transformers, accelerate = _version(ctx, "transformers"), _version(ctx, "accelerate")
    callers = {"trainer": "the Trainer's training loop (through accelerator.no_sync)",
               "accumulate": "Accelerate's accumulate() (through accelerator.no_sync)"}
    who = callers.get(caller or "", "the training loop")
    versions = _versions_said([("deepspeed", _version(ctx, "deepspeed")),
                               ("transformers", transformers), ("accelerate", accelerate)])
    # Transformers 4.46.2 inverted the Trainer's condition: it enters no_sync on the last
    # micro-batch of every step, so accumulation 1 does not avoid it (trainer.py@v4.46.2).
    inverted = caller == "trainer" and transformers == NO_SYNC_INVERTED_TRANSFORMERS
    when = ("on the last micro-batch of every step (transformers 4.46.2 enters it there, with "
            "or without accumulation)" if inverted else
            "on a micro-batch that accumulates (gradient_accumulation_steps > 1)")
    batch_way = ("" if inverted else
                 "; gradient_accumulation_steps 1 also avoids it but changes the batch")
    yield finding(
        f"DeepSpeed's engine.no_sync() (added in {NO_SYNC_DEEPSPEED}) asserts at ZeRO stage "
        f"{stage}: ZeRO-2/3 reduce and partition every micro-batch's gradients, so they cannot be "
        f"held back. {who[0].upper()}{who[1:]} entered it {when}; {versions}.",
        fix=(f"{_no_sync_fix(caller, transformers)}. Other ways out: ZeRO stage 1 "
             "(it does not partition gradients), or deepspeed 0.15.4, which has no no_sync"
             f"{batch_way}"),
        evidence=ev)


def _script_enters_accumulate(ctx: Context) -> bool:
    return any(True for _ in script_trees(ctx, any_of=(".accumulate(", ".no_sync(")))


def no_sync_preflight(ctx: Context, rule: Any) -> Iterator[Finding]:
    """Before launch: ZeRO-2/3 on releases that enter engine.no_sync(): with accumulation, or on
    the Trainer of transformers 4.46.2 with or without it."""
    if _exception_lines(ctx, NO_SYNC):
        return  # DS126 explains the failure the log shows
    stage, accum = ctx.run.value("zero_stage"), ctx.run.value("grad_accum")
    if not isinstance(stage, int) or stage < 2:
        return
    deepspeed = _version(ctx, "deepspeed")
    if deepspeed is None or _older(deepspeed, NO_SYNC_DEEPSPEED):
        return
    accelerate = _version(ctx, "accelerate")
    if _older(accelerate, NO_SYNC_ACCELERATE) is not True:
        return  # Accelerate >= 1.9 skips it, whoever calls accelerator.no_sync
    transformers = _version(ctx, "transformers")
    trainer = ctx.run.value("uses_trainer") is True
    # 4.46.2 inverted the Trainer's condition: it enters no_sync on the last micro-batch of
    # every step, so accumulation 1 does not avoid it (trainer.py:2475-2479@v4.46.2).
    inverted = trainer and transformers == NO_SYNC_INVERTED_TRANSFORMERS
    accumulates = isinstance(accum, int) and accum > 1
    if not (accumulates or inverted):
        return
    if trainer:
        if _older(transformers, NO_SYNC_TRANSFORMERS) is not True:
            return
        caller = "trainer"
        who = f"the Trainer of transformers {transformers}"
    elif ctx.run.value("uses_accelerate") is True and _script_enters_accumulate(ctx):
        caller = "accumulate"
        who = "the script's accelerator.accumulate()/no_sync()"
    else:
        return
    where = ("at the last micro-batch of its first step (transformers 4.46.2 enters no_sync "
             "there, with or without accumulation)" if inverted else
             "at its first accumulating micro-batch")
    accum_said = f"gradient_accumulation_steps {accum}" if isinstance(accum, int) else (
        "gradient_accumulation_steps not set")
    yield finding(
        f"This run will stop {where}: ZeRO stage {stage} with {accum_said} on deepspeed "
        f"{deepspeed}, where engine.no_sync() asserts at ZeRO-2/3, and {who} enters it through "
        f"accelerate {accelerate}'s no_sync (before {NO_SYNC_ACCELERATE} it forwards to the "
        "engine in a distributed run).",
        fix=_no_sync_fix(caller, transformers) + "; or ZeRO stage 1",
        path="zero_optimization.stage" if ctx.cfg_has("zero_optimization.stage") else None)


# ----------------------------------------------------------------- DS127 weights-only resume

WEIGHTS_ONLY = "Weights only load failed"
#: DeepSpeed's TorchCheckpointEngine.load passes weights_only=False from this release.
WEIGHTS_ONLY_DEEPSPEED = "0.16.0"
#: The Trainer allowlists numpy's globals for rng_state.pth (safe_globals, trainer.py@v4.47.0).
WEIGHTS_ONLY_TRANSFORMERS = "4.47.0"
_WRITER_ENGINES = ("fast_checkpoint_engine.py", "decoupled_checkpoint_engine.py")


def _weights_only_globals(ctx: Context) -> list[str]:
    names: list[str] = []
    for f in ctx.facts_named("weights-only-global"):
        name = str(f.values.get("name") or "")
        if name and name not in names:
            names.append(name)
    return names


def _resume_owner(ctx: Context, frames: list[str], names: list[str]) -> str:
    """Whose load refused the file: DeepSpeed's writer engines, its torch engine, zero_to_fp32,
    the Trainer's rng state, or not known."""
    if any(e in f for f in frames for e in _WRITER_ENGINES) or (
            ctx.cfg_get("checkpoint.writer") is not None and any(n.startswith("deepspeed.") for n in names)):
        return "writer"
    if any("zero_to_fp32.py" in f for f in frames):
        return "zero_to_fp32"
    if any("_load_rng_state" in f for f in frames) or any(n.startswith("numpy.") for n in names):
        return "rng"
    if any("deepspeed" in f and "checkpoint_engine" in f for f in frames) or any(
            n.startswith("deepspeed.") for n in names):
        return "deepspeed"
    return "unknown"


def weights_only_resume(ctx: Context, rule: Any) -> Iterator[Finding]:
    """torch >= 2.6 refused to unpickle a checkpoint file: whose load it was and the release that
    passes weights_only itself, or the allowlist the user can add."""
    ev = _exception_lines(ctx, WEIGHTS_ONLY)
    if not ev:
        return
    names = _weights_only_globals(ctx)
    owner = _resume_owner(ctx, _frames(ctx), names)
    torch_v = _version(ctx, "torch")
    deepspeed, transformers = _version(ctx, "deepspeed"), _version(ctx, "transformers")
    named = f" (it needs {', '.join(names[:3])})" if names else ""
    allow = (f"torch.serialization.add_safe_globals([{', '.join(n.rsplit('.', 1)[-1] for n in names[:3])}]) "
             "before the load, importing those classes" if names else
             "torch.serialization.add_safe_globals([...]) with the classes the error names")
    unsafe = ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (torch's switch for a call that does not pass "
              "weights_only) or weights_only=False runs any code the pickle holds: only for "
              "checkpoints your own runs wrote")
    if owner == "writer":
        why = ("DeepSpeed's checkpoint writer engines (config checkpoint.writer: "
               "FastCheckpointEngine / DecoupledCheckpointEngine) load with torch.load's default, "
               "which is weights_only=True from torch 2.6, and a DeepSpeed checkpoint holds "
               "DeepSpeed classes; no release to 0.19.8 passes weights_only there")
        fix = (f"load inside torch.serialization.safe_globals([...]) with the DeepSpeed classes "
               f"named{named}, or resume without checkpoint.writer (the default TorchCheckpointEngine "
               f"passes weights_only=False from deepspeed {WEIGHTS_ONLY_DEEPSPEED}); {unsafe}")
    elif owner == "zero_to_fp32":
        why = ("zero_to_fp32.py loads DeepSpeed's state files, and the copy a checkpoint folder "
               "holds is the script of the release that saved it; before deepspeed "
               f"{WEIGHTS_ONLY_DEEPSPEED} it calls torch.load without weights_only")
        fix = ("run the installed release's converter (python -m deepspeed.utils.zero_to_fp32 "
               f"CHECKPOINT_DIR OUTPUT_DIR) with deepspeed {WEIGHTS_ONLY_DEEPSPEED} or later; {unsafe}")
    elif owner == "rng":
        why = ("the Trainer's _load_rng_state reads rng_state.pth (numpy's random state) with "
               f"torch.load's default; from transformers {WEIGHTS_ONLY_TRANSFORMERS} it allowlists "
               "numpy's classes (safe_globals) and the load passes")
        fix = (f"upgrade transformers to {WEIGHTS_ONLY_TRANSFORMERS} or later; or {allow} (numpy's "
               "classes are data, allowlisting them is safe)")
    elif owner == "deepspeed" and _older(deepspeed, WEIGHTS_ONLY_DEEPSPEED) is False:
        why = (f"the file holds DeepSpeed classes, but deepspeed {deepspeed}'s own engine "
               "(TorchCheckpointEngine) passes weights_only=False, so another load read it: a "
               "checkpoint.writer engine, a zero_to_fp32.py copied into the checkpoint by an older "
               "release, or the training framework's own torch.load of DeepSpeed's files")
        fix = (f"find the load in the traceback; where you control it, {allow}; {unsafe}")
    elif owner == "deepspeed":
        why = ("DeepSpeed's checkpoint engine (TorchCheckpointEngine.load) reads the engine and "
               "optimizer states, which hold DeepSpeed classes (loss scaler, ZeRO stage enum); "
               f"from deepspeed {WEIGHTS_ONLY_DEEPSPEED} it passes weights_only=False itself")
        fix = (f"upgrade deepspeed to {WEIGHTS_ONLY_DEEPSPEED} or later (the checkpoint stays "
               f"readable); or {allow}; {unsafe}")
    else:
        why = ("a torch.load without weights_only met a class outside torch's allowlist")
        fix = (f"{allow} (safe when you trust those classes); {unsafe}. DeepSpeed passes "
               f"weights_only=False from {WEIGHTS_ONLY_DEEPSPEED}, the Trainer allowlists numpy's "
               f"rng state from transformers {WEIGHTS_ONLY_TRANSFORMERS}")
    ver = _versions_said([("torch", torch_v), ("deepspeed", deepspeed), ("transformers", transformers)])
    yield finding(
        f"Resuming failed: torch 2.6 made weights_only=True torch.load's default, and {why}{named}; "
        f"{ver}.",
        fix=fix, evidence=ev)


# ----------------------------------------------------------------- DS239 MoE at ZeRO-3, no leaf

#: Model config keys that count a model's experts (Mixtral/Qwen-MoE/DeepSeek/OLMoE/...).
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
#: The MoE blocks DeepSpeed marks as ZeRO-3 leaves by default from 0.18.0 (leaf_module_config.py).
DEFAULT_LEAF_MODEL_TYPES = {"mixtral": "MixtralSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock",
                            "qwen3_moe": "Qwen3MoeSparseMoeBlock"}
DEFAULT_LEAF_DEEPSPEED = "0.18.0"
LEAF_SETTERS = ("set_z3_leaf_modules", "set_z3_leaf_modules_by_name", "set_z3_leaf_modules_by_suffix",
                "set_z3_leaf_module")


def _experts(cfg: dict[str, Any]) -> tuple[str, int] | None:
    text_config = cfg.get("text_config")  # multimodal configs nest the language model's
    for sub in (cfg, text_config if isinstance(text_config, dict) else {}):
        for key in EXPERT_KEYS:
            n = sub.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n > 1:
                return key, n
    return None


def _leaf_set_elsewhere(ctx: Context) -> bool:
    if ctx.cfg_has("zero_optimization.leaf_module"):
        return True
    if ctx.acc_get("deepspeed_config.deepspeed_moe_layer_cls_names"):
        return True
    return any(s in text for text in ctx.script_sources.values() for s in LEAF_SETTERS)


def moe_zero3_leaf_modules(ctx: Context, rule: Any) -> Iterator[Finding]:
    """An MoE model at ZeRO-3 whose expert block is not a ZeRO-3 leaf: ranks that route their
    tokens to different experts gather different parameters and wait on each other."""
    cfg = ctx.model_config
    if not isinstance(cfg, dict) or ctx.run.value("zero_stage") != 3:
        return
    experts = _experts(cfg)
    if experts is None or _leaf_set_elsewhere(ctx):
        return
    model_type = str(cfg.get("model_type") or "")
    deepspeed = _version(ctx, "deepspeed")
    block = DEFAULT_LEAF_MODEL_TYPES.get(model_type)
    if block is not None:
        if _older(deepspeed, DEFAULT_LEAF_DEEPSPEED) is not True:
            return  # DeepSpeed >= 0.18 marks this block itself (or the release is not known)
        covered = (f" DeepSpeed {DEFAULT_LEAF_DEEPSPEED} and later mark {block} as a leaf by "
                   f"default; this run has deepspeed {deepspeed}.")
    else:
        covered = (f" DeepSpeed's default leaf list (from {DEFAULT_LEAF_DEEPSPEED}) holds only the "
                   "Mixtral, Qwen2-MoE and Qwen3-MoE blocks, not this model's.")
    hung = ctx.has_symptom("hang")
    key, n = experts
    yield finding(
        f"{'The run hung: ' if hung else ''}the model is a mixture of experts ({key} {n}"
        f"{', model_type ' + model_type if model_type else ''}) trained at ZeRO-3 without its MoE "
        "block marked as a ZeRO-3 leaf. ZeRO-3 gathers each submodule's parameters when its "
        "forward runs, and each rank runs only the experts its tokens were routed to, so the ranks "
        "gather different experts and wait on each other's collectives." + covered,
        fix=("mark the MoE block as a leaf before deepspeed.initialize / the Trainer: "
             "deepspeed.utils.set_z3_leaf_modules(model, [<the model's SparseMoeBlock class>]); or "
             "zero_optimization.leaf_module.classes in the config (DeepSpeed >= 0.18), or "
             "deepspeed_moe_layer_cls_names in the Accelerate config"),
        severity="error" if hung else "",
        evidence=ctx.symptom("hang").evidence[:1] if hung else ())  # type: ignore[union-attr]



# ----------------------------------------------------------------- DS326 DeepCompile vs torch

#: (first DeepSpeed release, torch minimum, torch maximum or None) of is_deepcompile_supported,
#: newest first (deepspeed/compile/util.py at v0.16.6, v0.18.4, v0.19.0).
DEEPCOMPILE_TORCH = (("0.19.0", "2.6", None), ("0.18.4", "2.6", "2.9"), ("0.16.6", "2.6", "2.7"))


def _deepcompile_range(deepspeed: str) -> tuple[str, str | None] | None:
    ds = parse_version(deepspeed)
    for first, low, high in DEEPCOMPILE_TORCH:
        if ds >= parse_version(first):
            return low, high
    return None


def _padded(v: str) -> tuple[int, ...]:
    t = parse_version(v)
    return t + (0,) * (3 - len(t))


_PRE_RELEASE = re.compile(r"\d(?:a|b|rc|\.dev)\d*", re.IGNORECASE)


def _torch_in(torch_v: str, low: str, high: str | None) -> bool | None:
    """DeepSpeed's own test (utils/torch.py required_torch_version) compares packaging versions
    of torch.__version__ as written, where a local build tag or a post release sorts after the
    release (2.7.0+cu126 > 2.7). A pre-release or nightly: None (not judged)."""
    release = torch_v.split("+")[0]
    if _PRE_RELEASE.search(release) or not parse_version(release):
        return None
    v = _padded(release)
    if v < _padded(low):
        return False
    if high is None:
        return True
    after = "+" in torch_v or ".post" in release
    return v < _padded(high) or (v == _padded(high) and not after)


def deepcompile_torch_range(ctx: Context, rule: Any) -> Iterator[Finding]:
    """compile.deepcompile on a torch release the run's DeepSpeed does not count as supported."""
    if ctx.cfg_get("compile.deepcompile") is not True:
        return
    deepspeed = _version(ctx, "deepspeed") or (
        ctx.ds_version if ctx.ds_version_source != "default" else None)
    torch_v = _version(ctx, "torch")
    if deepspeed is None or torch_v is None:
        return
    rng = _deepcompile_range(deepspeed)
    if rng is None:
        return
    low, high = rng
    inside = _torch_in(torch_v, low, high)
    if inside is not False:
        return
    span = f"torch {low} to {high}" if high else f"torch {low} or later"
    local = (f" ({torch_v} sorts after {high}: DeepSpeed compares the version string with its "
             "build tag)" if high and "+" in torch_v and torch_v.split("+")[0].startswith(high) else "")
    yield finding(
        f"compile.deepcompile is true, but deepspeed {deepspeed} counts DeepCompile as supported "
        f"only on {span} with CUDA (is_deepcompile_supported), and this run has torch "
        f"{torch_v}{local}. Outside that range DeepSpeed does not register DeepCompile's passes, "
        "yet engine.compile() still takes the DeepCompile path.",
        fix=("use a torch release inside the range, or a DeepSpeed release whose range holds this "
             "torch (0.19.0 and later accept torch >= 2.6), or set compile.deepcompile to false"),
        path="compile.deepcompile")
