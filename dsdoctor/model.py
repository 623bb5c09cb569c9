"""Domain values shared by every stage: evidence, symptoms, timeline, findings, the report.

Data flows one way (see docs/design.md): readers and formats produce symptoms, timeline points
and log facts; the rules engine turns them (plus config, model, env, script facts) into findings;
renderers only render a :class:`Report`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsdoctor.diagnose.ranks import RankTable

SCHEMA_VERSION = 2  # 2: retriable, steps_lost, per-problem fingerprint (issue 22)

#: Symptom kinds, as the issue tracker names them. Formats may only emit these (the loader checks).
SYMPTOM_KINDS: tuple[str, ...] = (
    "fp16-overflow",
    "loss-scale-collapse",
    "nan-loss",
    "loss-zero",
    "gpu-oom",
    "cpu-oom",
    "hang",
    "op-build-failure",
    "config-mismatch",
    "batch-size-mismatch",
    "offload-client-optimizer",
    "port-in-use",
    "launcher-nonzero-exit",
    "python-exception",
    # failures that end a run (issue 10)
    "nccl-error",
    "cuda-error",
    "shm-exhausted",
    "disk-full",
    "job-time-limit",
    "checkpoint-error",
    "ssh-failure",  # a multi-node launch could not ssh to a node (pdsh, DeepSpeed's runner)
    # issue 19: the run or its launcher received SIGTERM/SIGINT/SIGHUP (Ctrl-C, scancel, kubelet)
    "run-stopped",
    # issue 19: an error-like line that no specific pattern knows (formats/generic-errors.yaml)
    "error-line",
)

#: Facts that only mark where something is (tracebacks' first and last lines, for DS121): rules
#: read them, reports leave them out (they state nothing about the run).
MARKER_FACTS: tuple[str, ...] = ("traceback-start", "traceback-frame", "traceback-end", "run-started",
                                 "run-finished", "launcher-teardown", "nccl-timeout-location")

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")

#: What became of the run (see diagnose/verdict.py). ERROR_FATES exit 1.
FATES: tuple[str, ...] = ("failed", "hung", "killed", "stopped", "not-learning", "recovered",
                          "healthy", "ended-mid-run", "unknown")
ERROR_FATES: tuple[str, ...] = ("failed", "hung", "killed", "stopped", "not-learning")

#: ``--exit-code=fate``: a code per fate for scripts (docs/machine-output.md). 0: the run did not
#: fail and no finding is an error; 1: it did not fail but a finding is an error (a config lint);
#: 2 is bad usage, as in every mode.
FATE_EXIT_CODES: dict[str, int] = {"failed": 3, "hung": 4, "killed": 5, "stopped": 6,
                                   "not-learning": 7}
EXIT_CODE_MODES: tuple[str, ...] = ("any", "fate")


def combined_exit_code(codes: list[int], mode: str = "any") -> int:
    """One exit code for several analyses: in ``fate`` mode the most telling fate (failed before
    hung before killed before stopped before not-learning: the lowest fate code), else the worst."""
    fates = [c for c in codes if c >= 3]
    if mode == "fate" and fates:
        return min(fates)
    return max(codes, default=0)


#: Prefilter engines (see prefilter.py); here so that the CLI can offer them without importing it.
ENGINES: tuple[str, ...] = ("auto", "hyperscan", "python")


def json_number(v: Any) -> Any:
    """NaN and infinities are not JSON: write them as strings a reader recognizes."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


@dataclass(frozen=True)
class Evidence:
    """One log line that proves something: where it is and what it says."""

    file: str
    line: int  # 1-based physical line number (counted by b"\n")
    text: str  # normalized text: ANSI removed, rank prefix and markdown quote peeled, capped length
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text, "rank": self.rank}

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Symptom:
    """What the log shows (a fact, not a verdict), aggregated over every occurrence."""

    kind: str
    count: int
    evidence: tuple[Evidence, ...]  # strongest first, capped (first, last, strongest, one per rank)
    first: Evidence
    last: Evidence
    ranks: tuple[int, ...] = ()
    files: tuple[str, ...] = ()
    patterns: dict[str, int] = field(default_factory=dict)  # pattern id -> count
    # Extracted values, aggregated: numeric field -> {"first","last","min","max"};
    # text field -> list of distinct values (at most 10, in order of first appearance).
    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "count": self.count,
            "ranks": list(self.ranks),
            "files": list(self.files),
            "first": self.first.to_dict(),
            "last": self.last.to_dict(),
            "evidence": [e.to_dict() for e in self.evidence],
            "patterns": dict(self.patterns),
            "values": self.values,
        }


