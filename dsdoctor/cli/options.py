"""Command-line options shared by the commands that run the analysis (analyze, watch, report)."""

from __future__ import annotations

import argparse

from dsdoctor.facts import envnodes
from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.logs import logdirs
from dsdoctor.logs.frdump import looks_like_dump
from dsdoctor.model import ENGINES


def add_input_options(p: argparse.ArgumentParser) -> None:
    """The inputs besides the log: config, model, environment, scripts, lint release, engine."""
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="DeepSpeed JSON or Accelerate YAML config (repeatable)")
    p.add_argument("--model", metavar="PATH", help="model config.json or its directory")
    p.add_argument("--env", metavar="FILE|local",
                   help="environment snapshot from 'dsdoctor env --format json' on the training "
                   "node, or 'local' for this machine")
    p.add_argument("--script", action="append", default=[], metavar="FILE",
                   help="training script (.py) or shell launch script (.sh), read statically, never run "
                   "(repeatable)")
    p.add_argument("--ds-version", metavar="X.Y.Z",
                   help="DeepSpeed release to lint the config against (default: from env/log)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="prefilter engine (default: hyperscan when installed, else pure Python)")
    p.add_argument("--select", action="append", default=[], metavar="RULES",
                   help="report only these rules: codes (DS314), code prefixes (DS3), names or "
                   "categories (config), comma-separated or repeated (default: [tool.dsdoctor] "
                   "select in pyproject.toml, else all; docs/configuration.md)")
    p.add_argument("--ignore", action="append", default=[], metavar="RULES",
                   help="never report these rules (as --select; default: [tool.dsdoctor] ignore)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="text/Markdown: also print every finding and symptom in full (JSON "
                   "always has them)")


def add_jobs_option(p: argparse.ArgumentParser) -> None:
    """--jobs: the commands that scan whole logs (analyze, report), not watch (it follows)."""
    p.add_argument("--jobs", "-j", type=_jobs, default=None, metavar="N",
                   help="processes scanning one big log (a plain file over 64 MiB) in parallel "
                   "(default: up to 2, one per core; 1: one process)")


def inputs_from(args: argparse.Namespace) -> AnalysisInputs:
    """The analysis inputs named by a parsed command line (nothing below cli/ sees argparse)."""
    logs = getattr(args, "logs", None)
    if logs is None:
        one = getattr(args, "log", None)  # watch: its LOG arguments (a list), or one log
        logs = list(one) if isinstance(one, (list, tuple)) else [one] if one else []
    logs = logdirs.expand(logs)  # a folder per node: the log files in it
    traces = list(getattr(args, "trace", None) or [])
    if traces or getattr(args, "trace", None) is not None:
        # analyze: a Flight Recorder dump given as a LOG is read as one (never as text)
        dumps = [p for p in logs if p != "-" and looks_like_dump(p)]  # regular files only
        logs = [p for p in logs if p not in dumps]
        traces += dumps
    env_arg = getattr(args, "env", None)
    envs = envnodes.expand_specs(env_arg if isinstance(env_arg, list) else
                                 [env_arg] if env_arg else [])
    return AnalysisInputs.of(logs=logs, traces=traces, configs=getattr(args, "config", None) or [],
                             model=getattr(args, "model", None),
                             env=envs[0] if envs else None,
                             envs=envs if len(envs) > 1 else (),
                             scripts=getattr(args, "script", None) or [],
                             ds_version=getattr(args, "ds_version", None),
                             engine=getattr(args, "engine", "auto") or "auto",
                             jobs=getattr(args, "jobs", None),
                             selection=selection_from(args))


def selection_from(args: argparse.Namespace):  # -> settings.Selection | None
    """--select/--ignore over the project's [tool.dsdoctor] over the user's config file, each
    selector checked against the rules (a typo is an error, with the closest name)."""
    from dsdoctor import settings  # noqa: PLC0415
    from dsdoctor.diagnose.engine import load_rules  # noqa: PLC0415

    chosen = settings.resolve(getattr(args, "select", None) or (),
                              getattr(args, "ignore", None) or ())
    if chosen.is_default:
        return None
    rules = [settings.RuleInfo(r.code, r.name, r.category or "") for r in load_rules()]
    where = "; ".join(chosen.sources)
    settings.check_selectors((*chosen.select, *chosen.ignore), rules, where)
    return chosen


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs wants a whole number, not {text!r}") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"--jobs wants 1 to 64, not {n}")
    return n
