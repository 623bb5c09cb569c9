"""Run ``dsdoctor analyze`` on a ``sample_logs/<scenario>/`` folder and compare with its expected.json.

Used by ``tests/test_sample_logs.py``, ``tests/test_live_deepspeed.py`` and
``scripts/regenerate_samples.py --check``; also handy by hand::

    python scripts/sample_check.py sample_logs/fp16_loss_scale_collapse

A scenario folder holds ``*.log`` / ``*.log.gz`` (the logs), ``ds_config*.json`` or
``accelerate*.yaml`` (configs), optionally ``model_config.json`` and ``env.json``, and
``expected.json``: ``{"symptoms": [...], "rules": [...], "must_not": [...]}`` plus, optionally,
``"max_severity"`` (the worst finding severity a correct analysis may report, e.g. ``"info"`` for a
healthy-but-noisy run), ``"must_not_rules"`` (rule codes that would be wrong diagnoses),
``"scripts"`` (training scripts, relative to the repository, to pass with ``--script``) and
``"fate"`` (the run's verdict: failed, hung, killed, stopped, not-learning, recovered or healthy;
failed, hung, killed, stopped and not-learning must exit 1, healthy and recovered 0 unless a finding
is an error).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOGS = REPO / "sample_logs"
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Expected:
    """The contents of one expected.json."""

    symptoms: tuple[str, ...]
    rules: tuple[str, ...]
    must_not: tuple[str, ...]
    max_severity: str | None = None
    scripts: tuple[str, ...] = ()
    must_not_rules: tuple[str, ...] = ()
    fate: str | None = None

    @classmethod
    def load(cls, folder: Path) -> Expected:
        """Read ``folder/expected.json``."""
        d = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
        return cls(tuple(d.get("symptoms", ())), tuple(d.get("rules", ())),
                   tuple(d.get("must_not", ())), d.get("max_severity"), tuple(d.get("scripts", ())),
                   tuple(d.get("must_not_rules", ())), d.get("fate"))


def scenarios(root: Path = SAMPLE_LOGS) -> list[str]:
    """Names of the scenario folders (those with an expected.json), sorted."""
    return sorted(p.parent.name for p in root.glob("*/expected.json"))


def analyze_argv(folder: Path, fmt: str = "json", base: Path | None = None) -> list[str]:
    """The ``dsdoctor analyze`` arguments for a scenario folder (paths relative to ``base``)."""
    base = base or folder.parent.parent

    def rel(p: Path) -> str:
        try:
            return str(p.relative_to(base))
        except ValueError:
            return str(p)

    logs = sorted([*folder.glob("*.log"), *folder.glob("*.log.gz")])
    argv = ["analyze", *(rel(p) for p in logs)]
    configs = sorted([*folder.glob("ds_config*.json"), *folder.glob("accelerate*.yaml")])
    for cfg in configs:
        argv += ["--config", rel(cfg)]
    if (folder / "model_config.json").exists():
        argv += ["--model", rel(folder / "model_config.json")]
    if (folder / "env.json").exists():
        argv += ["--env", rel(folder / "env.json")]
    if (folder / "fr_trace").is_dir():  # Flight Recorder dumps of the run (one file per rank)
        argv += ["--trace", rel(folder / "fr_trace")]
    for script in Expected.load(folder).scripts:
        argv += ["--script", script]
    argv += ["--format", fmt, "--engine", "python"]
    if fmt == "text":
        argv += ["--color", "never"]
    return argv


@contextlib.contextmanager
def _in_dir(path: Path, columns: int = 120) -> Iterator[None]:
    """Run with ``path`` as cwd and a fixed terminal width (rich reads COLUMNS)."""
    old_cwd, old_cols = os.getcwd(), os.environ.get("COLUMNS")
    os.chdir(path)
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_cols is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_cols


def run_analyze(folder: Path, fmt: str = "json") -> tuple[int, str, str]:
    """Run ``dsdoctor analyze`` in-process on a scenario folder: (exit code, stdout, stderr).

    Paths are given relative to the folder's grandparent (the repository for committed samples),
    so that reports do not depend on where the checkout lives.
    """
    from dsdoctor.cli.main import main

    base = folder.resolve().parent.parent
    out, err = io.StringIO(), io.StringIO()
    with _in_dir(base), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(analyze_argv(folder.resolve(), fmt, base))
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


# Issue 19: a run killed by SIGKILL or stopped by a signal / Ctrl-C did not finish: exit 1 too.
ERROR_FATES = ("failed", "hung", "killed", "stopped", "not-learning")


def expected_exit(report: dict[str, Any], fate: str) -> int:
    """The exit code a run of this fate must give: 1 for failed/hung/killed/stopped/not-learning; otherwise 0
    unless a finding is an error (a config lint on a healthy run still fails the check)."""
    if fate in ERROR_FATES:
        return 1
    return 1 if any(f.get("severity") == "error" for f in report.get("findings", [])) else 0


def problems(report: dict[str, Any], expected: Expected, exit_code: int | None = None) -> list[str]:
    """What the report gets wrong against ``expected`` (empty list: all good).

    ``exit_code``: the analysis' exit code, checked against the expected fate when both are known.
    """
    kinds = {s["kind"] for s in report.get("symptoms", [])}
    rules = {f["rule"] for f in report.get("findings", [])}
    out = [f"symptom {k!r} not reported" for k in expected.symptoms if k not in kinds]
    out += [f"rule {r} not reported" for r in expected.rules if r not in rules]
    out += [f"false positive symptom {k!r}" for k in expected.must_not if k in kinds]
    out += [f"wrong diagnosis {r}" for r in expected.must_not_rules if r in rules]
    if expected.max_severity:
        limit = SEVERITY_RANK[expected.max_severity]
        out += [f"finding {f['rule']} has severity {f['severity']} > {expected.max_severity}"
                for f in report.get("findings", []) if SEVERITY_RANK.get(f["severity"], 2) > limit]
    if expected.fate:
        got = (report.get("verdict") or {}).get("fate")
        if got != expected.fate:
            out.append(f"verdict {got!r}, expected {expected.fate!r}")
        if exit_code is not None and exit_code != expected_exit(report, expected.fate):
            out.append(f"exit code {exit_code} for a {expected.fate} run")
    return out


def main(argv: list[str] | None = None) -> int:
    """Check the given scenario folders (default: all committed ones); print what is missing."""
    folders = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or [
        SAMPLE_LOGS / s for s in scenarios()]
    bad = 0
    for folder in folders:
        if not (folder / "expected.json").is_file():
            print(f"{folder}: no expected.json (not a scenario folder, or its run failed)")
            bad += 1
            continue
        code, out, err = run_analyze(folder)
        if code == 2:
            print(f"{folder.name}: analyze failed: {err.strip()}")
            bad += 1
            continue
        found = problems(json.loads(out), Expected.load(folder), code)
        bad += bool(found)
        print(f"{folder.name}: " + ("ok" if not found else "; ".join(found)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
