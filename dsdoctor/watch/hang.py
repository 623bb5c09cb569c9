"""What ``watch`` learned about a stall, kept as a finding: ``WATCH-HANG``.

A stall raised on screen, with the ranks' stacks py-spy dumped, used to vanish when the user left
(``q``, Ctrl-C) or wrote the issue report (``r``). Here it becomes a :class:`Finding` (watch's own,
like ``WATCH-RAM``: ``analyze`` cannot see a hang that prints nothing), with the stall's length, the
last progress step and the grouped stacks as evidence lines, so that the report, the summary on
exit and the exit code carry it. The summary and the exit code follow ``analyze``'s convention: an
error finding exits 1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dsdoctor.logs.rankfacts import Frame
from dsdoctor.model import Evidence, Finding, Report
from dsdoctor.watch.progress import StallStatus

HANG_RULE = "WATCH-HANG"  # watch's own finding, not a rule of rules/
# the stacks are no log's lines: their evidence names the tool that read them, line = order
STACKS_FILE = "py-spy dump"
STACKS_PREFIX = "rank stacks: "


@dataclass(frozen=True)
class StallSeen:
    """The last stall watch raised, what the ranks' stacks said, and whether it cleared."""

    status: StallStatus  # as the stall was raised
    stacks: tuple[str, ...] = ()  # stacks.explain's lines (grouped, odd rank named); () if none
    stacks_note: str = ""  # why there are no stacks (no py-spy, no pid known), "" when dumped
    cleared_after: float | None = None  # seconds from the stall to progress again; None: ongoing
    # the stall ended on new output but no new progress line (a timeout's traceback, the
    # launcher's exit lines): if the run then failed, that output was the hang's end, not progress
    by_output: bool = False
    # each rank's stack as traceback frames: the final analysis reads where each rank was
    rank_frames: tuple[tuple[int, tuple[Frame, ...]], ...] = ()

    def resumed(self, stalled_for: float, by_output: bool = False) -> StallSeen:
        return replace(self, cleared_after=stalled_for, by_output=by_output)


def _last_progress_evidence(status: StallStatus) -> Evidence | None:
    last = status.last
    if last is None:
        return None
    file, _, line = last.location.rpartition(":")
    if not file or not line.isdigit():
        return None
    return Evidence(file, int(line), last.text[:400])


def hang_finding(seen: StallSeen, now: StallStatus | None = None, failed: bool = False) -> Finding:
    """The stall as a finding. ``now``: the detector's status when the finding is made (a stall
    still on gets its length so far). Ongoing: an error; cleared: a warning, since a run that
    stepped again was slow (an evaluation, a checkpoint save), not hung, but its stacks stay.
    ``failed``: the command failed; a stall that only output (no progress line) ended is then the
    hang that its failure ended (gloo's or NCCL's timeout), an error."""
    status = seen.status
    ended_in_failure = failed and seen.cleared_after is not None and seen.by_output
    if seen.cleared_after is not None:
        lasted = status.idle_seconds + seen.cleared_after
    elif now is not None and now.stalled:
        lasted = now.idle_seconds
    else:
        lasted = status.idle_seconds
    last = status.last
    if last is None:
        where = "no progress line was seen (step, loss, Trainer dict or tqdm bar)"
        step_text = "before any progress line"
    else:
        step_text = f"after step {last.step}" if last.step is not None else "after the last step line"
        where = f"the last progress was {last.location}: {last.text[:160]}"
    how = "adaptive" if status.adaptive else "fixed"
    ongoing = seen.cleared_after is None or ended_in_failure
    if ended_in_failure:
        title = f"no progress for {lasted:.0f}s {step_text}: the run hung, then failed"
    elif ongoing:
        title = f"no progress for {lasted:.0f}s {step_text}: the run looks hung"
    else:
        title = f"stalled for {lasted:.0f}s {step_text}, then progress resumed"
    stacks = seen.stacks
    if stacks:
        inside = "The ranks' Python stacks (py-spy), grouped, the odd rank out named: " + \
            "; ".join(stacks[:4]) + ("; ..." if len(stacks) > 4 else "")
    else:
        inside = f"The ranks' stacks were not dumped: {seen.stacks_note or 'no rank process known'}."
    message = (f"watch saw no progress for {lasted:.0f}s ({how} threshold "
               f"{status.threshold:.0f}s); {where}. {inside}")
    evidence = [ev for ev in (_last_progress_evidence(status),) if ev is not None]
    evidence += [Evidence(STACKS_FILE, i, line) for i, line in enumerate(stacks, 1)]
    return Finding(
        rule=HANG_RULE, name="run-hung" if ongoing else "run-stalled",
        severity="error" if ongoing else "warning", title=title, message=message,
        fix=("start with the odd rank out: the others wait for it in a collective. Its stack "
             "names the place (a rank that skipped a collective, a data loader, a save on one "
             "rank only); 'py-spy dump --pid PID' shows a rank again, and TORCH_DISTRIBUTED_DEBUG"
             "=DETAIL NCCL_DEBUG=INFO on the next run name the collective each rank entered"),
        evidence=tuple(evidence),
    )


