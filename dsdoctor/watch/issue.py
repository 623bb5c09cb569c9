"""Key ``r`` in ``dsdoctor watch``: write the issue report of what the run has printed so far.

It runs ``dsdoctor report`` (the same command users run, with its redaction) on the followed logs
and the same inputs, in a subprocess, so the TUI stays responsive and the report is exactly the
command's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPORT_TIMEOUT = 300.0


def default_report_path(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return os.path.abspath(f"dsdoctor-issue-{stamp}.md")


def report_argv(paths: list[str], args: argparse.Namespace, output: str) -> list[str]:
    """``dsdoctor report LOG ... [the same --config/--model/--env/--script] -o OUTPUT``."""
    argv = [sys.executable, "-m", "dsdoctor", "report", *paths]
    for config in getattr(args, "config", None) or []:
        argv += ["--config", config]
    for script in getattr(args, "script", None) or []:
        argv += ["--script", script]
    for option in ("model", "env", "ds_version"):
        value = getattr(args, option, None)
        if value:
            argv += ["--" + option.replace("_", "-"), value]
    argv += ["--engine", getattr(args, "engine", "auto") or "auto", "--output", output]
    return argv


def write_issue_report(paths: list[str], args: argparse.Namespace,
                       output: str | None = None) -> tuple[bool, str]:
    """(ok, one line to show): where the report went, or why it failed."""
    output = output or default_report_path()
    try:
        done = subprocess.run(report_argv(paths, args, output), capture_output=True, text=True,
                              timeout=REPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"the issue report took over {REPORT_TIMEOUT:.0f}s; run 'dsdoctor report' by hand"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return False, f"issue report failed: {lines[-1] if lines else done.returncode}"
    return True, f"wrote the issue report to {output}; review it before filing"
