"""Root causes, not lists: symptoms and findings grouped by the cause they share.

The fp16 collapse, the NaN loss it produced and the exit it caused are one problem, not three
findings that quote the same lines; an OOM and the launcher exit it caused are one problem; a
config lint is its own problem. Each :class:`~dsdoctor.model.Problem` says what happened once (a
sentence with the numbers), shows at most three evidence lines that no earlier problem showed,
gives the lead finding's reasoning (why) and its fix as an exact change. The lead is the finding
that best explains the run (one quoting the failure's log lines before a config lint); each other
finding's fix stays as one short ``also`` line, a note two findings share told once. Renderers only render
the problems; the grouping lives here, before rendering.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dsdoctor.diagnose.fingerprint import cause_fingerprint, cause_signature
from dsdoctor.diagnose.verdict import exception_phrase, exit_phrase
from dsdoctor.logs.tracebacks import TRACEBACK_LINE
from dsdoctor.model import Evidence, Finding, Problem, Symptom, Verdict, change_text

#: Causes, each with the symptom kinds it explains and the rule names (findings) that explain it.
#: Order = which cause claims the run's exit when several are present (the likelier killer first).
CAUSES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("hang", ("hang",), ("collective-timeout", "zero3-generate-without-synced-gpus")),
    ("gpu-oom", ("gpu-oom",), ("gpu-out-of-memory",)),
    ("cpu-oom", ("cpu-oom",), ("cpu-oom-killed", "offload-exceeds-cpu-ram")),
    ("shm-exhausted", ("shm-exhausted",), ("shared-memory-exhausted",)),
    ("disk-full", ("disk-full",), ("disk-full",)),
    ("cuda-error", ("cuda-error",), ("cuda-error",)),
    ("nccl-error", ("nccl-error",), ("nccl-error",)),
    ("checkpoint-error", ("checkpoint-error",), ("checkpoint-load-error",)),
    ("job-time-limit", ("job-time-limit",), ("job-time-limit",)),
    ("ssh-failure", ("ssh-failure",), ("ssh-launch-failure",)),
    ("op-build", ("op-build-failure",), ("op-build-failure",)),
    ("batch-size", ("batch-size-mismatch",), ("batch-size-assertion", "train-batch-size-mismatch")),
    ("offload-client-optimizer", ("offload-client-optimizer",), ("offload-with-client-optimizer",)),
    ("port-in-use", ("port-in-use",), ("port-in-use",)),
    ("stopped", ("run-stopped",), ()),
    ("config-mismatch", ("config-mismatch",), ("trainer-deepspeed-mismatch-in-log", "trainer-config-mismatch")),
    ("loss-scale", ("loss-scale-collapse", "fp16-overflow", "nan-loss", "loss-zero"),
     ("loss-scale-collapse", "nan-loss", "loss-stuck-at-zero", "fp16-overflow-warmup",
      "bf16-model-in-fp16")),
)
#: What a run prints when it ends: it belongs to the cause that ended it.
EXIT_KINDS = ("python-exception", "launcher-nonzero-exit")
EXIT_RULES = ("rank-exited-nonzero",)
#: Causes that end a run by themselves (loss-scale only when the scale collapsed: see _killer).
FATAL = tuple(cause for cause, _kinds, _names in CAUSES
              if cause not in ("config-mismatch", "loss-scale"))
EVIDENCE_PER_PROBLEM = 3
#: Config findings that restate a logged cause from the config's own arithmetic (DS309 computes
#: the batch product DS110's assertion printed): one problem, their reasoning a second ``why``.
CONFIG_WITNESSES = frozenset({"train-batch-size-mismatch"})
_SEVERITY = {"error": 0, "warning": 1, "info": 2}


@dataclass
class _Group:
    cause: str
    symptoms: list[Symptom] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def _phrase(s: Symptom) -> str:
    """A few words with the numbers for one symptom kind."""
    if s.kind == "fp16-overflow":
        hi = s.values.get("attempted_scale", {})
        lo = s.values.get("next_scale", {}) or hi
        if isinstance(hi, dict) and isinstance(lo, dict) and "max" in hi and "min" in lo:
            return f"{s.count} fp16 overflow(s), scale {_n(hi['max'])} → {_n(lo['min'])}"
        return f"{s.count} fp16 overflow(s)"
    if s.kind == "launcher-nonzero-exit":
        code = exit_phrase(s)
        return f"the launcher reported the exit ({code})" if code else "a rank exited non-zero"
    if s.kind == "python-exception":
        return exception_phrase(s)
    words = {
        "loss-scale-collapse": "scale at its minimum",
        "nan-loss": "NaN/inf loss",
        "loss-zero": "loss exactly 0.0",
        "gpu-oom": "CUDA out of memory",
        "cpu-oom": "killed or refused memory",
        "hang": "collective timeout",
        "op-build-failure": "op build failure",
        "config-mismatch": "config rejected or overridden",
        "batch-size-mismatch": "batch-size assertion",
        "offload-client-optimizer": "ZeRO-Offload refused the client optimizer",
        "port-in-use": "port already in use",
        "shm-exhausted": "shared memory (/dev/shm) exhausted",
        "disk-full": "disk or quota full",
        "cuda-error": "CUDA error",
        "nccl-error": "NCCL error",
        "checkpoint-error": "checkpoint load/convert error",
        "job-time-limit": "ended by the scheduler",
        "ssh-failure": "ssh to a node failed at launch",
        "run-stopped": "stopped by a signal (SIGTERM/SIGINT/Ctrl-C)",
        "error-line": "error-like line that no pattern knows",
    }
    if len(s.ranks) > 1 and s.count == len(s.ranks):
        # one line per rank: one event every rank printed (a collapse, a timeout), not N events
        return f"{words.get(s.kind, s.kind)} on {len(s.ranks)} ranks (line {s.first.line})"
    where = f"from line {s.first.line}" if s.count > 1 else f"line {s.first.line}"
    return f"{words.get(s.kind, s.kind)} {s.count}× ({where})"


def _n(v: object) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _cause_of_finding(f: Finding, present: set[str],
                      exit_lines: frozenset[tuple[str, int]] = frozenset()) -> str:
    """The cause a finding explains, when that cause's symptoms are in the log; else its own.

    A finding that quotes the exception a rank died on (DS216 quotes ZeRO's assertion) explains
    the exit: it joins that problem instead of telling the same line twice."""
    for cause, kinds, names in CAUSES:
        if f.name in names and present & set(kinds):
            return cause
    if f.name in EXIT_RULES or any((e.file, e.line) in exit_lines for e in f.evidence):
        return "exit"
    return f"rule:{f.rule}:{f.name}"


def _killer(groups: Mapping[str, _Group]) -> str | None:
    """The cause that ended the run, to which the exception and exit lines belong."""
    for cause in FATAL:
        if cause in groups:
            return cause
    ls = groups.get("loss-scale")
    if ls is not None and ({s.kind for s in ls.symptoms} & {"loss-scale-collapse"}
                           or any(f.name == "loss-scale-collapse" for f in ls.findings)):
        return "loss-scale"
    if "config-mismatch" in groups:
        return "config-mismatch"
    return None


#: Rules whose finding is a side note, never what a report leads with: DS314 (a ZeRO-3 save
#: without the 16-bit gather) is true of most ZeRO-3 configs and explains no failure.
NEVER_LEAD = frozenset({"DS314"})


def _log_lines(g: _Group) -> set[str]:
    """The log files whose lines show this cause's symptoms (what a finding must quote to be
    tied to the run's failure)."""
    return {e.file for s in g.symptoms for e in s.evidence}


def _rank(g: _Group) -> list[Finding]:
    """The group's findings, the one that best explains the run first: a finding that quotes the
    log lines of the failure outranks one read from the config or script alone (a lint), then
    the more severe, then the earlier; a NEVER_LEAD finding only when nothing else is there."""
    logs = _log_lines(g)
    return [f for _i, f in sorted(enumerate(g.findings), key=lambda t: (
        not any(e.file in logs for e in t[1].evidence), _SEVERITY.get(t[1].severity, 9),
        t[1].rule in NEVER_LEAD, t[0]))]


def _side_note(g: _Group) -> bool:
    """A problem made only of NEVER_LEAD findings: listed after the others of its severity."""
    return not g.symptoms and bool(g.findings) and all(f.rule in NEVER_LEAD for f in g.findings)


def _pick_evidence(g: _Group, lead: Finding | None, shown: set[tuple[str, int]]
                   ) -> tuple[Evidence, ...]:
    """At most three lines none of which an earlier problem showed: one per symptom kind first."""
    out: list[Evidence] = []
    # The defining line, then the exit it caused, then the rest: the story in three lines.
    order = {"launcher-nonzero-exit": 1, "python-exception": 3}
    ranked = sorted(enumerate(g.symptoms), key=lambda t: (order.get(t[1].kind, 0 if t[0] == 0
                                                                    else 2), t[0]))
    # A traceback's first line says only that one exists: shown when it is all a symptom has
    # (a cut traceback), never in place of a line that says what happened.
    pools: list[Iterable[Evidence]] = [
        [e for e in s.evidence if not TRACEBACK_LINE.search(e.text)] for _i, s in ranked]
    if not any(pools):
        pools = [s.evidence for _i, s in ranked]
    if lead is not None:
        pools.append(lead.evidence)
    for pool in pools:  # round one: the strongest line of each symptom kind
        for ev in pool:
            if (ev.file, ev.line) not in shown:
                out.append(ev)
                shown.add((ev.file, ev.line))
                break
        if len(out) >= EVIDENCE_PER_PROBLEM:
            return tuple(out)
    for pool in pools:  # round two: fill up with the next lines
        for ev in pool:
            if len(out) >= EVIDENCE_PER_PROBLEM:
                return tuple(out)
            if (ev.file, ev.line) not in shown:
                out.append(ev)
                shown.add((ev.file, ev.line))
    return tuple(out)


def _config_where(f: Finding) -> str | None:
    """``ds_config.json:25 fp16.initial_scale_power``, or the bare key when no file says it."""
    if not f.config_path:
        return None
    if not f.config_file:
        return f.config_path
    where = f"{f.config_file}:{f.config_line}" if f.config_line else f.config_file
    return f"{where} {f.config_path}"


def _label(g: _Group) -> str:
    """The cause's name as printed: the rule name for a lint, what went wrong for numerics."""
    if g.cause.startswith("rule:"):
        return g.cause.split(":")[-1]
    if g.cause == "loss-scale":
        kinds = {s.kind for s in g.symptoms}
        if kinds & {"loss-scale-collapse", "fp16-overflow"} or any(
                f.name in ("loss-scale-collapse", "fp16-overflow-warmup") for f in g.findings):
            return "loss-scale"
        return "nan-loss" if "nan-loss" in kinds else "loss-zero" if "loss-zero" in kinds else (
            "loss-scale")
    return g.cause


#: The most characters of another finding's fix an ``also:`` line shows (its first sentence).
ALSO_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def _first_sentence(text: str) -> str:
    """The first sentence of a fix; past ALSO_CHARS, its clauses (``;``) that fit, else its
    words that fit and an ellipsis."""
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    if len(first) <= ALSO_CHARS:
        return first
    clause = first.rfind("; ", 0, ALSO_CHARS)
    if clause >= ALSO_CHARS // 3:
        return first[:clause] + " …"
    return first[:ALSO_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def _also(ranked: Sequence[Finding], fixer: Finding | None) -> tuple[str, ...]:
    """One short line per other finding: its fix (first sentence, and the exact change), or its
    title when it has no fix; nothing when its fix is the problem's; a note two findings share is
    printed once, naming both."""
    notes: dict[str, list[str]] = {}
    told = {_same_text(fixer.fix)} if fixer is not None and fixer.fix else set()
    # the lead rule again at two or more other keys (DS310 at each "auto" key): one line naming
    # the keys, not the same sentence once per key (one other key keeps its own sentence)
    again = [f.config_path for f in ranked if f is not fixer and fixer is not None
             and f.rule == fixer.rule and f.config_path and f.config_path != fixer.config_path]
    if len(set(again)) < 2:
        again = []
    if again and fixer is not None:
        keys = list(dict.fromkeys(again))
        notes[f"the same at {', '.join(keys)}"] = [f"{fixer.rule} {fixer.name}"]
    for f in ranked:
        if f is fixer or (fixer is not None and f.rule == fixer.rule and f.config_path in again):
            continue
        if fixer is not None and (f.name in CONFIG_WITNESSES or (
                f.fix_change is not None and f.fix_change == fixer.fix_change)):
            continue  # the same arithmetic, or the very change printed above: told once
        change = change_text(f.fix_change)
        if f.fix and _same_text(f.fix) not in told:
            note = _first_sentence(f.fix) + (f" (change: {change})" if change else "")
        elif change and f.fix_change != (fixer.fix_change if fixer is not None else None):
            note = f"change: {change}"
        elif f.fix:
            continue  # its fix is the one printed above
        else:
            note = f.title
        names = notes.setdefault(note, [])
        if f"{f.rule} {f.name}" not in names:
            names.append(f"{f.rule} {f.name}")
    return tuple(f"{', '.join(names)}: {note}" for note, names in notes.items())


def _same_text(text: str) -> str:
    return " ".join(text.split()).rstrip(".").casefold()
#: Which exit line names a failure better: the exception beats the launcher's exit code.
_DEFINING_EXIT = ("python-exception", "launcher-nonzero-exit")
_CAUSE_NAMES = {cause: names for cause, _kinds, names in CAUSES}


def _defining_line(g: _Group) -> Evidence | None:
    """The line that names the cause: the strongest line of its defining symptom (the cause's
    own kind first, else the exception, else the exit), a traceback header only when it is all
    there is. Chosen from the symptoms, not from what the report shows, so that the same failure
    gives the same line whichever problem was told first."""
    own = [s for s in g.symptoms if s.kind not in EXIT_KINDS]
    exits = sorted((s for s in g.symptoms if s.kind in EXIT_KINDS),
                   key=lambda s: _DEFINING_EXIT.index(s.kind))
    for s in own + exits:
        named = [e for e in s.evidence if not TRACEBACK_LINE.search(e.text)]
        if named:
            return named[0]
    return next((s.first for s in own + exits), None)


def identity(g: _Group, lead: Finding | None) -> tuple[str, str]:
    """(key, signature) of a cause's fingerprint: the rule code that explains it (a cause's first
    listed rule when it fired, else the lead finding's; ``cause:<name>`` when none) and the
    normalized defining line, or for a finding without log lines (a config lint) its config key."""
    codes = {f.name: f.rule for f in g.findings}
    primary = next((codes[n] for n in _CAUSE_NAMES.get(g.cause, ()) if n in codes), None)
    key = primary or (lead.rule if lead is not None else f"cause:{_label(g)}")
    line = _defining_line(g)
    if line is not None:
        return key, cause_signature(line.text)
    if lead is not None:
        return key, lead.config_path or ""
    return key, ""


def _problem(g: _Group, verdict: Verdict | None, shown: set[tuple[str, int]],
             decides: bool = False) -> Problem:
    findings = _rank(g)
    lead = findings[0] if findings else None
    fixer = next((f for f in findings if f.fix or f.fix_change), lead)
    own = [s for s in g.symptoms if s.kind not in EXIT_KINDS]
    if own:  # the exit belongs to this cause: its exception text is the cause's, say the code only
        numbers = "; ".join([_phrase(s) for s in own] + [
            exit_phrase(s) for s in g.symptoms if s.kind == "launcher-nonzero-exit"
            and exit_phrase(s)])
    else:
        numbers = "; ".join(_phrase(s) for s in g.symptoms)
    if lead is not None:
        what = f"{lead.title}: {numbers}" if numbers else lead.title
        severity = min((f.severity for f in findings), key=lambda s: _SEVERITY.get(s, 9))
    else:
        what = numbers[0].upper() + numbers[1:] if numbers else g.cause
        severity = "warning"
    if decides and verdict is not None and verdict.is_error and g.symptoms:
        severity = "error"  # the cause of a failed/hung/not-learning run is an error, whatever
        # severity the rule's advice carries (DS107 warns: a timeout may be a slow step)
    why: tuple[str, ...] = (lead.message,) if lead is not None and lead.message else ()
    why += tuple(f.message for f in findings if f is not lead and f.name in CONFIG_WITNESSES
                 and f.message and f.message not in why)
    rules: list[str] = []
    for f in findings:
        if f.rule not in rules:
            rules.append(f.rule)
    key, signature = identity(g, lead)
    return Problem(
        fingerprint=cause_fingerprint(key, signature), signature=signature,
        cause=_label(g),
        severity=severity, what=what, evidence=_pick_evidence(g, lead, shown), why=why,
        also=_also(findings, fixer),
        fix=fixer.fix if fixer is not None else "",
        fix_change=fixer.fix_change if fixer is not None else None,
        config_where=_config_where(fixer) if fixer is not None else None,
        rules=tuple(rules), symptoms=tuple(s.kind for s in g.symptoms))


def _fold_requoted(groups: dict[str, _Group]) -> None:
    """A bare symptom (no finding of its own) that only re-reads lines another cause already
    quotes belongs to that cause: /dev/shm's "No space left on device" is shared memory, not a
    second (disk) problem."""
    for cause, g in list(groups.items()):
        if g.findings or not g.symptoms:
            continue
        lines = {(e.file, e.line) for s in g.symptoms for e in s.evidence}
        for other in groups.values():
            if other is g or not other.findings:
                continue
            quoted = ({(e.file, e.line) for s in other.symptoms for e in s.evidence}
                      | {(e.file, e.line) for f in other.findings for e in f.evidence})
            if lines <= quoted:
                other.symptoms.extend(g.symptoms)
                del groups[cause]
                break


def group(symptoms: Sequence[Symptom], findings: Sequence[Finding],
          verdict: Verdict | None = None) -> tuple[Problem, ...]:
    """Problems, the one that decided the verdict first, then by severity; each finding once."""
    if verdict is None or verdict.decided_by != "error-line":
        # the generic layer's lines are told only when nothing more specific explains the run,
        # or when the verdict rests on one of them (a failure no pattern knows)
        symptoms = [s for s in symptoms if s.kind != "error-line"]
    present = {s.kind for s in symptoms}
    groups: dict[str, _Group] = {}
    known = {k for _c, kinds, _n in CAUSES for k in kinds} | set(EXIT_KINDS)
    by_kind = {s.kind: s for s in symptoms}
    for cause, kinds, _names in CAUSES:
        for kind in kinds:  # in the cause's order: the defining symptom first
            if kind in by_kind:
                groups.setdefault(cause, _Group(cause)).symptoms.append(by_kind[kind])
    for s in symptoms:  # a kind no cause lists yet is still told, as a problem of its own
        if s.kind not in known:
            groups.setdefault(s.kind, _Group(s.kind)).symptoms.append(s)
    exit_lines = frozenset((e.file, e.line) for s in symptoms if s.kind == "python-exception"
                           for e in s.evidence)
    for f in findings:
        cause = _cause_of_finding(f, present, exit_lines)
        groups.setdefault(cause, _Group(cause)).findings.append(f)
    exits = [s for s in symptoms if s.kind in EXIT_KINDS]
    killer = _killer(groups)
    target = groups[killer] if killer is not None else groups.setdefault("exit", _Group("exit"))
    if exits or "exit" in groups:
        target.symptoms.extend(exits)
        if killer is not None and "exit" in groups:
            target.findings.extend(groups.pop("exit").findings)
    if "exit" in groups and not groups["exit"].symptoms and not groups["exit"].findings:
        del groups["exit"]
    _fold_requoted(groups)
    first = killer or next((c for c in ("exit", "loss-scale") if c in groups), None)
    if verdict is not None and verdict.decided_by == "error-line" and "error-line" in groups:
        first = "error-line"  # what ended the run is the line no pattern knows
    ordered = sorted(groups.values(), key=lambda g: (
        g.cause != first,
        min((_SEVERITY.get(f.severity, 9) for f in g.findings), default=0 if g.symptoms else 9),
        _side_note(g)))
    shown: set[tuple[str, int]] = set()
    out = [_problem(g, verdict, shown, decides=g.cause == first) for g in ordered]
    if verdict is not None and verdict.is_error and not any(p.symptoms for p in out):
        # The verdict rests on the run model alone (e.g. most steps skipped, no overflow line
        # kept): tell it as the first problem, so that a failed run never shows none.
        what = verdict.sentence.split(": ", 1)[-1]
        ev = tuple(e for e in verdict.evidence if (e.file, e.line) not in shown)
        signature = cause_signature(verdict.evidence[0].text) if verdict.evidence else ""
        out.insert(0, Problem(cause=verdict.fate, severity="error", what=what[:1].upper() + what[1:],
                              evidence=ev[:EVIDENCE_PER_PROBLEM], signature=signature,
                              fingerprint=cause_fingerprint(f"cause:{verdict.fate}", signature)))
    return tuple(out)


__all__ = ["CAUSES", "NEVER_LEAD", "group"]
