"""Build a GitHub issue body (DeepSpeed / Transformers / Accelerate template) from an analysis.

The body follows each project's own bug template: DeepSpeed's ``training_bug_report.md``
(bold section headings) or the Markdown that Transformers'/Accelerate's ``bug-report.yml``
issue forms produce (``### Label`` sections). It is filled from the Report and the run model,
the first error (:mod:`.issue_log`), the launch commands (:mod:`.issue_launch`), the config as
written or as printed and the maintainer's next questions (:mod:`.issue_asks`) and the
environment snapshots. Four kinds of report: a failed training run, a config alone, an
install/op-build log, and environment snapshots alone (version questions). Every piece of text
goes through one :class:`~dsdoctor.redact.Redactor`, and the finished body is redacted once more
as a safety net.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdoctor import __version__
from dsdoctor.diagnose.problems import NEVER_LEAD
from dsdoctor.errors import UsageError
from dsdoctor.facts.run import RunModel
from dsdoctor.model import Finding, Report
from dsdoctor.redact import Redactor
from dsdoctor.render.env import (
    cuda_line,
    details,
    fence,
    gpu_summary,
    interconnect_summary,
    ops_rows,
    os_line,
    render_markdown,
    shape,
)
from dsdoctor.render.issue_asks import (
    ConfigText,
    PrintedConfig,
    config_md,
    full_log_hint,
    nodes_md,
    printed_config,
    read_config,
    run_state_md,
    triage,
    triage_md,
)
from dsdoctor.render.issue_launch import (
    Launch,
    LaunchCommand,
    gather_launch,
    launch_md,
    launcher_context,
    read_shell_script,
)
from dsdoctor.render.issue_log import ExcerptLine, LogExcerpt, first_error_excerpt
from dsdoctor.watch.hang import HANG_RULE, STACKS_FILE

#: target -> (GitHub repository, template style, title prefix)
TARGETS: dict[str, tuple[str, str, str]] = {
    "deepspeed": ("deepspeedai/DeepSpeed", "deepspeed", "[BUG] "),
    "transformers": ("huggingface/transformers", "hf-form", ""),
    "accelerate": ("huggingface/accelerate", "hf-form", ""),
}
#: What the report is about: a failed run's log, a config alone, an install/op-build log, or
#: environment snapshots alone (a question about versions).
KINDS = ("training", "config", "install", "env")

TODO = "<!-- TODO: {} -->"


@dataclass(frozen=True)
class Issue:
    """A finished issue: where it goes, its title and its Markdown body."""

    target: str
    repo: str
    title: str
    body: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    triage: tuple[str, ...] = ()  # rule codes that explain the failure as the user's to fix


def _excerpt_md(ex: LogExcerpt, name: str, red: Redactor) -> str:
    width = len(str(ex.lines[-1].line)) if ex.lines else 1
    rows = []
    for ln in ex.lines:
        tail = f"   [same line from ranks {','.join(map(str, ln.ranks))}]" if len(ln.ranks) > 1 else ""
        rows.append(f"{ln.line:>{width}} | {ln.text}{tail}")
    head = f"first error in `{name}` (lines {ex.lines[0].line}-{ex.lines[-1].line}"
    if ex.duplicates_dropped:
        head += f"; {ex.duplicates_dropped} identical lines from other ranks dropped"
    head += ")"
    out = details(f"Log excerpt: {head}", fence("\n".join(rows)))
    if ex.paste_note:
        out += f"\n\n{ex.paste_note}"
    if ex.others:
        same = [Path(f).name for f, _, e in ex.others if e == ex.error]
        diff = [(Path(f).name, n, e) for f, n, e in ex.others if e != ex.error]
        if same:
            out += f"\n\nThe same error is also the first error in: {', '.join('`' + x + '`' for x in same)}."
        if diff:
            out += "\n\nFirst errors of the other log files:\n" + "\n".join(
                f"- `{name}` line {n}: `{red.cut(e, 200).replace('`', chr(39))}`" for name, n, e in diff)
    return out




def _loc(e: Any) -> str:
    """``file:line`` with the file's base name (the excerpt names the file; paths add noise)."""
    return f"{Path(e.file).name}:{e.line}"


