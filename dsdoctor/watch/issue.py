"""Key ``r`` in ``dsdoctor watch``: write the issue report of what the run has printed so far.

It runs ``dsdoctor report`` (the same command users run, with its redaction) on the followed logs
and the same inputs, in a subprocess, so the TUI stays responsive and the report is exactly the
command's.
"""

from __future__ import annotations

import subprocess
import sys

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.launch import stamped_path

REPORT_TIMEOUT = 300.0


def default_report_path(now: float | None = None) -> str:
    return stamped_path("dsdoctor-issue", "md", now)


def report_argv(paths: list[str], inputs: AnalysisInputs, output: str) -> list[str]:
    """``dsdoctor report LOG ... [the same --config/--model/--env/--script] -o OUTPUT``."""
    argv = [sys.executable, "-m", "dsdoctor", "report", *paths]
    for config in inputs.configs:
        argv += ["--config", config]
    for script in inputs.scripts:
        argv += ["--script", script]
    for option, value in (("model", inputs.model), ("env", inputs.env),
                          ("ds-version", inputs.ds_version)):
        if value:
            argv += ["--" + option, value]
    argv += ["--engine", inputs.engine, "--output", output]
    return argv


def write_issue_report(paths: list[str], inputs: AnalysisInputs,
                       output: str | None = None) -> tuple[bool, str]:
    """(ok, one line to show): where the report went, or why it failed."""
    output = output or default_report_path()
    try:
        done = subprocess.run(report_argv(paths, inputs, output), capture_output=True, text=True,
                              timeout=REPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"the issue report took over {REPORT_TIMEOUT:.0f}s; run 'dsdoctor report' by hand"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        last = lines[-1] if lines else str(done.returncode)
        if last.startswith("dsdoctor: not writing the issue"):
            # triage: the analysis explains the failure with a fix; say so, it is no failure
            return False, last.removeprefix("dsdoctor: ")
        return False, f"issue report failed: {last}"
    return True, f"wrote the issue report to {output}; review it before filing"
