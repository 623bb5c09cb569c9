"""What a maintainer asks next, answered from the inputs or asked for precisely.

* the config: the file as written (never re-serialized: ``2e8``, duplicate keys and comments
  stay), with a note per finding about it; else the config DeepSpeed printed in the log, labelled
  as printed by the run; else one line saying how to get it;
* the run's state: ZeRO stage and precision as the log shows them and any disagreement with the
  given config, steps done and skipped, the rank whose log to attach, a cut traceback;
* triage: a failure the analysis explains as a configuration or environment problem with a fix;
* several nodes: the versions that differ between their environment snapshots.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdoctor.diagnose.problems import NEVER_LEAD
from dsdoctor.errors import UsageError
from dsdoctor.facts.configfile import config_bytes
from dsdoctor.facts.envnodes import node_differences, node_name
from dsdoctor.facts.printed import read_json_block_text
from dsdoctor.facts.run import RunModel
from dsdoctor.model import Finding, Report
from dsdoctor.redact import Redactor
from dsdoctor.render.env import details, fence
from dsdoctor.render.issue_launch import Launch
from dsdoctor.render.issue_log import LogExcerpt

MAX_QUOTED_CONFIG_LINES = 1000  # a config file quoted in the issue body: its first lines
MAX_QUOTED_CONFIG_CHARS = 40_000  # GitHub refuses an issue body over 65,536 characters
_REDACT_MARGIN = 64 << 10  # redacted beyond the cut: a secret across it is seen whole

#: Rules whose error explains a failure as the user's configuration or environment (a fix the
#: user applies), not as a bug of the library: fp16 scale collapse, GPU/CPU memory, op builds
#: against a mismatched CUDA, config values the Trainer/Accelerate/DeepSpeed rejected, a port
#: in use. NaN losses, hangs and bare non-zero exits stay reportable: they may be bugs.
USER_SIDE_RULES = frozenset({"DS102", "DS105", "DS106", "DS108", "DS109", "DS110", "DS111", "DS112"})


@dataclass(frozen=True)
class ConfigText:
    """A config file's content to paste, as written (redacted)."""

    path: str
    text: str
    lang: str


@dataclass(frozen=True)
class PrintedConfig:
    """The DeepSpeed config the run printed at start-up, as printed (redacted)."""

    file: str
    line: int
    text: str


def read_config(path: str, redactor: Redactor) -> ConfigText:
    """A config file's text as written, redacted. Bad input raises UsageError."""
    # the same bytes the analysis parsed (read once per process; bounded, no FIFO or device)
    raw = config_bytes(path)
    if b"\x00" in raw[:65536]:
        raise UsageError(f"{path}: binary file, not a config; pass the DeepSpeed JSON or "
                         "Accelerate YAML file")
    text = raw.decode("utf-8-sig", errors="replace")
    lang = "json" if text.lstrip().startswith(("{", "[")) or path.endswith(".json") else "yaml"
    # Quoted as written: re-serializing would turn 2e8 into 200000000.0, drop duplicate keys
    # (the very DS301 error dsdoctor may report) and comments.
    return ConfigText(path, _quoted(text, redactor, "//" if lang == "json" else "#"), lang)


def _quoted(text: str, redactor: Redactor, comment: str) -> str:
    """The config's first lines, redacted, and a last line that says what was left out.

    An issue body holds at most 65,536 characters, and redacting a 16 MB config took a minute:
    only the quoted part is redacted, with a margin after it so that a secret across the cut
    is seen whole (redact first, cut after; docs/security.md)."""
    cut = 0
    for _ in range(MAX_QUOTED_CONFIG_LINES):
        nl = text.find("\n", cut)
        end = len(text) if nl == -1 else nl + 1
        if end > MAX_QUOTED_CONFIG_CHARS:
            break
        cut = end
        if nl == -1:
            break
    if cut >= len(text):
        return redactor.text(text)
    shown = len(text[:cut].splitlines())
    # the margin ends at a line end, or (a line of megabytes: one 10 MB string) after it anyway
    margin = text.find("\n", min(len(text), cut + _REDACT_MARGIN), cut + 2 * _REDACT_MARGIN)
    red = redactor.text(text[:margin if margin != -1 else cut + 2 * _REDACT_MARGIN])
    head = "".join(red.splitlines(keepends=True)[:shown])
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    return (head.rstrip("\n") + f"\n{comment} dsdoctor: the first {shown:,} of {total:,} lines "
            f"({len(text):,} characters) are quoted; attach the file for the rest\n")