def _findings_md(report: Report | None, red: Redactor) -> list[str]:
    if report is None:
        return []
    out: list[str] = []
    for f in lead_first(report.findings):
        logged = [e for e in f.evidence if e.file != STACKS_FILE]
        loc = f" (evidence: {', '.join(_loc(e) for e in logged[:3])})" if logged else ""
        cfg = f" [config `{f.config_path}`]" if f.config_path else ""
        line = f"- **{f.rule} {f.name}** ({f.severity}): {f.title}{cfg}{loc}"
        if f.fix:
            line += f"  \n  Suggested fix: {f.fix.strip().splitlines()[0]}"
        if f.rule == HANG_RULE and f.evidence:
            # what watch saw live (the last progress line, the ranks' stacks): no excerpt of the
            # log holds it, and it was never through the analysis's redaction
            shown = "\n".join("  " + red.cut(e.text if e.file == STACKS_FILE
                                              else f"{_loc(e)}: {e.text}", 400).replace("`", "'")
                              for e in f.evidence)
            line += f"\n\n  ```text\n{shown}\n  ```"
        out.append(line)
    if not out:
        for s in report.symptoms:
            ranks = f", ranks {','.join(map(str, s.ranks[:16]))}" if s.ranks else ""
            out.append(f"- `{s.kind}`: {s.count} occurrence(s), first at {_loc(s.first)}{ranks}: "
                       f"`{red.cut(s.first.text, 200).replace('`', chr(39))}`")
    return out


def _ranks_md(report: Report | None, red: Redactor) -> str:
    """Which rank made the others wait (the culprit's sentence) and the per-rank table, grouped
    by state (diagnose/ranks.py): the question a maintainer asks first about a hang; nothing
    when every rank ended alike and none stands out."""
    table = report.ranks if report is not None else None
    if table is None or (len(table.groups) < 2 and table.culprit is None):
        return ""
    for host in dict.fromkeys(r.host for r in table.ranks if r.host):
        red.add_host(host)  # the launcher's rank mapping names the nodes: hidden like any host
    said = f": {red.text(table.culprit.sentence)}." if table.culprit is not None else ":"
    rows = "\n".join(red.text(line).replace("`", "'") for line in table.lines())
    return f"**Ranks** ({len(table.ranks)}, by state){said}\n\n```text\n{rows}\n```"


def _pkg_versions(env: dict[str, Any] | None) -> dict[str, str | None]:
    return dict((env or {}).get("packages") or {})


def _config_summary(configs: Sequence[ConfigText]) -> str:
    for c in configs:
        if c.lang != "json":
            continue
        try:
            d = json.loads(c.text)
        except (ValueError, RecursionError):
            continue
        if not isinstance(d, dict):
            continue
        bits = []
        zero = d.get("zero_optimization")
        if isinstance(zero, dict) and "stage" in zero:
            bits.append(f"ZeRO stage {zero['stage']}")
            for k in ("offload_optimizer", "offload_param"):
                dev = zero.get(k, {}).get("device") if isinstance(zero.get(k), dict) else None
                if dev and dev != "none":
                    bits.append(f"{k.replace('_', ' ')} to {dev}")
        for prec in ("bf16", "fp16"):
            if isinstance(d.get(prec), dict) and d[prec].get("enabled") in (True, "auto"):
                bits.append(prec)
        if bits:
            return ", ".join(bits)
    return ""


def lead_first(findings: Sequence[Finding]) -> list[Finding]:
    """The findings in the order the body tells them: a side note (NEVER_LEAD, e.g. DS314 on any
    ZeRO-3 config) after every other finding, so that it never headlines the report."""
    return sorted(findings, key=lambda f: f.rule in NEVER_LEAD)


#: Parentheses of a verdict's sentence that locate rather than name: "(line 180)",
#: "(from line 4)", "(2 watchdog/timeout line(s), first at line 4)".
_WHERE_RE = re.compile(r"\s*\((?:from )?lines? \d+\)|\s*\(\d+ [\w/]+ line\(s\), first at line \d+\)")
_FATE_LABELS = {"hung": "Hang: ", "not-learning": "Not learning: "}


