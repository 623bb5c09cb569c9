"""Key ``r`` in ``dsdoctor watch``: write the issue report of what the run has printed so far.

It runs ``dsdoctor report`` (the same command users run, with its redaction) on the followed logs
and the same inputs, in a subprocess, so the TUI stays responsive and the report is exactly the
command's. What only watch saw (a hang and the ranks' stacks, host RAM near its limit) no log
line says: those findings go to the report through a private file (``--watch-findings``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.model import Finding
from dsdoctor.watch.launch import stamped_path

REPORT_TIMEOUT = 300.0


def default_report_path(now: float | None = None) -> str:
    return stamped_path("dsdoctor-issue", "md", now)


def report_argv(paths: list[str], inputs: AnalysisInputs, output: str,
                findings_file: str | None = None) -> list[str]:
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
    if findings_file:
        argv += ["--watch-findings", findings_file]
    return argv


def write_issue_report(paths: list[str], inputs: AnalysisInputs, output: str | None = None,
                       extra: Sequence[Finding] = ()) -> tuple[bool, str]:
    """(ok, one line to show): where the report went, or why it failed. ``extra``: watch's own
    findings (the hang with its stacks), added to the report's."""
    from dsdoctor.watch.hang import findings_json  # noqa: PLC0415

    output = output or default_report_path()
    findings_file = None
    if extra:
        # private (mkstemp: 0600), removed once the report is written: stacks name local paths
        fd, findings_file = tempfile.mkstemp(prefix="dsdoctor-watch-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(findings_json(extra))
    try:
        done = subprocess.run(report_argv(paths, inputs, output, findings_file),
                              capture_output=True, text=True, timeout=REPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"the issue report took over {REPORT_TIMEOUT:.0f}s; run 'dsdoctor report' by hand"
    finally:
        if findings_file is not None:
            os.unlink(findings_file)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        last = lines[-1] if lines else str(done.returncode)
        if last.startswith("dsdoctor: not writing the issue"):
            # triage: the analysis explains the failure with a fix; say so, it is no failure
            return False, last.removeprefix("dsdoctor: ")
        return False, f"issue report failed: {last}"
    return True, f"wrote the issue report to {output}; review it before filing"