def printed_config(report: Report | None, redactor: Redactor) -> PrintedConfig | None:
    """The config block DeepSpeed printed (``json = {...}``), read from the log as printed; else
    the engine's ``key ..... value`` dump lines."""
    if report is None:
        return None
    block = next((f for f in report.facts if f.name == "ds-config-json"), None)
    if block is not None:
        found = read_json_block_text(block.evidence.file, block.evidence.line)
        if found:
            return PrintedConfig(block.evidence.file, found[0], redactor.text(found[1]))
    items = [f for f in report.facts if f.name == "engine-config-item"]
    if items:
        first = items[0].evidence
        # DeepSpeed prints the user's JSON right after its key dump; a long one is past the scan's
        # join window (no ds-config-json fact): read it from the line after the dump.
        last = max(f.evidence.line for f in items if f.evidence.file == first.file)
        found = read_json_block_text(first.file, last + 1, search=3)
        if found:
            return PrintedConfig(first.file, found[0], redactor.text(found[1]))
        rows = [f.evidence.text.strip() for f in items if f.evidence.file == first.file]
        return PrintedConfig(first.file, first.line, redactor.text("\n".join(rows)))
    return None


def _same_file(a: str | None, b: str) -> bool:
    return a is not None and (a == b or Path(a).name == Path(b).name)


def config_md(configs: Sequence[ConfigText], printed: PrintedConfig | None,
              report: Report | None, launch: Launch) -> str:
    """The config section: as written, else as printed by the run, else the ask."""
    if configs:
        blocks = []
        for c in configs:
            notes = [f for f in (report.findings if report else ()) if _same_file(f.config_file, c.path)]
            seen: set[str] = set()
            lines = []
            for f in notes:
                key = f"{f.rule}:{f.config_line}"
                if key in seen:
                    continue
                seen.add(key)
                at = f"line {f.config_line}" if f.config_line else "the config"
                path = f" `{f.config_path}`" if f.config_path else ""
                lines.append(f"- dsdoctor, {at}{path}: {f.rule} {f.title}")
            head = f"Config `{Path(c.path).name}` (as written)"
            blocks.append(details(head, fence(c.text, c.lang)) + ("\n\n" + "\n".join(lines) if lines else ""))
        return "\n\n".join(blocks)
    if printed is not None:
        return details(f"DeepSpeed config as printed by the run (`{Path(printed.file).name}` line "
                       f"{printed.line}; no config file given)", fence(printed.text))
    arg = launch.config_arg()
    if arg:
        return (f"The config is not attached: run `dsdoctor report` again with `--config {arg}` "
                "(the config path of the launch command).")
    return ("The config is not attached and the log does not print it: run `dsdoctor report` again "
            "with `--config ds_config.json` (the file the Trainer's `--deepspeed` argument or "
            "`deepspeed.initialize(config=...)` names).")


# --------------------------------------------------------------------------------------------
# the run's state
# --------------------------------------------------------------------------------------------

def _stage_from_frames(ex: LogExcerpt | None) -> tuple[int, str] | None:
    """ZeRO stage the traceback's DeepSpeed modules prove: (stage, module)."""
    if ex is None:
        return None
    for mod in ex.deepspeed_frames:
        if mod.endswith(("zero/stage3.py", "zero/partition_parameters.py",
                         "zero/partitioned_param_coordinator.py", "zero/parameter_offload.py")):
            return 3, mod
    for mod in ex.deepspeed_frames:
        if mod.endswith("zero/stage_1_and_2.py"):
            return 2, mod  # stages 1 and 2 share this module
    return None


def _config_stage(configs: Sequence[ConfigText]) -> tuple[int, str] | None:
    for c in configs:
        if c.lang != "json":
            continue
        try:
            data = json.loads(c.text)
        except (ValueError, RecursionError):
            m = re.search(r'"stage"\s*:\s*(\d)', c.text)
            if m:
                return int(m.group(1)), Path(c.path).name
            continue
        zero = data.get("zero_optimization") if isinstance(data, dict) else None
        if isinstance(zero, dict) and isinstance(zero.get("stage"), int):
            return zero["stage"], Path(c.path).name
    return None