def cause_title(report: Report | None) -> str:
    """The cause the analysis found, as a title: the verdict's first clause ("hung: an
    _REDUCE_SCATTER_BASE (SeqNum 4210) timed out after 600 s on rank 6") without where it was
    seen; empty when no verdict names one (a healthy run, or a failure only an unknown error
    line decided)."""
    v = report.verdict if report is not None else None
    if v is None or not v.is_error or v.decided_by == "error-line" or not v.sentence:
        return ""
    fate, _, rest = v.sentence.partition(": ")
    if not rest:
        return ""
    rest = _WHERE_RE.sub("", rest)
    rest = re.split(r"; |\. (?=[A-Z])", rest, maxsplit=1)[0].strip().rstrip(".")
    # "rank 1 never entered all_reduce: it printed no timeout, ...": the clause before a colon
    # (outside parentheses) names the cause, the rest explains it
    for m in re.finditer(r": ", rest):
        head = rest[:m.start()]
        if head.count("(") == head.count(")") and len(head.split()) >= 4:
            rest = head
            break
    if not rest:
        return ""
    label = _FATE_LABELS.get(fate, "")
    return label + rest if label else rest[0].upper() + rest[1:]


def _title(report: Report | None, ex: LogExcerpt | None, prefix: str, kind: str,
           env: dict[str, Any] | None, red: Redactor) -> str:
    text = ""
    if report is not None and kind == "training":
        text = cause_title(report)
    if report is not None and not text:
        # a side note (NEVER_LEAD) never titles an issue: the error line or symptom says more
        leads = [f for f in report.findings if f.rule not in NEVER_LEAD]
        errs = [f for f in leads if f.severity == "error"] or leads
        if errs:
            text = errs[0].title
    if not text and ex is not None:
        text = ex.error
    if not text and report is not None and report.symptoms:
        text = f"{report.symptoms[0].kind} during training"
    if kind == "install":
        text = "DeepSpeed install / op build fails" + (f": {text}" if text else "")
    elif kind == "env" and not text:
        pk = _pkg_versions(env)
        text = "Which versions work together? " + ", ".join(
            f"{n} {pk[n]}" for n in ("deepspeed", "torch", "transformers", "accelerate") if pk.get(n))
    elif kind == "config" and not text:
        text = "Question about a DeepSpeed config"
    # redact before cutting: a host or token across character 107 is never half shown
    text = re.sub(r"\s+", " ", red.text(text)).strip() or "training run fails"
    if len(text) > 110:
        text = text[:107].rstrip() + "..."
    return prefix + text


def _description(report: Report | None, ex: LogExcerpt | None, env: dict[str, Any] | None,
                 configs: Sequence[ConfigText], launch: Launch, kind: str) -> str:
    pk = _pkg_versions(env)
    parts = []
    who = []
    for name in ("deepspeed", "torch", "transformers", "accelerate"):
        if pk.get(name):
            who.append(f"{name} {pk[name]}")
    with_who = f" with {', '.join(who)}" if who else ""
    setup = _config_summary(configs)
    gpus = (env or {}).get("gpus") or []
    where = f" on {gpu_summary(env or {})}" if gpus else ""
    lc = launch.primary
    launched = f" (launched with `{lc.launcher}`)" if lc else ""
    if kind == "install":
        cuda = (env or {}).get("cuda") or {}
        versions = ", ".join(f"{k} {cuda[k]}" for k in ("torch_cuda", "nvcc_version") if cuda.get(k))
        parts.append(f"Installing DeepSpeed or building its ops fails{where}"
                     f"{' (' + versions + ')' if versions else ''}. The exact install command, with "
                     "its `DS_BUILD_*` variables: " + TODO.format("e.g. DS_BUILD_FUSED_ADAM=1 pip "
                                                                  "install deepspeed"))
    elif kind == "config":
        parts.append(f"A question about this DeepSpeed config{' (' + setup + ')' if setup else ''}"
                     f"{with_who}{where}, checked before running (no log). " + TODO.format(
                         "what you want to know or what goes wrong with it"))
    elif kind == "env":
        parts.append(f"A question about versions{with_who}{where}. " + TODO.format(
            "what you want to run (model, ZeRO stage, precision) and what fails or what you ask"))
    elif ex is None and not (report is not None and report.findings):
        # Nothing in the log says it failed: do not claim it did, ask what goes wrong.
        parts.append(f"A training run{with_who}{' (' + setup + ')' if setup else ''}{where}"
                     f"{launched}: the log shows no error line. " + TODO.format(
                         "what goes wrong (slow, wrong results, stops without an error, ...)"))
    else:
        parts.append(f"A training run{with_who}{' (' + setup + ')' if setup else ''}{where} "
                     f"fails{launched}.")
    if ex is not None:
        parts.append(f"The first error in the log (`{Path(ex.file).name}` line {ex.error_line}) is: "
                     f"`{ex.error.replace('`', chr(39))}`.")
    if report is not None and report.findings:
        parts.append("dsdoctor's diagnosis: " + "; ".join(
            f"{f.rule} {f.title}" for f in lead_first(report.findings)[:3]) + ".")
    elif report is not None and report.symptoms:
        parts.append("The log shows: " + ", ".join(f"{s.kind} ({s.count}x)" for s in report.symptoms[:5]) + ".")
    return " ".join(parts)