@dataclass(frozen=True)
class TimelinePoint:
    """One sample of the run's progress (step lines, Trainer dicts, tqdm bars)."""

    file: str
    line: int
    source: str  # pattern id that produced it
    step: int | None = None
    loss: float | None = None
    grad_norm: float | None = None
    loss_scale: float | None = None
    skipped: int | None = None
    lr: float | None = None
    throughput: float | None = None  # samples/s or it/s as printed
    epoch: float | None = None
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies, and a report can hold thousands of points
        return {k: getattr(self, k) for k in _TIMELINE_KEYS if getattr(self, k) is not None}


_TIMELINE_KEYS = ("file", "line", "source", "step", "loss", "grad_norm", "loss_scale", "skipped",
                  "lr", "throughput", "epoch", "rank")


@dataclass(frozen=True)
class Fact:
    """Something the log states about the run (launch command, world size, engine config, ...).

    ``name`` is a stable id such as ``launch-cmd``, ``ds-config-json``, ``engine-config-item``,
    ``world-size``, ``gpu-name``, ``num-elems``, ``trainable-params``, ``package-version``.
    """

    name: str
    values: dict[str, Any]
    evidence: Evidence


@dataclass(frozen=True)
class Finding:
    """A diagnosis produced by a rule: why, with the numbers, and the concrete change."""

    rule: str  # stable code, e.g. "DS102"
    name: str  # problem-naming name, e.g. "loss-scale-collapse"
    severity: str  # error | warning | info
    title: str
    message: str
    fix: str = ""
    config_path: str | None = None  # dotted path in the config, or CLI argument name without dashes
    config_line: int | None = None
    config_file: str | None = None
    evidence: tuple[Evidence, ...] = ()
    references: tuple[str, ...] = ()
    fix_change: dict[str, Any] | None = None  # machine-applicable {"path","old","new"} where safe

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "fix": self.fix,
            "config_path": self.config_path,
            "config_line": self.config_line,
            "config_file": self.config_file,
            "evidence": [e.to_dict() for e in self.evidence],
            "references": list(self.references),
        }
        if self.fix_change is not None:
            d["fix_change"] = self.fix_change
        return d


@dataclass(frozen=True)
class Verdict:
    """The run's fate in one sentence with its numbers, and the lines that prove it."""

    fate: str  # one of FATES
    sentence: str  # "failed: rank 1 was killed (exit -9) after step 40"
    evidence: tuple[Evidence, ...] = ()
    steps_done: int | None = None
    steps_skipped: int | None = None
    # the stable id of the line that decided the fate, when one line did (diagnose/fingerprint.py)
    fingerprint: str | None = None
    # "error-line" when the generic layer's lines decided it (a failure no pattern knows)
    decided_by: str | None = None
    # whether a retry of the job can help (diagnose/retry.py): yes | no | unknown, and why
    retriable: str | None = None
    retriable_reason: str = ""
    # the step of the last checkpoint save the log shows, and the steps done since (lost on a retry)
    checkpoint_step: int | None = None
    steps_lost: int | None = None
    # a pre-flight check (no log): how many error findings it has (None: not a pre-flight)
    preflight_errors: int | None = None

    @property
    def is_error(self) -> bool:
        """The run's fate is a failure (a pre-flight's errors are not a fate: see ``error``)."""
        return self.fate in ERROR_FATES

    @property
    def error(self) -> bool:
        """The analysis says something is wrong: a failed fate, or a pre-flight with errors."""
        return self.is_error or bool(self.preflight_errors)

    def to_dict(self) -> dict[str, Any]:
        out = {"fate": self.fate, "error": self.error, "sentence": self.sentence,
               "evidence": [e.to_dict() for e in self.evidence],
               "steps_done": self.steps_done, "steps_skipped": self.steps_skipped}
        if self.fingerprint is not None:
            out["fingerprint"] = self.fingerprint
        if self.decided_by is not None:
            out["decided_by"] = self.decided_by
        if self.retriable is not None:
            out.update(retriable=self.retriable, retriable_reason=self.retriable_reason,
                       checkpoint_step=self.checkpoint_step, steps_lost=self.steps_lost)
        return out


