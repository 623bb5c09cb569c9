"""Analyze jobs one after another in this process: the start-up (imports, rules, the prefilter
database) is paid once, not once per job (bench/triage_throughput.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.errors import UsageError
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.model import Report
from dsdoctor.safeio import one_line
from dsdoctor.triage.jobs import Job
from dsdoctor.triage.outcome import Outcome


def job_inputs(job: Job, engine: str = "auto") -> AnalysisInputs:
    """A job's inputs, as ``dsdoctor analyze LOGS --config C --script S`` would take them."""
    return AnalysisInputs.of(logs=job.logs, configs=job.configs, scripts=job.scripts,
                             engine=engine, jobs=1)


def analyze_jobs(jobs: Iterable[Job], engine: str = "auto", exit_mode: str = "any",
                 analyze_fn: Callable[[AnalysisInputs], Report] = analyze
                 ) -> Iterator[tuple[Job, Report | None, Outcome]]:
    """Each job's report and outcome, in order. A job whose files cannot be analyzed (unreadable,
    not a log) is an ``error`` outcome with the reason, and the next job goes on."""
    for job in jobs:
        try:
            report = analyze_fn(job_inputs(job, engine))
        except UsageError as exc:
            yield job, None, Outcome.failed_to_read(job.name, job.where, one_line(str(exc)))
            continue
        except OSError as exc:
            yield job, None, Outcome.failed_to_read(
                job.name, job.where, one_line(f"{exc.filename or job.where}: {exc.strerror or exc}"))
            continue
        yield job, report, Outcome.of(job.name, job.where, report, report.exit_code_for(exit_mode))


__all__ = ["analyze_jobs", "job_inputs"]