def _not_deepspeed_hint(ex: LogExcerpt | None, target: str) -> str | None:
    if ex is None or not ex.traceback_complete or ex.deepspeed_in_traceback:
        return None
    others = [p for p in ex.frame_packages if p in ("transformers", "accelerate", "peft", "trl", "torch")]
    where = f" The traceback passes through {', '.join('`' + p + '`' for p in others)}." if others else ""
    if target == "deepspeed":
        return ("> [!NOTE]\n> The first error's traceback has no `deepspeed/` frame: this is probably "
                "not a DeepSpeed bug." + where + " Consider checking the training script or filing it "
                "with the project the frames point to (`dsdoctor report --target transformers|accelerate`).")
    return ("> [!NOTE]\n> The first error's traceback has no `deepspeed/` frame." + where)


def _system_info_deepspeed(env: dict[str, Any] | None) -> list[str]:
    if env is None:
        return [f"- OS: {TODO.format('e.g. Ubuntu 22.04')}",
                f"- GPU count and types: {TODO.format('e.g. two machines with x8 A100s each')}",
                f"- Interconnects (if applicable): {TODO.format('e.g. two machines connected with 100 Gbps IB')}",
                f"- Python version: {TODO.format('python --version')}",
                "- Any other relevant info about your setup: run `dsdoctor env --format markdown` "
                "on the training node and paste it here, or pass `--env FILE` to `dsdoctor report`."]
    pk = _pkg_versions(env)
    ev = env.get("env_vars") or {}
    ic = [f"{k}={v}" for k, v in ev.items() if k.startswith(("NCCL_IB", "NCCL_SOCKET", "NCCL_NET", "FI_"))]
    if env.get("interconnect") or any("nvlink_active_links" in g for g in env.get("gpus") or []):
        ic.insert(0, interconnect_summary(env))
    gpus = env.get("gpus") or []
    return [
        f"- OS: {os_line(env.get('os') or {})}",
        f"- GPU count and types: {len(gpus)} x per node: {gpu_summary(env)}" if gpus
        else "- GPU count and types: none visible on the machine where the snapshot was taken",
        "- Interconnects (if applicable): "
        + (", ".join(ic) if ic else TODO.format("e.g. two machines connected with 100 Gbps IB")),
        f"- Python version: {(env.get('python') or {}).get('version', '?')}",
        "- Any other relevant info about your setup: "
        + ", ".join(f"{n} {v}" for n, v in pk.items() if v)
        + f"; {cuda_line(env)}",
    ]


def _ds_report_md(env: dict[str, Any] | None) -> str:
    ops = (env or {}).get("deepspeed_ops")
    if not ops:
        return ("Please run `ds_report` (or `dsdoctor env --format markdown`, which includes it) on "
                "the training node and paste the output here. " + TODO.format("paste ds_report output"))
    cw = ops.get("compiled_with") or {}
    lines = [f"DeepSpeed {ops.get('version')} (accelerator {ops.get('accelerator')}, ninja "
             f"{'[OKAY]' if ops.get('ninja') else '[FAIL]'}, wheel compiled w. torch {cw.get('version')}, "
             f"cuda {cw.get('cuda_version')})", "op name ................ installed .. compatible"]
    lines += [f"{a} {'.' * max(2, 23 - len(a))} [{b}] {'.' * 7} [{c}]" for a, b, c in ops_rows(ops)]
    lines += ops.get("warnings") or []
    return "Collected by `dsdoctor env` (the same probes as `ds_report`):\n\n" + fence("\n".join(lines))


def _docker_md(env: dict[str, Any] | None) -> str:
    container = ((env or {}).get("os") or {}).get("container")
    if container:
        return (f"Running inside a {container} container (detected). Image: "
                + TODO.format("name the image and tag if you can share it"))
    if env is not None:
        return "No container detected on the node where the environment snapshot was taken."
    return TODO.format("Are you using a specific docker image that you can share?")


