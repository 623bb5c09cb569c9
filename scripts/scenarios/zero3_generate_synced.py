"""Scenario (twin of ``zero3_generate_hang``): the same ZeRO-3 ``generate`` with ``synced_gpus=True``.

Same tiny GPT-2, same config, same prompts of different lengths on 2 ranks; the only change is
``generate(..., synced_gpus=True)``: the rank that is done keeps running dummy forward passes (so
the ZeRO-3 all-gathers stay matched) until every rank is done, and the run finishes normally.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import zero3_generate_hang as hang  # noqa: E402

NAME = "zero3_generate_synced"


def generate(out: Path) -> c.Outcome:
    """Driver: the synced twin (the worker is the hang scenario's, with --synced_gpus)."""
    outcome = hang.generate_scenario(out, synced=True)
    c.write_readme(out, NAME, "ZeRO-3 generate with synced_gpus=True: finishes", """
The twin of `zero3_generate_hang`: two ranks run `model.generate(prompt, max_length=32,
synced_gpus=True)` on a GPT-2 sharded with ZeRO stage 3, with prompts of 10 and 24 tokens. Rank 1 is
done after 8 new tokens but keeps joining the all-gathers with dummy forward passes until rank 0 is
done after 22; both reach the barrier and the run exits 0.

A correct analysis reports no hang, no error finding (the log is healthy). The worker is
`scripts/scenarios/zero3_generate_hang.py --synced_gpus`.
""" + hang.NOTES_COMMON, outcome)
    return outcome


if __name__ == "__main__":
    c.driver_main(NAME, generate, hang.worker)
