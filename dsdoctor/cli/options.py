"""Command-line options shared by the commands that run the analysis (analyze, watch, report)."""

from __future__ import annotations

import argparse

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
                   help="training script, analyzed statically (never run) (repeatable)")
    p.add_argument("--ds-version", metavar="X.Y.Z",
                   help="DeepSpeed release to lint the config against (default: from env/log)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="prefilter engine (default: hyperscan when installed, else pure Python)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="text/Markdown: also print every finding and symptom in full (JSON "
                   "always has them)")
