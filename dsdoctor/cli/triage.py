"""``dsdoctor triage``: many jobs in one process, a table of verdicts, causes counted, a history."""

from __future__ import annotations

import argparse
import os
import sys

from dsdoctor.cli.progress import add_quiet_option
from dsdoctor.errors import UsageError
from dsdoctor.model import ENGINES, EXIT_CODE_MODES, combined_exit_code

EPILOG = """examples:
  dsdoctor triage jobs/*/                      (one job per directory: its logs, config, scripts)
  dsdoctor triage 'runs/2024-*'  --db history.sqlite
  dsdoctor triage /scratch/slurm --job-pattern 'slurm-{job}.out'
  dsdoctor triage logs/ --job-pattern '{job}/rank*.log' --format jsonl -o records.jsonl
  dsdoctor triage --db history.sqlite --since 7d   (the history: causes counted over a week)

exit codes: as dsdoctor analyze (0, 1, 2; with --exit-code fate 3 failed, 4 hung, 5 killed,
6 stopped, 7 not-learning), for the worst job; a job whose files cannot be read is reported in
the table and does not stop the others."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "triage", help="diagnose many jobs in one process; count causes; keep a history",
        description="Analyze each job (a directory of rank logs with its config and scripts, or "
        "the files --job-pattern groups), print a table of jobs with verdict, cause, retry "
        "answer and fingerprint, then the causes counted across jobs. With --db, append the "
        "outcomes to an SQLite history; with --db and --since and no PATH, summarize it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="job directories, log files or globs (quoted globs are expanded here)")
    p.add_argument("--job-pattern", metavar="PATTERN",
                   help="how a job's files are named below each PATH, with {job} for the part "
                   "that names the job: 'slurm-{job}.out', '{job}/rank*.log'")
    p.add_argument("--db", metavar="FILE", help="SQLite history to append the outcomes to")
    p.add_argument("--since", metavar="AGE",
                   help="with --db and no PATH: summarize the history's last AGE (30m, 12h, 7d, 2w)")
    p.add_argument("--format", choices=("text", "jsonl"), default="text",
                   help="jsonl: one analysis per job per line (the schema of 'dsdoctor schema', "
                   "plus job and input)")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write the table or records to FILE (replaced if it exists; never an input)")
    # --force is what --output needed before it replaced files: accepted, does nothing more
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--exit-code", choices=EXIT_CODE_MODES, default="any", dest="exit_code")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="prefilter engine")
    add_quiet_option(p)
    p.set_defaults(func=run)


def _write(args: argparse.Namespace, text: str, inputs: list[str]) -> None:
    if args.output:
        from dsdoctor.safeio import write_report  # noqa: PLC0415

        write_report(args.output, text, inputs, force=True)  # never an input
    else:
        sys.stdout.write(text)


def run(args: argparse.Namespace) -> int:
    from dsdoctor.triage import history, table  # noqa: PLC0415

    if not args.paths:
        if not (args.db and args.since):
            raise UsageError("nothing to triage: give job directories, log files or globs; or "
                             "--db FILE --since 7d to summarize a history")
        if not os.path.isfile(args.db):
            raise UsageError(f"--db {args.db}: no such history; triage some jobs with --db first")
        summary = history.summarize(args.db, history.since_seconds(args.since))
        _write(args, table.summary_text(summary, args.db, args.since), [])
        return 0
    if args.since:
        raise UsageError("--since summarizes a history: give it with --db and no PATH")
    from dsdoctor.render.analysis import render_jsonl  # noqa: PLC0415
    from dsdoctor.triage.jobs import find_jobs  # noqa: PLC0415
    from dsdoctor.triage.run import analyze_jobs  # noqa: PLC0415

    jobs = find_jobs(args.paths, args.job_pattern)
    inputs = [f for j in jobs for f in (*j.logs, *j.configs, *j.scripts)]
    if args.db and os.path.abspath(args.db) in {os.path.abspath(f) for f in inputs}:
        raise UsageError(f"--db {args.db} is one of the jobs' files; give another file")
    outcomes, records = [], []
    for job, report, outcome in analyze_jobs(jobs, args.engine, args.exit_code):
        outcomes.append(outcome)
        if args.format == "jsonl":
            records.append(render_jsonl(report, job=job.name, input=job.where) if report is not None
                           else _error_record(job.name, job.where, outcome.sentence))
    text = "".join(records) if args.format == "jsonl" else table.jobs_table(outcomes)
    _write(args, text, inputs)
    if args.db:
        n = history.append(args.db, outcomes)
        if not args.quiet:
            print(f"dsdoctor: {n} job(s) appended to {args.db}", file=sys.stderr)
    return combined_exit_code([o.exit_code for o in outcomes], args.exit_code)


def _error_record(job: str, where: str, message: str) -> str:
    import json  # noqa: PLC0415

    return json.dumps({"job": job, "input": where, "error": message}, ensure_ascii=False) + "\n"