def stack_lines(lines: Sequence[str]) -> tuple[str, ...]:
    """The stack lines as evidence: watch's display prefix dropped."""
    return tuple(line.removeprefix(STACKS_PREFIX) for line in lines)


def watch_findings(findings: Sequence[Finding], extra: Sequence[Finding] = ()) -> list[Finding]:
    """Findings for the summary: WATCH-HANG first, then the most severe first."""
    order = {"error": 0, "warning": 1, "info": 2}
    allf = list(extra) + [f for f in findings if f not in extra]
    return sorted(allf, key=lambda f: (f.rule != HANG_RULE, order.get(f.severity, 3)))


def exit_code(findings: Sequence[Finding]) -> int:
    """analyze's convention (model.Report.exit_code): 1 when a finding is an error."""
    return 1 if any(f.severity == "error" for f in findings) else 0


def analysis_lines(report: Report | None, stopped_by_watch: bool = False) -> list[str]:
    """``analyze``'s first lines on the logs watch read, when they say something went wrong:
    the verdict (the rank that failed or stalled first and its frame, the ranks that only
    waited) and the per-rank table. A hang that ends in a timeout, or a rank that dies first,
    is named here even when no stall was seen (a rank that failed ends the others at once).
    ``stopped_by_watch``: watch itself stopped the command (Ctrl-C, q): the log's "stopped by
    SIGINT, a retry carries on" is then watch's own doing, not the run's fate, and is left out
    (WATCH-HANG says what the run was doing)."""
    from dsdoctor.render.analysis import verdict_line  # noqa: PLC0415

    if report is None or report.verdict is None:
        return []
    culprit = report.ranks is not None and report.ranks.culprit is not None
    if not (report.verdict.error or culprit):
        return []
    if stopped_by_watch and report.verdict.fate == "stopped" and not culprit:
        return []
    fate, rest = verdict_line(report)
    out = [f"dsdoctor watch: {fate}: {rest}"]
    if report.ranks is not None:
        out.append(f"  ranks ({len(report.ranks.ranks)}, by state):")
        out += [f"    {line}" for line in report.ranks.lines()]
    return out


def summary_lines(findings: Sequence[Finding], limit: int = 8,
                  head: Sequence[str] = (), failed_fate: str = "") -> list[str]:
    """What watch says on exit: ``head`` (analysis_lines: the verdict and the ranks), then one
    line per problem, WATCH-HANG's stacks under it. ``failed_fate``: the logs' verdict when it
    is a failure ("failed", "hung", ...), which makes the exit 1 too."""
    if not findings:
        return [*head, "dsdoctor watch: no problem found in what was read",
                exit_line(findings, failed_fate)]
    out = [*head,
           f"dsdoctor watch: {len(findings)} problem{'s' if len(findings) > 1 else ''} seen:"]
    for f in findings[:limit]:
        out.append(f"  {f.severity}: {f.rule} {f.name}: {f.title}")
        if f.rule == HANG_RULE:
            out += [f"    {ev.location}: {ev.text}" if ev.file != STACKS_FILE else f"    {ev.text}"
                    for ev in f.evidence]
    if len(findings) > limit:
        out.append(f"  ... and {len(findings) - limit} more: 'dsdoctor analyze' on the log")
    out.append(exit_line(findings, failed_fate))
    return out


def exit_line(findings: Sequence[Finding], failed_fate: str = "") -> str:
    """The last line of the summary: the exit code and why (analyze's convention: 1 on an
    error finding, a hang is one, or on a verdict that the run failed)."""
    errors = sum(1 for f in findings if f.severity == "error")
    why = f"{errors} error finding{'s' if errors > 1 else ''}" if errors else "no error finding"
    code = exit_code(findings)
    if failed_fate:
        why += f"; the logs' verdict: {failed_fate}"
        code = 1
    return f"dsdoctor watch: exit {code} ({why})"


def failed_fate(report: Report | None) -> str:
    """The logs' verdict when it says the run failed (exit 1), else ""."""
    if report is None or report.verdict is None or not report.verdict.error:
        return ""
    return report.verdict.fate


# ------------------------------------------------------------------ to the report's subprocess

def findings_json(findings: Sequence[Finding]) -> str:
    return json.dumps([f.to_dict() for f in findings])


def findings_from_json(text: str) -> tuple[Finding, ...]:
    """The findings ``findings_json`` wrote (key r hands them to ``dsdoctor report``)."""
    out = []
    for d in json.loads(text):
        evidence = tuple(Evidence(str(e["file"]), int(e["line"]), str(e["text"]), e.get("rank"))
                         for e in d.get("evidence", ()))
        out.append(Finding(rule=str(d["rule"]), name=str(d["name"]), severity=str(d["severity"]),
                           title=str(d["title"]), message=str(d.get("message", "")),
                           fix=str(d.get("fix", "")), evidence=evidence,
                           references=tuple(d.get("references", ()))))
    return tuple(out)
