"""A training argument as the run was given it: the Trainer arguments dsdoctor collected (printed
TrainingArguments, the log's command line, script literals, --args), else the script options of a
launch command (a log's ``deepspeed ... train.py --tf32 True`` or a ``--script run.sh``)."""

from __future__ import annotations

from typing import Any

from dsdoctor.facts.context import Context
from dsdoctor.facts.run_sources import launches


def run_arg(ctx: Context, name: str) -> tuple[Any, str] | None:
    """(value, where) of ``--name``, or None when no input states it."""
    if name in ctx.trainer_args:
        return ctx.trainer_args[name], f"--{name}"
    for la in launches(ctx):
        if name in la.script_options:
            return la.script_options[name], f"--{name} at {la.location}"
    return None
