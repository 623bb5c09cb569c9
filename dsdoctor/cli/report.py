"""``dsdoctor report``: write a GitHub issue body for DeepSpeed / Transformers / Accelerate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dsdoctor.cli.misplaced import refuse_misplaced
from dsdoctor.cli.options import add_input_options, add_jobs_option, inputs_from
from dsdoctor.cli.progress import add_quiet_option, progress_bar
from dsdoctor.errors import UsageError
from dsdoctor.facts import envnodes
from dsdoctor.logs import logdirs
from dsdoctor.safeio import input_paths, one_line, write_report


def _run_pipeline(args: argparse.Namespace) -> tuple[Any, Any]:
    """The analysis (as ``pipeline.analyze`` does it) keeping the run model for the report's asks."""
    from dsdoctor.diagnose.pipeline import analyze_with_run  # noqa: PLC0415

    bar = progress_bar(getattr(args, "quiet", False), sys.stderr)
    try:
        return analyze_with_run(inputs_from(args), on_progress=bar)
    finally:
        bar.close()


def _analyze(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """Run the analysis; the issue can still be written (from the log alone) if it fails."""
    try:
        # The env is loaded (and validated) by run() too; the analysis gets the same file from
        # the per-process input cache (and 'local' is probed once per process).
        report, run = _run_pipeline(args)
        return report, run, []
    except UsageError:
        raise
    except Exception as exc:  # a bug in a rule must not stop the user from filing the issue
        from dsdoctor.redact import redact_secrets  # noqa: PLC0415
        # the exception text may quote a log line: it goes to stderr and into the body
        msg = redact_secrets(f"analysis failed ({type(exc).__name__}: {exc}); "
                             "the issue holds the log excerpt only")
        print(f"dsdoctor: warning: {msg}", file=sys.stderr)
        return None, None, [msg]


def _with_watch_findings(report: Any, path: str) -> Any:
    """watch's key r: what only watch saw (a hang and the ranks' stacks), first among the
    findings; no log line says it."""
    from dataclasses import replace  # noqa: PLC0415

    from dsdoctor.watch.hang import findings_from_json  # noqa: PLC0415

    try:
        extra = findings_from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--watch-findings {path}: cannot read it ({exc})") from None
    return replace(report, findings=(*extra, *report.findings))


def expand_envs(specs: list[str]) -> list[str]:
    """``--env`` values: files, ``local``, folders or globs (facts/envnodes.py)."""
    return envnodes.expand_specs(specs)


#: Symptoms that are not error lines (a few overflows are normal; a NaN loss prints no error).
_NOT_ERROR_LINES = frozenset({"fp16-overflow", "nan-loss", "loss-zero"})


def _anchors(report: Any, logs: list[str]
             ) -> tuple[tuple[str, int] | None, tuple[str, int] | None, dict[str, int] | None]:
    """Where the first error is, from the analysis (the scan's evidence: one log-reading path):
    (anchor, fallback, the first error line of each log file)."""
    if report is None:
        return None, None, None
    order = {p: i for i, p in enumerate(logs)}

    def earliest(evs: list[Any]) -> tuple[str, int] | None:
        evs = [e for e in evs if e.file in order]
        if not evs:
            return None
        e = min(evs, key=lambda e: (order[e.file], e.line))
        return (e.file, e.line)

    error_lines = [e for s in report.symptoms if s.kind not in _NOT_ERROR_LINES
                   for e in (s.first, *s.evidence)]
    per_file: dict[str, int] = {}
    for e in error_lines:
        if e.file in order and (e.file not in per_file or e.line < per_file[e.file]):
            per_file[e.file] = e.line
    # A Python exception in the log is what a maintainer reads first: the excerpt starts from
    # the log's first error line (the traceback's exception line; the excerpt climbs to its
    # "Traceback") rather than from an earlier symptom line (a NaN loss some steps before).
    # Without one, the error findings' strongest evidence (evidence[0]) is the error.
    if report.symptom("python-exception") is not None:
        anchor = earliest(error_lines)
    else:
        anchor = earliest([f.evidence[0] for f in report.findings if f.severity == "error" and f.evidence])
    # Otherwise the first symptom (collapses print no traceback), overflows last: a few are normal.
    fallback = earliest(error_lines) or earliest([e for f in report.findings for e in f.evidence]) or earliest(
        [s.first for s in report.symptoms if s.kind != "fp16-overflow"]) or earliest(
        [s.first for s in report.symptoms])
    return anchor, fallback, per_file


def _kind(args: argparse.Namespace, report: Any, launch: Any) -> str:
    """training | config | install | env (see issue_body.KINDS)."""
    if not args.logs:
        return "config" if args.config else "env"
    if report is not None and report.symptom("op-build-failure") is not None and not report.timeline \
            and not launch.commands:
        return "install"  # an op build / pip install log: no launch, no training step
    return "training"


def run(args: argparse.Namespace) -> int:
    """Handler of ``dsdoctor report``."""
    from dsdoctor.facts import envinfo
    from dsdoctor.facts.inputs import cached
    from dsdoctor.redact import Redactor
    from dsdoctor.render import issue_body
    from dsdoctor.render.issue_launch import gather_launch, is_shell_script

    if "-" in args.logs:
        raise UsageError("-: report reads the log twice (analysis and excerpt); save it to a file first")
    if not (args.logs or args.config or args.env):
        raise UsageError("report: give a LOG, or --config FILE (a config question), or --env FILE "
                         "(a version question); see 'dsdoctor report --help'")
    # a config given as a LOG (or a log as --config) would read as a run without an error line
    refuse_misplaced(args.logs, args.config or [])
    # The body exists to be posted publicly: user names, home paths, host names and IPs become
    # placeholders unless the user keeps them (--keep-paths / --keep-hosts).
    red = Redactor(paths=not args.keep_paths, hosts=not args.keep_hosts, this_machine=True)
    # the log files as analyze reads them (a folder per node: the logs in it), so the excerpt,
    # the anchors and the analysis read the same files
    logs = logdirs.expand(args.logs)
    configs = [issue_body.read_config(c, red) for c in args.config or []]
    env_paths = expand_envs(args.env or [])
    # `--env local` collects DeepSpeed's op report too (in a child process, as `env` does): the
    # body's "ds_report output" is then filled, not asked for.
    envs = [(p, envinfo.load_snapshot(p, ops=True) if p == "local" else cached("env", p, envinfo.load_snapshot))
            for p in env_paths]
    # Shell launch scripts are read for their commands (never run); Python scripts also go to the
    # analysis, which parses them.
    shell = [s for s in args.script or [] if is_shell_script(s)]
    scripts = [issue_body.read_shell_script(s) for s in shell]
    analysis_args = argparse.Namespace(**vars(args))
    analysis_args.logs = logs
    analysis_args.script = [s for s in args.script or [] if s not in shell]
    analysis_args.env = env_paths  # every node's snapshot: the analysis compares them (DS246)
    report, run_model, notes = _analyze(analysis_args)
    if args.watch_findings and report is not None:
        report = _with_watch_findings(report, args.watch_findings)
    if not envs:
        notes.append("no --env given: system info left for you to fill "
                     "(run 'dsdoctor env --format json' on the training node and pass --env FILE)")
    anchor, fallback, per_file = _anchors(report, logs)
    excerpt = issue_body.first_error_excerpt(logs, anchor, fallback, per_file) if logs else None
    launch = gather_launch(report, scripts)
    kind = _kind(args, report, launch)
    issue = issue_body.build_issue(
        target=args.target, report=report, logs=logs, configs=configs,
        env=envs[0][1] if envs else None, envs=envs, redactor=red, excerpt=excerpt, launch=launch,
        inputs_note=notes, printed=issue_body.printed_config(report, red), run=run_model, kind=kind)
    if issue.triage and not args.force:
        # A maintainer would answer "apply the fix": say it now instead of preparing the issue.
        codes = ", ".join(issue.triage)
        print(f"dsdoctor: not writing the issue: the analysis explains this failure as a "
              f"configuration or environment problem with a fix ({codes}; see 'dsdoctor analyze' or "
              f"'dsdoctor rules {issue.triage[0]}'). Apply the fix and re-run; if the failure "
              "remains, write the issue with --force.", file=sys.stderr)
        return 1
    if args.output:
        # never over an input: a log inside a node's folder, a snapshot a glob named; any other
        # file is replaced, as grep and curl do
        read = argparse.Namespace(**{**vars(args), "logs": logs, "env": env_paths})
        write_report(args.output, issue.body, input_paths(read), force=True)
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
        conflict_handler="resolve",  # --env is redefined below: several nodes' snapshots
        description="Analyze the run and write a Markdown issue body in the target project's bug "
        "template: description, diagnosis, the first error with context (deduplicated across "
        "ranks), the launch command, the config as written (or as the run printed it), what the "
        "log says about the run, and the environment. Without a LOG: a config question (--config) "
        "or a version question (--env). When the analysis explains the failure as a configuration "
        "or environment problem with a fix, nothing is written (exit 1) unless --force. Secrets "
        "are always redacted; user names, home paths, host names and IP addresses become "
        "placeholders (<user>, <host-1>, <ip-1>) unless --keep-paths / --keep-hosts.")
    p.add_argument("logs", nargs="*", metavar="LOG",
                   help="training or install log file(s), plain or .gz, or folders of logs (one "
                   "per node: node*/) (optional with --config/--env)")
    add_input_options(p)
    add_jobs_option(p)
    p.add_argument("--env", action="append", default=[], metavar="FILE|GLOB|local",
                   help="environment snapshot(s) from 'dsdoctor env --format json', one per node "
                   "(repeatable, or a quoted glob such as 'env-*.json'); several are compared")
    p.add_argument("--target", choices=("deepspeed", "transformers", "accelerate"), default="deepspeed",
                   help="whose issue template to follow (default: deepspeed)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the body to FILE instead of stdout "
                   "(replaced if it exists; never an input)")
    add_quiet_option(p)
    p.add_argument("--force", action="store_true",
                   help="write the issue even when the analysis explains the failure with a fix")
    p.add_argument("--keep-paths", action="store_true",
                   help="keep user names and home paths (default: /home/<user>/...)")
    p.add_argument("--keep-hosts", action="store_true",
                   help="keep host names and IP addresses (default: <host-1>, <ip-1>)")
    # Before hosts and paths were hidden by default these flags turned it on; they stay accepted
    # so existing scripts keep working, and do nothing more than the default.
    p.add_argument("--redact-paths", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--redact-hosts", action="store_true", help=argparse.SUPPRESS)
    # watch's key r: its own findings (a hang, the ranks' stacks) as JSON (watch/hang.py)
    p.add_argument("--watch-findings", metavar="FILE", help=argparse.SUPPRESS)
    p.set_defaults(func=run)
