"""Key r's issue report (dsdoctor/watch/issue.py): the same inputs as the watch, through
``dsdoctor report``."""

from __future__ import annotations

import sys

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.watch.issue import report_argv


def test_report_argv_passes_the_watch_inputs():
    inputs = AnalysisInputs.of(configs=["ds.json", "acc.yaml"], scripts=["train.py"], model="m",
                               env="local", ds_version="0.14.0", engine="python")
    argv = report_argv(["a.log", "b.log"], inputs, "out.md")
    assert argv == [sys.executable, "-m", "dsdoctor", "report", "a.log", "b.log",
                    "--config", "ds.json", "--config", "acc.yaml", "--script", "train.py",
                    "--model", "m", "--env", "local", "--ds-version", "0.14.0",
                    "--engine", "python", "--output", "out.md"]
    bare = report_argv(["a.log"], AnalysisInputs(), "o.md")
    assert bare[-4:] == ["--engine", "auto", "--output", "o.md"]