def _excerpt_section(excerpt: LogExcerpt | None, kind: str, have_log: bool, red: Redactor) -> str:
    if excerpt is not None and excerpt.lines:
        return _excerpt_md(excerpt, Path(excerpt.file).name, red)
    if not have_log:
        return ("No log: " + ("the config was checked without running it." if kind == "config" else
                              "a question about the environment, not a failed run."))
    return "_No error line found in the log._ " + TODO.format("paste the error and its traceback")


def _launch_section(launch: Launch, kind: str, have_log: bool) -> str:
    if launch.commands:
        return "#### Launch command\n\n" + launch_md(launch)
    if kind == "install":
        return ""
    where = "in the log" if have_log else "in the inputs"
    return (f"The launch command is not {where}: give the launch script with `--script run.sh`, or "
            "paste the exact command (launcher, its options, the script and all its arguments). "
            + TODO.format("the exact launch command"))


def _launcher_context(launch: Launch, kind: str) -> str:
    ctx = launcher_context(launch)
    if ctx:
        return ctx
    if kind == "install":
        return "Not applicable: the failure is in installing/building DeepSpeed, not in a launch."
    return TODO.format("Are you launching your experiment with the `deepspeed` launcher, MPI, or "
                       "something else? (give `--script run.sh` to fill this in)")