def _known_from_log(run: RunModel | None, name: str) -> tuple[Any, str] | None:
    known = getattr(run, name, None) if run is not None else None
    if known is None or not known.source.kind.startswith("log"):
        return None
    where = known.source.location or "the log"
    return known.value, (Path(where).name if known.source.file else where)


#: A run is said to have skipped "nearly every step" from this share of its steps on, once it
#: has done this many (a few skips while the loss scale warms up are normal).
NEARLY_ALL_SKIPPED = 0.8
MIN_STEPS_FOR_SKIP_SHARE = 5


def _skipped_steps(report: Report | None, from_banner: int | None) -> int | None:
    """Steps the fp16 loss scaler skipped: the engine's ``skipped=`` counter, else the
    ``OVERFLOW! Rank N Skipping step`` lines counted once per step (each rank prints its own)."""
    if from_banner:
        return from_banner
    sym = report.symptom("fp16-overflow") if report is not None else None
    if sym is None or not sym.count:
        return None
    return max(1, sym.count // max(1, len(sym.ranks)))


def run_state_md(report: Report | None, run: RunModel | None, ex: LogExcerpt | None,
                 configs: Sequence[ConfigText], logs: Sequence[str]) -> list[str]:
    """Bullets answering what the maintainer asks next (or asking the user precisely)."""
    out: list[str] = []
    # Stage: traceback modules first (what ran), then the config the run printed.
    frames = _stage_from_frames(ex)
    printed_stage = _known_from_log(run, "zero_stage")
    cfg_stage = _config_stage(configs)
    if frames:
        label = "ZeRO-3" if frames[0] == 3 else "ZeRO-1/2"
        out.append(f"- ZeRO stage in the log: {label} code (`{frames[1]}` in the traceback).")
        if cfg_stage and (cfg_stage[0] == 3) != (frames[0] == 3):
            out.append(f"- **Check:** the log comes from {label} code but the config says stage "
                       f"{cfg_stage[0]} (`{cfg_stage[1]}`): same run? Attach the config that run used.")
    elif printed_stage:
        out.append(f"- ZeRO stage in the log: {printed_stage[0]} (the config the run printed).")
        if cfg_stage and cfg_stage[0] != printed_stage[0]:
            out.append(f"- **Check:** the run printed ZeRO stage {printed_stage[0]} but the config "
                       f"says stage {cfg_stage[0]} (`{cfg_stage[1]}`): same run?")
    prec = _known_from_log(run, "precision")
    if prec:
        out.append(f"- Precision in the log: {prec[0]} (the config the run printed).")
    for c in (run.conflicts if run is not None else ()):
        if c.fact in ("precision", "offload_optimizer", "offload_param") and (
                c.kept.source.kind.startswith("log") or c.other.source.kind.startswith("log")):
            out.append(f"- **Check:** {c.fact.replace('_', ' ')} differs between sources: "
                       f"{c.describe()}. Same run?")
    # Progress.
    steps = run.steps_done if run is not None else None
    skipped = run.steps_skipped if run is not None else None
    if steps is not None:
        at = f"{Path(steps.source.file).name}:{steps.source.line}" if steps.source.file else "the log"
        line = f"- Steps done: {steps.value} (last step line: `{at}`)"
        n_skipped = _skipped_steps(report, skipped.value if skipped is not None else None)
        if n_skipped:
            line += f"; steps skipped by the fp16 loss scaler: {n_skipped}"
        out.append(line + ".")
        if n_skipped and steps.value and steps.value >= MIN_STEPS_FOR_SKIP_SHARE \
                and n_skipped >= NEARLY_ALL_SKIPPED * steps.value:
            share = min(100, round(100 * n_skipped / steps.value))
            out.append(f"- **Nearly every step was skipped:** {n_skipped} of {steps.value} steps "
                       f"({share}%) were skipped by the fp16 loss scaler (gradient overflow), so the "
                       "weights were hardly updated: the run did not train, whatever else it printed.")
    elif report is not None and logs:
        out.append("- Steps done: the log prints no step counter; say at which step (or during "
                   "start-up, loading, saving) it failed.")
    # Which rank's log, and a cut traceback.
    if ex is not None:
        ranks = ex.error_ranks or next((ln.ranks for ln in ex.lines if ln.ranks), ())
        rank = ranks[0] if ranks else _first_rank(report)
        who = f"rank {rank}" if rank is not None else "the first failing rank"
        if ex.has_traceback and not ex.traceback_complete:
            out.append(f"- **The traceback is cut:** attach all of {who}'s log (`{Path(ex.file).name}` "
                       "as the run wrote it, not a copy from the terminal).")
        elif rank is not None:
            out.append(f"- The first error is {who}'s (`{Path(ex.file).name}` line {ex.error_line}): "
                       f"if this excerpt is not enough, attach all of {who}'s log.")
    return out


def full_log_hint(launch: Launch) -> str | None:
    """Where the run writes its whole log, when the launch command says (DeepSpeed-Chat's step
    scripts redirect everything to ``$OUTPUT/training.log``)."""
    for c in launch.commands:
        if "DeepSpeed-Chat" not in c.text and not re.search(r"step[123]_\w+finetuning", c.text):
            continue
        argv = c.argv
        for i, a in enumerate(argv):
            name, eq, val = a.partition("=")
            if name == "--output_dir":
                out = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                if out:
                    return (f"- The whole log: DeepSpeed-Chat's step scripts write it to "
                            f"`{out.rstrip('/')}/training.log`; attach that file.")
    return None


def _first_rank(report: Report | None) -> int | None:
    if report is None:
        return None
    for s in report.symptoms:
        if s.kind != "fp16-overflow" and s.first.rank is not None:
            return s.first.rank
    return None


# --------------------------------------------------------------------------------------------
# triage
# --------------------------------------------------------------------------------------------

def triage(report: Report | None, have_log: bool) -> list[Finding]:
    """Error findings that explain the failure as the user's configuration or environment, with
    a fix. From a log the finding must rest on its lines; without one, config errors count."""
    if report is None:
        return []
    out = []
    for f in report.findings:
        if f.severity != "error" or not f.fix.strip() or f.rule in NEVER_LEAD:
            continue  # a side note never heads the body
        user_side = f.rule in USER_SIDE_RULES or f.rule.startswith(("DS2", "DS3"))
        # With a log, only a finding resting on its lines explains *this* failure.
        if user_side and (bool(f.evidence) or not have_log):
            out.append(f)
    return out


def triage_md(found: Sequence[Finding]) -> str:
    """The note at the top of the body."""
    lines = ["> [!IMPORTANT]",
             "> dsdoctor explains this failure as a configuration or environment problem with a "
             "known fix. Apply it and re-run before filing; file this issue only if the failure "
             "remains (then say what you changed)."]
    for f in found[:3]:
        lines.append(f"> - **{f.rule}** {f.title}. Fix: {f.fix.strip().splitlines()[0]}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# several nodes
# --------------------------------------------------------------------------------------------

def nodes_md(envs: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """The comparison section for two or more snapshots (None for one)."""
    if len(envs) < 2:
        return None
    diffs = node_differences(envs)
    names = [node_name(p) for p, _ in envs]
    if not diffs:
        return (f"Environment snapshots of {len(envs)} nodes ({', '.join(names)}): driver, CUDA, "
                "NCCL, torch, DeepSpeed, Transformers, Accelerate and Python versions are the same "
                "on all of them.")
    rows = ["| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, vals in diffs:
        rows.append(f"| {label} | " + " | ".join(vals[n] for n in names) + " |")
    what = ", ".join(label for label, _ in diffs)
    return ("**Finding: the nodes differ** in " + what + ". Different driver/CUDA/NCCL/torch/"
            "DeepSpeed versions between nodes are a classic cause of hangs at init and of NCCL "
            "errors; make them the same and re-run before filing.\n\n" + "\n".join(rows))


__all__ = ["ConfigText", "PrintedConfig", "USER_SIDE_RULES", "config_md", "node_differences",
           "node_name", "nodes_md", "printed_config", "read_config", "run_state_md", "full_log_hint", "triage",
           "triage_md"]
