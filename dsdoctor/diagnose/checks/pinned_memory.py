"""Page-locked (pinned) host memory of CPU offload, for DS203 and DS106 (S22).

The Transformers DeepSpeed guide: ``pin_memory: true`` speeds CPU<->GPU transfers, but pinned
memory is unavailable to other processes. The kernel cannot swap page-locked pages out, so a
node whose offload need passes its RAM but fits RAM + swap survives with pageable buffers and is
OOM-killed with pinned ones (oobabooga/textgen#969: "pin_memory fills ram quickly and causes an
oom (returns -9) while leaving the swap untouched").

What DeepSpeed pins (read in DeepSpeed 0.9.5, 0.15.4 and 0.19.5, ``get_accelerator().pin_memory``):
- ZeRO-1/2, ``offload_optimizer.pin_memory``: each rank's fp32 gradient partition
  (stage_1_and_2.py), 4 bytes per parameter; from 0.17 also a 16-bit staging copy of the
  partition (``temp_buffer_bit16``): 2 more; the fp32 master-weight partition (4 more) is pinned
  from 0.15, with or without the key until 0.18.2, only with it from 0.18.3;
- ZeRO-3, ``offload_optimizer.pin_memory``: at least the flat fp32 gradient partition buffer
  (stage3.py ``grad_partitions_flat_buffer``), 4 bytes per parameter;
- ZeRO-3 with ``offload_param`` to CPU: the flat 16-bit parameter partitions
  (``_create_param_groups_fp16_flat_cpu_memory``), 2 bytes per parameter, pinned whatever
  ``offload_param.pin_memory`` says (that key only pins the first partitions, which the flat
  buffer replaces), so it is counted but not offered as a switch.
The Adam moments are not pinned. Each rank pins its 1/world share, so a node pins
``bytes x parameters / nodes``. These are lower bounds: PyTorch's pinned allocator may round
each buffer up.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsdoctor.diagnose.checks.common import gib, truthy
from dsdoctor.diagnose.checks.runfacts import offload_device
from dsdoctor.facts.context import Context
from dsdoctor.facts.dskeys import parse_version

OPT_KEY = "zero_optimization.offload_optimizer.pin_memory"


@dataclass(frozen=True)
class Pinned:
    """Host bytes one node page-locks for CPU offload, and the keys that pin them."""

    bytes_per_node: int
    keys: tuple[str, ...]
    what: str


#: The first release whose offload configs default ``pin_memory`` to true (offload_config.py).
PIN_BY_DEFAULT = (0, 19, 5)


def _pins(ctx: Context) -> bool:
    """Whether the optimizer offload is pinned: the key, else the run's release's default (a
    release dsdoctor only assumed says nothing: the key is then taken as off)."""
    pin = ctx.cfg_get(OPT_KEY)
    if pin is not None:
        return truthy(pin)
    return (ctx.ds_version_source != "default"
            and parse_version(ctx.ds_version) >= PIN_BY_DEFAULT)


def pinned_offload(ctx: Context, stage: int, total_params: int, nodes: int) -> Pinned | None:
    """The pinned part of the offload need, or None when ``offload_optimizer.pin_memory`` (the
    one switch that unpins anything) is off (the default before DeepSpeed 0.19.5)."""
    if offload_device(ctx, "optimizer") != "cpu" or total_params <= 0 or not _pins(ctx):
        return None
    if stage >= 3:
        per_param, what = 4, f"{OPT_KEY} true pins the fp32 gradient partitions"
        if offload_device(ctx, "param") == "cpu":  # pinned with or without its pin_memory key
            per_param += 2
            what += (", and offload_param to CPU pins the 16-bit parameter partitions whatever "
                     "offload_param.pin_memory says")
    else:
        release = parse_version(ctx.ds_version)
        keyed = ["the fp32 gradient partitions"]  # what the key pins (4 bytes each)
        if release >= (0, 18, 3):
            keyed.insert(0, "the fp32 master weights")
        if release >= (0, 17):
            keyed.append("a 16-bit copy of the weights")
        per_param = 4 * len(keyed) - (2 if release >= (0, 17) else 0)
        what = (f"{OPT_KEY} true pins " + ", ".join(keyed[:-1]) + " and " * (len(keyed) > 1)
                + keyed[-1])
        if (0, 15) <= release < (0, 18, 3):
            per_param += 4
            what += (", and DeepSpeed 0.15 to 0.18.2 pins the fp32 master weights whatever "
                     "pin_memory says")
    if ctx.cfg_get(OPT_KEY) is None:
        what += f"; DeepSpeed {ctx.ds_version} defaults {OPT_KEY} to true"
    return Pinned(per_param * total_params // max(nodes, 1), (OPT_KEY,), what)


def swap_bytes(ctx: Context) -> int | None:
    """The node's swap from the env snapshot (None when unknown)."""
    v = ctx.env_get("cpu.swap_total_bytes")
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def pinned_sentence(p: Pinned) -> str:
    """'Of that, at least X is page-locked ...' for a finding's message."""
    return (f"At least {gib(p.bytes_per_node)} per node of it is page-locked ({p.what}): the "
            f"kernel cannot swap those pages out and no other process can use them.")


def pin_pushes_past(need: int, ram: int, swap: int | None, in_container: bool) -> bool:
    """Whether pinning is what makes the need fail: it passes RAM but fits RAM + swap, where
    pageable offload buffers could spill (not judged under a cgroup limit, whose swap allowance
    the snapshot does not record)."""
    return (not in_container and swap is not None and swap > 0 and ram < need <= ram + swap)


__all__ = ["OPT_KEY", "Pinned", "pin_pushes_past", "pinned_offload",
           "pinned_sentence", "swap_bytes"]