def build_issue(*, target: str, report: Report | None, logs: Sequence[str],
                configs: Sequence[ConfigText] = (), env: dict[str, Any] | None = None,
                redactor: Redactor | None = None, excerpt: LogExcerpt | None = None,
                launch: Launch | None = None, inputs_note: Sequence[str] = (),
                printed: PrintedConfig | None = None, run: RunModel | None = None,
                envs: Sequence[tuple[str, dict[str, Any]]] = (), kind: str = "training") -> Issue:
    """Assemble the issue for ``target`` from already-gathered pieces (all get redacted).

    ``env`` is the snapshot shown as the system info (the first node's); ``envs`` all the
    snapshots given, compared when there are several.
    """
    if target not in TARGETS:
        raise UsageError(f"--target {target}: choose one of {', '.join(TARGETS)}")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {KINDS}")
    red = redactor or Redactor()
    repo, style, prefix = TARGETS[target]
    launch = launch or gather_launch(report)
    have_log = bool(logs)
    # each snapshot redacted once; the first node's (``env``) is usually one of ``envs``
    shaped = [(p, e, shape(red.obj(e))) for p, e in envs]
    if env is not None:
        env = next((s for _, e, s in shaped if e is env), None) or shape(red.obj(env))
    envs = [(p, s) for p, _, s in shaped]
    red.learn("\n".join(ln.text for ln in excerpt.lines) if excerpt else "")
    title = _title(report, excerpt, prefix, kind, env, red)
    desc = _description(report, excerpt, env, configs, launch, kind)
    findings = _findings_md(report, red)
    hint = _not_deepspeed_hint(excerpt, target)
    found = triage(report, have_log)
    top = triage_md(found) if found else ""
    nodes = nodes_md(envs)
    asks = run_state_md(report, run, excerpt, configs, logs) if kind == "training" else []
    full_log = full_log_hint(launch) if kind == "training" else None
    if full_log:
        asks.append(full_log)
    asks_md = ("#### What the log says about the run\n\n" + "\n".join(asks)) if asks else ""
    excerpt_md = _excerpt_section(excerpt, kind, have_log, red)
    launch_text = red.text(_launch_section(launch, kind, have_log))
    cfg_md = "#### Config\n\n" + config_md(configs, printed, report, launch) if kind != "env" else ""
    env_md = render_markdown(env, heading="####") if env is not None else None
    diag = ["**Diagnosis by dsdoctor**", ""] + (findings or ["_dsdoctor found no known failure pattern._"])
    ranks_md = _ranks_md(report, red)
    if ranks_md:
        diag += ["", ranks_md]
    steps = ("Steps to reproduce the behavior:\n1. " + TODO.format("minimal script/command and data to "
             "reproduce (only you can answer this)") + "\n2. Launch command and config below\n3. See error")
    if kind == "install":
        steps = ("Steps to reproduce the behavior:\n1. " + TODO.format("the exact install command, "
                 "e.g. DS_BUILD_FUSED_ADAM=1 pip install deepspeed") + "\n2. See the build error above")
    elif kind in ("config", "env"):
        steps = ""
    # No package-index link: dsdoctor is installed from its repository until it is published.
    footer = (f"<sub>Generated with dsdoctor {__version__} "
              f"(`dsdoctor report --target {target}`); secrets were redacted. Review before posting.</sub>")
    notes = [n for n in (list(report.notes) if report else []) + list(inputs_note) if n]

    if style == "deepspeed":
        sections = [
            ("**Describe the bug**", "\n\n".join(x for x in [
                top, desc, "\n".join(diag), nodes or "", hint or "", excerpt_md, asks_md] if x)),
            ("**To Reproduce**", "\n\n".join(x for x in [steps, launch_text, cfg_md] if x)
             or "Not applicable: no run to reproduce."),
            ("**Expected behavior**", TODO.format("what you expected to happen (e.g. training runs "
                                                   "past step N without the error above)")),
            ("**ds_report output**", _ds_report_md(env)),
            ("**Screenshots**", "Not applicable: the log excerpt is included above." if have_log
             else "Not applicable."),
            ("**System info (please complete the following information):**",
             "\n".join(_system_info_deepspeed(env))
             + ("\n\n" + details("Full environment report (`dsdoctor env`)", env_md) if env_md else "")),
            ("**Launcher context**", red.text(_launcher_context(launch, kind))),
            ("**Docker context**", _docker_md(env)),
            ("**Additional context**", "\n".join([f"- {n}" for n in notes] + ["", footer]).strip()),
        ]
        body = "\n\n".join(f"{h}\n{b}" for h, b in sections)
    else:
        info_choices = ("The official example scripts", "My own modified scripts")
        tasks = ("An officially supported task in the `examples` folder (such as GLUE/SQuAD, ...)",
                 "My own task or dataset (give details below)") if target == "transformers" else (
                 "One of the scripts in the examples/ folder of Accelerate or an officially supported "
                 "`no_trainer` script in the `examples` folder of the `transformers` repo (such as "
                 "`run_no_trainer_glue.py`)", "My own task or dataset (give details below)")
        sysinfo = env_md or ("Please run `dsdoctor env --format markdown` (or `"
                             + ("transformers env" if target == "transformers" else "accelerate env")
                             + "`) on the training node and paste its output here. "
                             + TODO.format("environment report"))
        if nodes:
            sysinfo = nodes + "\n\n" + sysinfo
        launcher_line = launcher_context(launch)
        repro = "\n\n".join(x for x in [
            top, steps, desc, "\n".join(diag), hint or "", excerpt_md, asks_md, launch_text,
            red.text(launcher_line) if launcher_line else "", cfg_md,
            ("Notes:\n" + "\n".join(f"- {n}" for n in notes)) if notes else ""] if x)
        sections = [("### System Info", sysinfo)]
        if target == "transformers":
            sections.append(("### Who can help?", "_No response_"))
        sections += [
            ("### Information", "\n".join(f"- [ ] {c}" for c in info_choices)
             + "\n\n" + TODO.format("tick the boxes that apply")),
            ("### Tasks", "\n".join(f"- [ ] {c}" for c in tasks)),
            ("### Reproduction", repro),
            ("### Expected behavior", TODO.format("a clear and concise description of what you "
                                                  "expected to happen")),
            ("", footer),
        ]
        body = "\n\n".join(f"{h}\n\n{b}" if h else b for h, b in sections)
    # Safety net: whatever slipped past the per-piece redaction is caught here.
    red.learn(body)
    body = red.text(body).rstrip() + "\n"
    title = red.text(title)
    return Issue(target, repo, title, body, tuple(notes), tuple(f.rule for f in found))


def gh_command(issue: Issue, body_file: str) -> str:
    """The command that files the issue with the GitHub CLI."""
    return (f"gh issue create --repo {issue.repo} --title {shlex.quote(issue.title)} "
            f"--body-file {shlex.quote(body_file)}")


__all__ = ["ConfigText", "ExcerptLine", "Issue", "KINDS", "Launch", "LaunchCommand", "LogExcerpt",
           "PrintedConfig", "TARGETS", "build_issue", "first_error_excerpt", "gather_launch",
           "gh_command", "printed_config", "read_config", "read_shell_script"]
