"""The analysis as a function: logs (+ config, model, env, scripts) in, a frozen Report out.

Used by ``dsdoctor analyze``, ``dsdoctor report``, ``dsdoctor watch`` and the tests.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dsdoctor.diagnose import problems, verdict
from dsdoctor.model import Report, SYMPTOM_KINDS
from dsdoctor.redact import redact_report
from dsdoctor.logs.scan import ScanResult, scan_files

if TYPE_CHECKING:
    from dsdoctor.facts.run import RunModel


def _order(kind: str) -> int:
    return SYMPTOM_KINDS.index(kind) if kind in SYMPTOM_KINDS else len(SYMPTOM_KINDS)


def build_report(scan: ScanResult, findings=(), inputs: dict[str, Any] | None = None,
                 notes: Sequence[str] = (), run: RunModel | None = None) -> Report:
    """The frozen, redacted report, with the run's verdict and the problems grouped by cause.

    ``run`` is the run model of the analysis (``ctx.run``): the verdict takes the steps done and
    skipped from it. Without it (a scan-only report) no step counts are quoted.
    """
    symptoms = sorted(scan.symptoms.values(), key=lambda s: (_order(s.kind), s.first.file,
                                                              s.first.line))
    report = Report(
        files=tuple(scan.files),
        symptoms=tuple(symptoms),
        findings=tuple(findings),
        timeline=tuple(scan.timeline),
        facts=tuple(scan.facts),
        inputs=dict(inputs or {}),
        notes=tuple(list(scan.notes) + list(notes)),
    )
    # Secrets printed in a log (a --hub_token in the launcher's cmd line) never reach any output:
    # every renderer and the issue builder get the redacted report. The verdict and the problems
    # are built from the redacted symptoms and findings, so they quote only redacted text.
    report = redact_report(report)
    skipped = run.steps_skipped if run is not None else None
    progress = verdict.Progress(
        steps_done=run.value("steps_done") if run is not None else None,
        steps_skipped=skipped.value if skipped is not None else None,
        skipped_where=skipped.source.location if skipped is not None else None)
    fate = verdict.decide({s.kind: s for s in report.symptoms}, report.timeline,
                          report.findings, progress, has_log=bool(report.files))
    return replace(report, verdict=fate,
                   problems=problems.group(report.symptoms, report.findings, fate))


def evaluate(args: argparse.Namespace, scan: ScanResult) -> tuple[list, dict[str, Any], list[str]]:
    """Run the rules engine on a scan and the other inputs named by ``args``.

    Returns (findings, a description of the inputs used, notes).
    """
    findings, inputs, notes, _run = _evaluate_with_run(args, scan)
    return findings, inputs, notes


def _evaluate_with_run(args: argparse.Namespace, scan: ScanResult
                       ) -> tuple[list, dict[str, Any], list[str], RunModel]:
    """:func:`evaluate`, plus the run model the verdict reads its step counts from."""
    from dsdoctor.facts import context  # noqa: PLC0415 - not needed to import this module
    from dsdoctor.diagnose import engine

    ctx = context.build_context(args, scan)
    findings = list(engine.evaluate(ctx))  # rules add notes ("give --env to check ...")
    inputs = dict(ctx.inputs)
    inputs["engine"] = scan.engine
    return findings, inputs, list(ctx.notes), ctx.run


def analyze(args: argparse.Namespace) -> Report:
    """Scan ``args.logs`` (if any) and evaluate the rules: the report of ``dsdoctor analyze``."""
    scan = scan_files(args.logs, engine=args.engine) if args.logs else ScanResult(
        engine=args.engine)
    findings, inputs, notes, run = _evaluate_with_run(args, scan)
    return build_report(scan, findings, inputs, notes, run)


def run_analysis(logs: Sequence[str] = (), configs: Sequence[str] = (), model: str | None = None,
                 env: str | None = None, scripts: Sequence[str] = (), engine: str = "auto",
                 ds_version: str | None = None) -> Report:
    """Analyze logs and the other inputs. Raises UsageError on bad input."""
    return analyze(argparse.Namespace(logs=list(logs), config=list(configs), model=model,
                                      env=env, script=list(scripts), ds_version=ds_version,
                                      engine=engine))
