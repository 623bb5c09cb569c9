"""``dsdoctor report``: write a GitHub issue body for DeepSpeed / Transformers / Accelerate."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dsdoctor.cli.options import add_input_options
from dsdoctor.errors import UsageError
from dsdoctor.safeio import input_paths, one_line, write_report


def _analyze(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """Run the analysis; the issue can still be written (from the log alone) if it fails."""
    from dsdoctor.diagnose.pipeline import run_analysis  # noqa: PLC0415
    try:
        # The env is loaded (and validated) by run() too; the analysis gets the same argument
        # (load_snapshot collects 'local' once per process, so the machine is probed once).
        return run_analysis(logs=args.logs, configs=args.config or [], model=args.model,
                            env=args.env, scripts=args.script or [], engine=args.engine,
                            ds_version=args.ds_version), []
    except UsageError:
        raise
    except Exception as exc:  # a bug in a rule must not stop the user from filing the issue
        msg = f"analysis failed ({type(exc).__name__}: {exc}); the issue holds the log excerpt only"
        print(f"dsdoctor: warning: {msg}", file=sys.stderr)
        return None, [msg]


def run(args: argparse.Namespace) -> int:
    """Handler of ``dsdoctor report``."""
    from dsdoctor.facts import envinfo
    from dsdoctor.render import issue_body
    from dsdoctor.redact import Redactor

    if "-" in args.logs:
        raise UsageError("-: report reads the log twice (analysis and excerpt); save it to a file first")
    red = Redactor(paths=args.redact_paths, hosts=args.redact_hosts)
    configs = [issue_body.read_config(c, red) for c in args.config or []]
    env = envinfo.load_snapshot(args.env) if args.env else None
    report, notes = _analyze(args)
    if env is None:
        notes.append("no --env given: system info left for you to fill "
                     "(run 'dsdoctor env --format json' on the training node and pass --env FILE)")
    anchor = fallback = None
    if report is not None:
        order = {p: i for i, p in enumerate(args.logs)}

        def earliest(evs: list[Any]) -> tuple[str, int] | None:
            evs = [e for e in evs if e.file in order]
            if not evs:
                return None
            e = min(evs, key=lambda e: (order[e.file], e.line))
            return (e.file, e.line)

        # The error-severity findings' strongest evidence is the error; otherwise the log's first
        # exception-looking line; otherwise the first symptom (collapses print no traceback),
        # overflows last because a few of them are normal.
        # evidence[0] is a finding's strongest line (the others may be context, such as the
        # first of many overflows before a collapse).
        # A Python exception in the log is what a maintainer reads first: when there is one, let
        # the excerpt start from the log's first traceback rather than from an earlier symptom
        # line (a NaN loss some steps before the loss-scale exception, say).
        if report.symptom("python-exception") is None:
            anchor = earliest([f.evidence[0] for f in report.findings
                               if f.severity == "error" and f.evidence])
        fallback = earliest([e for f in report.findings for e in f.evidence]) or earliest(
            [s.first for s in report.symptoms if s.kind != "fp16-overflow"]) or earliest(
            [s.first for s in report.symptoms])
    excerpt = issue_body.first_error_excerpt(args.logs, anchor, fallback)
    launch = issue_body.find_launch_command(args.logs, report)
    issue = issue_body.build_issue(target=args.target, report=report, logs=args.logs,
                                     configs=configs, env=env, redactor=red, excerpt=excerpt,
                                     launch=launch, inputs_note=notes)
    if args.output:
        write_report(args.output, issue.body, input_paths(args), args.force)
        print(f"dsdoctor: wrote {one_line(args.output)}; review it, then file it with:",
              file=sys.stderr)
        print(issue_body.gh_command(issue, args.output), file=sys.stderr)
    else:
        sys.stdout.write(issue.body)
        sys.stdout.flush()
        print("dsdoctor: save the body above as issue.md (or use --output issue.md), review it, "
              "then file it with:", file=sys.stderr)
        print(issue_body.gh_command(issue, "issue.md"), file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``report`` subcommand."""
    p = subparsers.add_parser(
        "report", help="write a GitHub issue body (DeepSpeed/Transformers/Accelerate template)",
        description="Analyze the run and write a Markdown issue body in the target project's bug "
        "template: description, diagnosis, the first error with context (deduplicated across "
        "ranks), launch arguments, config and environment. Secrets are always redacted.")
    p.add_argument("logs", nargs="+", metavar="LOG", help="training log file(s), plain or .gz")
    add_input_options(p)
    p.add_argument("--target", choices=("deepspeed", "transformers", "accelerate"), default="deepspeed",
                   help="whose issue template to follow (default: deepspeed)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the body to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="let --output overwrite an existing FILE")
    p.add_argument("--redact-paths", action="store_true", help="also hide user home directories")
    p.add_argument("--redact-hosts", action="store_true", help="also hide host names and IP addresses")
    p.set_defaults(func=run)
