"""The analysis as a function: logs (+ config, model, env, scripts) in, a frozen Report out.

Used by ``dsdoctor analyze``, ``dsdoctor report``, ``dsdoctor watch`` and the tests.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dsdoctor.diagnose import problems, ranks, retry, verdict
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs.rankfacts import with_stacks, with_text
from dsdoctor.logs.scan import ProgressFn, ScanResult, scan_files
from dsdoctor.model import MARKER_FACTS, SYMPTOM_KINDS, Problem, Report, Verdict
from dsdoctor.redact import redact_report
from dsdoctor.redact.redactor import Redactor

if TYPE_CHECKING:
    from dsdoctor.diagnose.frmatch import TraceAnalysis
    from dsdoctor.facts.run import RunModel


def _order(kind: str) -> int:
    return SYMPTOM_KINDS.index(kind) if kind in SYMPTOM_KINDS else len(SYMPTOM_KINDS)


def build_report(scan: ScanResult, findings=(), inputs: dict[str, Any] | None = None,
                 notes: Sequence[str] = (), run: RunModel | None = None,
                 trace: TraceAnalysis | None = None) -> Report:
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
        facts=tuple(f for f in scan.facts if f.name not in MARKER_FACTS),
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
    red = Redactor()
    table = ranks.build({r: with_text(f, red.text) for r, f in scan.ranks.items()})
    if trace is not None:
        table = ranks.with_trace(table, trace, red.text)
        report = replace(report, notes=(*report.notes, *(red.text(n) for n in trace.notes)))
    fate = verdict.decide({s.kind: s for s in report.symptoms}, report.timeline,
                          report.findings, progress, has_log=bool(report.files),
                          lifecycle=_lifecycle(scan), ranks=table)
    if trace is not None and not report.files:
        fate = _trace_verdict(trace, table, red.text)
    grouped = problems.group(report.symptoms, report.findings, fate)
    if fate.preflight_errors is not None:  # counted over the problems shown, not the findings
        fate = verdict.preflight(fate, grouped)
    grouped, fate = retry.assess(grouped, fate, scan.facts, [_lines(p, report) for p in grouped],
                                 *_retry_rules(), table=table)
    return replace(report, verdict=fate, ranks=table, problems=grouped)


def _lines(p: Problem, report: Report) -> list[str]:
    """The text a problem's retry cases are matched against: its symptoms' lines and text values
    (an exception's message), its findings' lines."""
    out: list[str] = []
    for s in report.symptoms:
        if s.kind in p.symptoms:
            out += [e.text for e in s.evidence]
            out += [str(v) for vals in s.values.values() if isinstance(vals, list) for v in vals]
    for f in report.findings:
        if f.rule in p.rules:
            out += [e.text for e in f.evidence]
    return out


def _retry_rules() -> tuple[dict[str, retry.RuleInfo], dict[str, str]]:
    """Each rule's retry answer and category by code, and the rule code that explains each cause
    (a cause's first rule, the exit's DS113)."""
    from dsdoctor.diagnose import engine  # noqa: PLC0415 - loaded (and cached) by the analysis

    rules = engine.load_rules()
    by_name = {r.name: r.code for r in rules}
    causes = {cause: by_name[names[0]] for cause, _kinds, names in problems.CAUSES
              if names and names[0] in by_name}
    exit_rule = next((by_name[n] for n in problems.EXIT_RULES if n in by_name), None)
    if exit_rule is not None:
        causes["exit"] = exit_rule
    return {r.code: retry.RuleInfo(r.retriable, r.category) for r in rules}, causes


def _trace_verdict(trace: TraceAnalysis, table: ranks.RankTable | None,
                   redact: Callable[[str], str]) -> Verdict:
    """The fate from Flight Recorder dumps alone: a collective the ranks did not all enter alike
    can never complete, so the run hung there; dumps that all match say nothing of the fate."""
    lead = trace.lead
    if lead is not None and lead.kind != "state":
        said = table.culprit.sentence if table is not None and table.culprit else redact(
            lead.sentence)
        return Verdict("hung", f"hung: {said}")
    return Verdict("unknown", f"unknown: {redact(trace.sentence())}")


def _lifecycle(scan: ScanResult) -> verdict.Lifecycle:
    """The run's start and successful end as its log states them, and how old the log is."""
    started = next((f.evidence for f in scan.facts if f.name == "run-started"), None)
    finished = [f.evidence for f in scan.facts if f.name == "run-finished"]
    ages = []
    for summary in scan.files:
        try:
            st = os.stat(summary.path)
        except (OSError, ValueError):  # stdin, a file gone since: no age to tell
            continue
        if stat.S_ISREG(st.st_mode):
            ages.append(max(0.0, time.time() - st.st_mtime))
    return verdict.Lifecycle(started=started, finished=finished[-1] if finished else None,
                             age_s=min(ages) if ages else None)


def findings_of(inputs: AnalysisInputs, scan: ScanResult) -> list:
    """The rules' findings on a scan and the other inputs, and nothing else (``watch`` refreshes
    it every half second; bad input raises UsageError)."""
    from dsdoctor.diagnose import engine  # noqa: PLC0415 - not needed to import this module
    from dsdoctor.facts import context  # noqa: PLC0415

    return _selected(inputs, list(engine.evaluate(context.build_context(inputs, scan))))


def _rule_infos() -> list:
    from dsdoctor.diagnose import engine  # noqa: PLC0415
    from dsdoctor.settings import RuleInfo  # noqa: PLC0415

    return [RuleInfo(r.code, r.name, r.category or "") for r in engine.load_rules()]


def _selected(inputs: AnalysisInputs, findings: list) -> list:
    """The findings that report: --select/--ignore/[tool.dsdoctor], then a config line's inline
    ``dsdoctor: ignore[...]`` (dsdoctor/settings.py)."""
    from dsdoctor import settings  # noqa: PLC0415

    return settings.apply(findings, inputs.selection, _rule_infos())


def evaluate_with_run(inputs: AnalysisInputs, scan: ScanResult
                      ) -> tuple[list, dict[str, Any], list[str], RunModel]:
    """Run the rules engine on a scan and the other inputs.

    Returns (findings, a description of the inputs used with the run model under "run", notes,
    the run model: the verdict reads its step counts from it).
    """
    from dsdoctor.diagnose import engine  # noqa: PLC0415 - not needed to import this module
    from dsdoctor.facts import context  # noqa: PLC0415

    ctx = context.build_context(inputs, scan)
    findings = _selected(inputs, list(engine.evaluate(ctx)))  # rules add notes ("give --env ...")
    described = dict(ctx.inputs)
    described["engine"] = scan.engine
    described["run"] = ctx.run.to_dict()  # what the run is, each fact with its source
    if ctx.launch_scripts:  # the commands of --script shell scripts, whole (for report's body)
        described["launch_scripts"] = [
            {"file": la.file, "line": la.line, "launcher": la.launcher, "command": la.text}
            for la in ctx.launch_scripts]
    from dsdoctor import settings  # noqa: PLC0415

    notes = settings.apply_to_notes(ctx.notes, inputs.selection, _rule_infos())
    return findings, described, notes, ctx.run


def analyze(inputs: AnalysisInputs, on_progress: ProgressFn | None = None) -> Report:
    """Scan ``inputs.logs`` (if any) and evaluate the rules: the report of ``dsdoctor analyze``.

    ``on_progress`` hears of every chunk read (the CLI's progress bar)."""
    return analyze_with_run(inputs, on_progress)[0]


def analyze_with_run(inputs: AnalysisInputs, on_progress: ProgressFn | None = None
                     ) -> tuple[Report, RunModel]:
    """:func:`analyze`, and the run model (``report`` answers the maintainer's asks from it)."""
    scan = (scan_files(list(inputs.logs), engine=inputs.engine, on_progress=on_progress,
                       jobs=inputs.jobs)
            if inputs.logs else ScanResult(engine=inputs.engine))
    if inputs.rank_stacks:  # watch's stacks: the rules (DS107) and the rank table read them
        scan.ranks = with_stacks(scan.ranks, inputs.rank_stacks)
    trace = None
    if inputs.traces:
        from dsdoctor.diagnose import frmatch  # noqa: PLC0415 - only with --trace
        from dsdoctor.logs import frdump  # noqa: PLC0415

        trace = frmatch.analyze(frdump.read_dumps(inputs.traces))
    findings, described, notes, run = evaluate_with_run(inputs, scan)
    if trace is not None:
        described["traces"] = [{"file": d.path, "rank": d.rank, "format": d.fmt,
                                "version": d.version, "entries": len(d.entries)}
                               for d in trace.dumps]
    return build_report(scan, findings, described, notes, run, trace), run


def run_analysis(logs: Sequence[str] = (), configs: Sequence[str] = (), model: str | None = None,
                 env: str | None = None, scripts: Sequence[str] = (), engine: str = "auto",
                 ds_version: str | None = None) -> Report:
    """Analyze logs and the other inputs. Raises UsageError on bad input."""
    return analyze(AnalysisInputs.of(logs=logs, configs=configs, model=model, env=env,
                                     scripts=scripts, ds_version=ds_version, engine=engine))
