"""DS106 when the process that ran out of host memory is DeepSpeed's offline ``zero_to_fp32.py``.

The Transformers DeepSpeed guide: the conversion "needs 2x the final fp32 weights in RAM". That
holds for the script of DeepSpeed releases before 0.16, which builds the whole fp32 state dict and
then saves it. From 0.16 (deepspeedai/DeepSpeed#6658) the script maps the shards with mmap and
writes the output shard by shard (``--max_shard_size``, 5GB by default, added in 0.15.3 but only
lazy from 0.16): its resident memory is about one output shard, yet its address space still covers
the mapped optimizer files and a full-size set of empty tensors, which is what an address-space
limit (``ulimit -v``) counts. ``--safe_serialization`` changes the file format, not the memory.
"""

from __future__ import annotations

from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, log_facts
from dsdoctor.diagnose.checks.runfacts import zero_stage
from dsdoctor.diagnose.checks.zero import TRAINS
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version
from dsdoctor.facts.run_sources import launches
from dsdoctor.model import Finding

LAZY_SINCE = (0, 16)  # zero_to_fp32.py maps the shards and saves shard by shard (#6658)
SHARDS_SINCE = (0, 15, 3)  # --max_shard_size / --safe_serialization, output is a directory
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam's two moments, per parameter, in optim_states


def conversion_run(ctx: Context, s: Any) -> str:
    """Where the killed process is shown to be DeepSpeed's zero_to_fp32.py conversion, or ''."""
    # strongest: the script's own first lines ("Processing zero checkpoint '...'") before the
    # failure, in the same log
    starts = [f for f in ctx.facts_named("zero-to-fp32")
              if f.evidence.file == s.first.file and f.evidence.line <= s.first.line]
    if starts:
        return starts[0].evidence.location
    for ev in s.evidence:
        if "zero_to_fp32" in ev.text:
            return f"{ev.file}:{ev.line}"
    for la in launches(ctx):  # a shell script (--script run.sh) or a pasted command runs it
        if la.script and "zero_to_fp32" in la.script:
            return la.location
    launch = log_facts(ctx).best_launch()
    if launch is not None and launch.script and "zero_to_fp32" in launch.script:
        return launch.evidence.location
    for path, text in ctx.script_sources.items():
        if "zero_to_fp32" in path:
            return path
        # a script of its own that converts (deepspeed.utils.zero_to_fp32's functions) and
        # trains nothing: the conversion is what fills the RAM
        at = text.find("zero_to_fp32")
        if at >= 0 and not TRAINS.search(text):
            return f"{path}:{text.count(chr(10), 0, at) + 1}"
    return ""


def _release(ctx: Context) -> tuple[str | None, str]:
    """(release of the zero_to_fp32.py that ran, where that comes from); (None, '') if unknown.

    The engine copies its own zero_to_fp32.py into every checkpoint, and the script prints the
    release that wrote the checkpoint; the installed DeepSpeed (--env, the log) is the fallback.
    """
    for f in ctx.facts_named("zero-to-fp32"):
        v = f.values.get("version")
        if v:
            return str(v), f"the checkpoint's DeepSpeed {v} ({f.evidence.location})"
    if ctx.ds_version_source in ("env", "log", "--ds-version"):
        origin = {"env": "--env", "log": "the log"}.get(ctx.ds_version_source, ctx.ds_version_source)
        return ctx.ds_version, f"DeepSpeed {ctx.ds_version} (from {origin})"
    return None, ""


def conversion_killed(ctx: Context, rule: Any, s: Any, where: str, total: int | None, src: str,
                      ram: int | None) -> Finding:
    """DS106 for the offline conversion: its memory need for the release that ran, not start-up
    advice (nothing is trained or partitioned here)."""
    release, release_src = _release(ctx)
    ver = parse_version(release) if release else None
    lazy = ver is not None and ver[:2] >= LAZY_SINCE
    bits = [f"zero_to_fp32.py ({where}) ran out of host memory (line {s.first.line}: "
            f"{s.first.text[:80]!r}). It rebuilds the full fp32 weights on one machine from every "
            "rank's shards; the Transformers DeepSpeed guide says it needs about twice the final "
            "fp32 weights in RAM."]
    fixes: list[str] = []
    need = 2 * 4 * total if total else None
    if lazy:
        bits.append(f"That holds before DeepSpeed 0.16; this script is {release_src}, which maps "
                    "the shards (mmap) and writes the output shard by shard (--max_shard_size, "
                    "5GB by default): its resident memory is about one output shard, but an "
                    "address-space limit (ulimit -v, a scheduler's virtual-memory limit) also "
                    "counts the mapped optimizer files and the full-size empty tensors it plans "
                    "the shards with.")
        if total:
            va = (OPTIMIZER_BYTES + 4) * total
            bits.append(f"For {total:,} parameters ({src}) that is about {gib(va)} of address "
                        f"space ({OPTIMIZER_BYTES} bytes per parameter of Adam optimizer files "
                        f"+ 4 of fp32 weights) on top of Python and torch.")
            fixes.append(f"lift the address-space limit (ulimit -v unlimited, or a job limit "
                         f"of at least {gib(va)} plus about 1 GiB for torch)")
        else:
            ctx.missing(rule.code, "the address space zero_to_fp32.py maps", "--model PATH")
            fixes.append("lift the address-space limit (ulimit -v unlimited)")
        fixes.append("if the kernel killed it for RAM instead, lower --max_shard_size (e.g. "
                     "--max_shard_size 1GB) so each output shard is smaller")
    else:
        if release:
            bits.append(f"This script is {release_src}: the 2x figure applies.")
        if total and need:
            bits.append(f"For {total:,} parameters ({src}) that is 2 x {gib(4 * total)} = "
                        f"about {gib(need)}.")
            if isinstance(ram, int):
                bits.append(f"This machine has {gib(ram)}"
                            + (", less than that." if ram < need else
                               "; other processes held the rest, or the figure is a floor."))
            fixes.append(f"run zero_to_fp32.py on a machine with at least {gib(need)} of free RAM")
        else:
            ctx.missing(rule.code, "the RAM zero_to_fp32.py needs (2 x the fp32 weights)",
                        "--model PATH")
            fixes.append("run zero_to_fp32.py on a machine with at least twice the fp32 model "
                         "size in free RAM")
        if release is None:
            ctx.missing(rule.code, "which zero_to_fp32.py ran (0.16 and later need far less)",
                        "--env snapshot.json, or the conversion's full output")
        fixes.append("or convert with the zero_to_fp32.py of DeepSpeed 0.16 or later (python -m "
                     "deepspeed.utils.zero_to_fp32 CHECKPOINT_DIR OUTPUT_DIR --max_shard_size 2GB "
                     "from a newer install): it maps the shards and saves one shard at a time, "
                     "so it needs about one shard of RAM (deepspeedai/DeepSpeed#6658); "
                     "--safe_serialization only changes the file format, not the memory")
    gather = ctx.cfg_get("zero_optimization.stage3_gather_16bit_weights_on_model_save")
    stage = zero_stage(ctx)
    if gather is not True and stage in (3, None):
        # DeepSpeed reads the key only when the weights are partitioned (ZeRO-3, save_16bit_model)
        fixes.append(("for later runs, " if stage == 3 else "if the training ran ZeRO-3, for later runs ")
                     + "save 16-bit weights directly at the end of training "
                     "(zero_optimization.stage3_gather_16bit_weights_on_model_save: true), "
                     "so no conversion is needed")
    fixes.append("stop other memory users on that machine while it runs")
    return finding(" ".join(bits), fix="; ".join(fixes) + ".", evidence=s.evidence)