def change_text(change: dict[str, Any] | None) -> str:
    """An exact config change, ``fp16.initial_scale_power: 16 → 32``, from a fix_change."""
    if not change or not change.get("path"):
        return ""
    op, path = change.get("op", "set"), change["path"]
    if op == "rename":
        return f"rename {path} → {change.get('new_path')}"
    if op == "delete":
        return f"delete {path} (now {json.dumps(change.get('old'))})"
    return f"{path}: {json.dumps(change.get('old'))} → {json.dumps(change.get('new'))}"



@dataclass(frozen=True)
class Problem:
    """One root cause: the symptoms and findings it explains, told once (diagnose/problems.py)."""

    cause: str  # stable id of the cause, e.g. "loss-scale", "gpu-oom", or a rule name for lints
    severity: str  # the worst severity among its findings (or the verdict's, for a bare symptom)
    what: str  # what happened: one sentence with the numbers
    evidence: tuple[Evidence, ...] = ()  # at most three lines, none shown by an earlier problem
    why: tuple[str, ...] = ()  # the cross-checks: the lead finding's reasoning
    fix: str = ""
    fix_change: dict[str, Any] | None = None  # {"path","old","new"} of the lead finding
    config_where: str | None = None  # "ds_config.json:25 fp16.initial_scale_power"
    rules: tuple[str, ...] = ()  # codes of the findings it groups, the lead first
    symptoms: tuple[str, ...] = ()  # symptom kinds it explains
    also: tuple[str, ...] = ()  # the other findings' fixes, one short line each, each note once
    # the root cause's stable id: rule code + normalized signature (diagnose/fingerprint.py)
    fingerprint: str = ""
    signature: str = ""  # what was hashed besides the key: the normalized line or config key
    # whether a retry can help with this cause (diagnose/retry.py): yes | no | unknown, and why
    retriable: str = "unknown"
    retriable_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "severity": self.severity, "what": self.what,
                "evidence": [e.to_dict() for e in self.evidence], "why": list(self.why),
                "fix": self.fix, "fix_change": self.fix_change, "config": self.config_where,
                "also": list(self.also), "rules": list(self.rules),
                "symptoms": list(self.symptoms),
                "fingerprint": self.fingerprint, "signature": self.signature,
                "retriable": self.retriable, "retriable_reason": self.retriable_reason}


@dataclass(frozen=True)
class FileSummary:
    path: str
    lines: int
    bytes: int
    compressed: bool = False


@dataclass(frozen=True)
class Report:
    """Everything a renderer needs. Built once, never mutated, never re-queried."""

    files: tuple[FileSummary, ...]
    symptoms: tuple[Symptom, ...]
    findings: tuple[Finding, ...] = ()
    timeline: tuple[TimelinePoint, ...] = ()
    facts: tuple[Fact, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)  # configs/model/env/scripts used, engine
    notes: tuple[str, ...] = ()  # e.g. "no --env given: CPU RAM rules used the log only"
    verdict: Verdict | None = None  # None only for a report built without the diagnosis step
    problems: tuple[Problem, ...] = ()  # findings and symptoms grouped by cause, worst first
    # every rank the log shows, grouped by state, and a hang's culprit (diagnose/ranks.py);
    # None when the log shows fewer than two ranks
    ranks: RankTable | None = None

    @property
    def exit_code(self) -> int:
        """1 when the run failed, hung or is not learning, or an error finding (a config lint)."""
        if self.verdict is not None and self.verdict.is_error:
            return 1
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def exit_code_for(self, mode: str = "any") -> int:
        """:attr:`exit_code`, or in ``fate`` mode the fate's own code (:data:`FATE_EXIT_CODES`)."""
        if mode == "fate" and self.verdict is not None and self.verdict.fate in FATE_EXIT_CODES:
            return FATE_EXIT_CODES[self.verdict.fate]
        return self.exit_code

    def symptom(self, kind: str) -> Symptom | None:
        for s in self.symptoms:
            if s.kind == kind:
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
            "ranks": self.ranks.to_dict() if self.ranks is not None else None,
            "files": [asdict(f) for f in self.files],
            "inputs": self.inputs,
            "symptoms": [s.to_dict() for s in self.symptoms],
            "findings": [f.to_dict() for f in self.findings],
            "problems": [p.to_dict() for p in self.problems],
            "timeline": [p.to_dict() for p in self.timeline],
            "facts": [
                {"name": f.name, "values": f.values, "evidence": f.evidence.to_dict()}
                for f in self.facts
            ],
            "notes": list(self.notes),
        }
