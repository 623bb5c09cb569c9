"""Build a GitHub issue body (DeepSpeed / Transformers / Accelerate template) from an analysis.

The body follows each project's own bug template: DeepSpeed's ``training_bug_report.md``
(bold section headings) or the Markdown that Transformers'/Accelerate's ``bug-report.yml``
issue forms produce (``### Label`` sections). It is filled from the Report, the log itself (the
first error with context, deduplicated across ranks; the launch command), the configs and an
environment snapshot. Every piece of text goes through one :class:`~dsdoctor.redact.Redactor`,
and the finished body is redacted once more as a safety net.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dsdoctor import __version__
from dsdoctor.cli.env import cuda_line, details, fence, gpu_summary, interconnect_summary, ops_rows
from dsdoctor.cli.env import os_line, render_markdown, shape
from dsdoctor.errors import UsageError
from dsdoctor.model import Report
from dsdoctor.logs.reader import ANSI_RE, normalize, open_log
from dsdoctor.redact import Redactor

#: target -> (GitHub repository, template style, title prefix)
TARGETS: dict[str, tuple[str, str, str]] = {
    "deepspeed": ("deepspeedai/DeepSpeed", "deepspeed", "[BUG] "),
    "transformers": ("huggingface/transformers", "hf-form", ""),
    "accelerate": ("huggingface/accelerate", "hf-form", ""),
}

TODO = "<!-- TODO: {} -->"

# A line that starts or is the first error of a failed run (checked on the rank-peeled text).
_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::|$)"
    r"|CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate"
    r"|\bexits with return code = -?[1-9]"
    r"|\bChildFailedError\b|\bfailed \(exitcode: -?[1-9]"
    r"|Watchdog caught collective operation timeout|\bNCCL error\b"
    r"|^Killed\s*$|\bSignal 9 \(SIGKILL\)|\boom-kill"
    r"|\[ERROR\]|^ERROR:"
)
# Bytes every line matched by _ERROR_RE contains: lines without them are never decoded (speed).
_RAW_HINT = re.compile(rb"Traceback|Error|Exception|out of memory|DefaultCPUAllocator|exits with|exitcode"
                       rb"|Watchdog|NCCL error|Killed|Signal 9|oom-kill|ERROR")
_RAW_LAUNCH_HINT = re.compile(rb"cmd = |torchrun|accelerate|deepspeed|torch\.distributed|srun|mpirun"
                              rb"|llamafactory-cli")
#: Launch commands are printed at the start of a run: how many lines to look through per file.
LAUNCH_SEARCH_LINES = 50_000
_TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)|^\s*│?\s*Traceback|Traceback \(most recent")
# The line that ends a traceback: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXC_LINE_RE = re.compile(r"^(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|Failure)\b")
_FRAME_RE = re.compile(r"""File "(?P<path>[^"]+)", line \d+"""
                       # rich tracebacks: "│ /opt/conda/.../deepspeed/runtime/config.py:891 in f │"
                       r"""|^[│|]\s+(?P<rpath>[^\s│|]*[/\\][^\s│|]*\.py)\b""")
_PKG_IN_PATH = re.compile(r"[/\\](?P<pkg>deepspeed|transformers|accelerate|torch|peft|trl)[/\\]")

# Launch command lines: the DeepSpeed launcher's "cmd = ...", or a typed command echoed in the log.
_DS_CMD_RE = re.compile(r"\bcmd = (?P<cmd>\S.*)$")
_TYPED_CMD_RE = re.compile(
    r"^(?:[$#>+]\s+|\(\S+\)\s*\S*[$#]\s+)?"
    r"(?P<cmd>(?:[A-Z_][A-Z0-9_]*=\S+\s+)*"
    r"(?:torchrun|accelerate\s+launch|deepspeed|python3?\s+-m\s+torch\.distributed\.(?:run|launch)"
    r"|python3?\s+-m\s+deepspeed\.launcher\.runner|srun|mpirun|llamafactory-cli\s+train)"
    r"\s+(?:--|-\w|\S+\.py\b)\S*.*)$"
)
# Arguments that say nothing about a failure (where to save, how often to log).
_NOISE_ARGS = frozenset({
    "output_dir", "logging_dir", "logging_steps", "save_steps", "save_total_limit", "save_strategy",
    "run_name", "report_to", "cache_dir", "overwrite_output_dir", "logging_first_step",
    "enable_each_rank_log", "log_level", "logging_strategy", "disable_tqdm", "push_to_hub",
    "hub_model_id", "hub_strategy", "save_only_model", "logging_nan_inf_filter",
})

MAX_EXCERPT_LINES = 120
CONTEXT_BEFORE = 3
CONTEXT_AFTER = 6
_LOOKBACK = 60
_MAX_CONFIG_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class ExcerptLine:
    """One physical log line of the excerpt, with the ranks that printed the same text."""

    line: int
    text: str
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class LogExcerpt:
    """The first error of the run with its context."""

    file: str
    lines: tuple[ExcerptLine, ...]
    error: str  # the line that states the error (exception line when a traceback ends)
    error_line: int
    has_traceback: bool
    frame_packages: tuple[str, ...]  # packages seen in traceback frames, in order
    duplicates_dropped: int = 0
    traceback_complete: bool = False  # a traceback was read from its start to its exception line
    # First errors of the other log files (one per rank/node is common): (file, line, error).
    others: tuple[tuple[str, int, str], ...] = ()

    @property
    def deepspeed_in_traceback(self) -> bool:
        return "deepspeed" in self.frame_packages


@dataclass(frozen=True)
class LaunchCommand:
    """The launch command found in the log, reduced to the arguments that matter."""

    launcher: str  # deepspeed | torchrun | accelerate | srun | mpirun | python | ...
    args: tuple[str, ...]
    file: str
    line: int
    omitted: tuple[str, ...] = ()
    world: str | None = None  # decoded --world_info, e.g. "localhost: GPUs 0,1"


@dataclass(frozen=True)
class ConfigText:
    """A config file's content to paste, already redacted."""

    path: str
    text: str
    lang: str


@dataclass(frozen=True)
class Issue:
    """A finished issue: where it goes, its title and its Markdown body."""

    target: str
    repo: str
    title: str
    body: str
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------------------------
# reading the log
# --------------------------------------------------------------------------------------------

def _iter_raw(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) for each physical line, streamed, nothing decoded.

    A tqdm line holds many ``\\r`` redraws; only its last piece is what a reader sees.
    """
    log = open_log(path)
    try:
        n = 0
        partial = False  # inside an overlong line: its remainder is not a new line
        while True:
            raw = log.stream.readline(1 << 20)  # bounded: a line of many MB is not read whole
            if not raw:
                break
            if partial:
                partial = not raw.endswith(b"\n")
                continue
            n += 1
            partial = not raw.endswith(b"\n")
            piece = raw.rstrip(b"\r\n")
            if b"\r" in piece:
                piece = piece.rsplit(b"\r", 1)[-1] or piece.replace(b"\r", b" ")
            yield n, piece
    finally:
        log.close()


def _norm(item: tuple[int, bytes]) -> tuple[int, str, Any]:
    """Matching uses the rank-peeled text; display keeps the rank prefix for maintainers."""
    n, piece = item
    return n, normalize_display(piece), normalize(piece)


def normalize_display(raw: bytes) -> str:
    """Decode a raw line for display: replacement for bad UTF-8, no ANSI, no NUL, capped."""
    text = raw[:8192].decode("utf-8", errors="replace").replace("\x00", "")
    return ANSI_RE.sub("", text).rstrip()[:2000]


def first_error_excerpt(paths: Sequence[str], anchor: tuple[str, int] | None = None,
                        fallback: tuple[str, int] | None = None) -> LogExcerpt | None:
    """Cut the context of the run's first error.

    ``anchor`` = (file, line) names the error (the analysis's strongest evidence); without it
    the first error-looking line (traceback, exception, OOM, non-zero exit) is used, and
    ``fallback`` (e.g. the first symptom: a loss-scale collapse prints no traceback) when the
    log has none. A traceback is shown from its ``Traceback`` line to its exception line;
    identical lines printed by several ranks are kept once (with the ranks noted).
    """
    found: LogExcerpt | None = None
    no_error: set[str] = set()  # files already read through without an error line
    if anchor is None:
        for path in paths:
            found = _excerpt_in_file(path, None)
            if found is not None:
                break
            no_error.add(path)
        anchor = None if found else fallback
    if found is None and anchor is not None and anchor[0] in paths:
        found = _excerpt_in_file(anchor[0], anchor[1])
    if found is None or len(paths) < 2:
        return found
    others = []
    for path in paths:
        if path == found.file or path in no_error:
            continue
        ex = _excerpt_in_file(path, None)
        if ex is not None:
            others.append((path, ex.error_line, ex.error))
    return replace(found, others=tuple(others))


def _excerpt_in_file(path: str, want_line: int | None) -> LogExcerpt | None:
    window: deque[tuple[int, bytes]] = deque(maxlen=_LOOKBACK)
    it = _iter_raw(path)
    collected: list[tuple[int, str, Any]] = []
    for item in it:
        n, piece = item
        if want_line is not None:
            hit = n == want_line
        else:
            hit = bool(_RAW_HINT.search(piece)) and bool(_ERROR_RE.search(normalize(piece).text))
        if not hit:
            window.append(item)
            continue
        first = _norm(item)
        seg = first[2]
        hit_line = n
        recent = [_norm(w) for w in window]
        # Start at the Traceback that this error ends, if one is in the recent window.
        start_idx = len(recent)
        if not _TRACEBACK_RE.search(seg.text):
            for i in range(len(recent) - 1, -1, -1):
                if _TRACEBACK_RE.search(recent[i][2].text):
                    start_idx = i
                    break
        start_idx = max(0, start_idx - CONTEXT_BEFORE)
        collected = recent[start_idx:] + [first]
        tb_open = False  # inside a traceback: keep reading until its exception line
        closed = False
        for c in collected:
            tb_open, closed = _tb_step(c[2].text, tb_open, closed)
        after = 0
        for raw_item in it:
            item = _norm(raw_item)
            collected.append(item)
            was_open = tb_open
            tb_open, closed = _tb_step(item[2].text, tb_open, closed)
            if tb_open or was_open:
                after = 0
            else:
                after += 1
                if after >= CONTEXT_AFTER:
                    break
            if len(collected) >= MAX_EXCERPT_LINES * 3:
                break
        break
    else:
        return None
    it.close()
    return _dedupe(path, collected, closed, hit_line)


def _tb_step(text: str, tb_open: bool, closed: bool) -> tuple[bool, bool]:
    """Advance the traceback state over one rank-peeled line: (open, seen-a-complete-one)."""
    if _TRACEBACK_RE.search(text):
        return True, closed
    if tb_open and _EXC_LINE_RE.match(text):
        return False, True
    return tb_open, closed


def _dedupe(path: str, collected: list[tuple[int, str, Any]], complete: bool, hit_line: int
            ) -> LogExcerpt:
    seen: dict[str, int] = {}
    lines: list[ExcerptLine] = []
    ranks: list[list[int]] = []
    dropped = 0
    for n, shown, seg in collected:
        key = seg.text.strip()
        if key and key in seen:
            idx = seen[key]
            if seg.rank is not None and seg.rank not in ranks[idx]:
                ranks[idx].append(seg.rank)
            dropped += 1
            continue
        if key:
            seen[key] = len(lines)
        lines.append(ExcerptLine(n, shown))
        ranks.append([seg.rank] if seg.rank is not None else [])
    # Packages the traceback frames run through (all of them, also past the display cap).
    pkgs: list[str] = []
    for _, _, seg in collected:
        m = _FRAME_RE.search(seg.text.strip() if seg.text.lstrip().startswith(("│", "|")) else seg.text)
        if m:
            pm = None
            for pm in _PKG_IN_PATH.finditer(m.group("path") or m.group("rpath")):
                pass  # the innermost package directory of the path is the frame's package
            if pm and pm.group("pkg") not in pkgs:
                pkgs.append(pm.group("pkg"))
    out = tuple(ExcerptLine(l.line, l.text, tuple(sorted(r))) for l, r in zip(lines, ranks))
    out = out[:MAX_EXCERPT_LINES]
    texts = [normalize(l.text.encode()).text for l in out]
    has_tb = any(_TRACEBACK_RE.search(t) for t in texts)
    # The error is the exception line that closes the first traceback, else the first error line.
    idx = None
    tb_open = False
    for i, t in enumerate(texts):
        was_open = tb_open
        tb_open, _ = _tb_step(t, tb_open, False)
        if was_open and not tb_open and not _TRACEBACK_RE.search(t):
            idx = i
            break
    if idx is None:
        idx = next((i for i, t in enumerate(texts) if _ERROR_RE.search(t) and not _TRACEBACK_RE.search(t)),
                   None)
    if idx is None:
        idx = next((i for i, l in enumerate(out) if l.line == hit_line), 0)
    error = texts[idx].strip() if texts else ""
    error_line = out[idx].line if out else 0
    return LogExcerpt(path, out, error[:300], error_line, has_tb, tuple(pkgs), dropped, complete)


def find_launch_command(paths: Sequence[str], report: Report | None = None) -> LaunchCommand | None:
    """The run's launch command: the DeepSpeed launcher's ``cmd = ...`` line, or an echoed
    ``deepspeed``/``torchrun``/``accelerate launch`` command line."""
    for path in paths:
        for n, piece in _iter_raw(path):
            if n > LAUNCH_SEARCH_LINES:
                break
            if not _RAW_LAUNCH_HINT.search(piece):
                continue
            text = normalize(piece).text.strip()
            m = _DS_CMD_RE.search(text) if "cmd = " in text else None
            if m is None:
                m = _TYPED_CMD_RE.match(text)
            if m:
                return parse_launch(m.group("cmd"), path, n)
    if report is not None:
        for f in report.facts:
            if f.name == "launch-cmd":
                strs = [v for v in f.values.values() if isinstance(v, str)]
                if strs:
                    return parse_launch(max(strs, key=len), f.evidence.file, f.evidence.line)
    return None


def _decode_world_info(value: str) -> str | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return "; ".join(f"{host}: GPUs {','.join(map(str, gpus))}" for host, gpus in data.items()
                     if isinstance(gpus, list))


def parse_launch(cmd: str, path: str, line: int) -> LaunchCommand:
    """Split a command line, name its launcher and drop arguments unrelated to failures."""
    try:
        argv = shlex.split(cmd)
    except ValueError:  # unbalanced quote in a cut-off log line
        argv = cmd.split()
    launcher = "python"
    joined = " ".join(argv[:6])
    for name, pat in (("deepspeed", r"deepspeed\.launcher|(?:^|[/\s])deepspeed\s"),
                      ("torchrun", r"(?:^|[/\s])torchrun\s|torch\.distributed\.(?:run|launch)"),
                      ("accelerate", r"(?:^|[/\s])accelerate\s+launch"), ("srun", r"(?:^|[/\s])srun\s"),
                      ("mpirun", r"(?:^|[/\s])mpirun\s"), ("llamafactory-cli", r"llamafactory-cli")):
        if re.search(pat, joined):
            launcher = name
            break
    kept: list[str] = []
    omitted: list[str] = []
    world = None
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a.startswith("--"):
            name, _, val = a[2:].partition("=")
            takes_next = not val and nxt is not None and not nxt.startswith("-")
            if name == "world_info":
                world = _decode_world_info(val or (nxt or ""))
                kept.append(a if val else f"{a} {nxt}")
                i += 1 if val else 2
                continue
            if name.replace("-", "_") in _NOISE_ARGS:
                omitted.append(a if val or not takes_next else f"{a} {nxt}")
                i += 2 if takes_next else 1
                continue
            kept.append(a if val or not takes_next else f"{a} {nxt}")
            i += 2 if takes_next else 1
            continue
        kept.append(a)
        i += 1
    return LaunchCommand(launcher, tuple(kept), path, line, tuple(omitted), world)


def read_config(path: str, redactor: Redactor) -> ConfigText:
    """A config file's text for the issue, redacted. Bad input raises UsageError."""
    from dsdoctor.safeio import read_bounded  # noqa: PLC0415

    # a FIFO or device is refused before reading; the read is capped (issue 14, item 4)
    raw = read_bounded(path, _MAX_CONFIG_BYTES, "--config",
                       "pass the DeepSpeed JSON or Accelerate YAML file")
    if b"\x00" in raw[:65536]:
        raise UsageError(f"{path}: binary file, not a config; pass the DeepSpeed JSON or "
                         "Accelerate YAML file")
    text = raw.decode("utf-8", errors="replace")
    lang = "json" if text.lstrip().startswith(("{", "[")) or path.endswith(".json") else "yaml"
    if lang == "json":
        # Re-indent parsable JSON so a one-line config is readable; keep broken JSON as written
        # (a syntax error may be the very thing being reported).
        try:
            text = json.dumps(redactor.obj(json.loads(text)), indent=2)
        except (ValueError, RecursionError):
            pass
    return ConfigText(path, redactor.text(text), lang)


# --------------------------------------------------------------------------------------------
# the body
# --------------------------------------------------------------------------------------------

def _excerpt_md(ex: LogExcerpt, name: str) -> str:
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
    if ex.others:
        same = [Path(f).name for f, _, e in ex.others if e == ex.error]
        diff = [(Path(f).name, n, e) for f, n, e in ex.others if e != ex.error]
        if same:
            out += f"\n\nThe same error is also the first error in: {', '.join('`' + x + '`' for x in same)}."
        if diff:
            out += "\n\nFirst errors of the other log files:\n" + "\n".join(
                f"- `{name}` line {n}: `{e.replace('`', chr(39))[:200]}`" for name, n, e in diff)
    return out


def _launch_md(lc: LaunchCommand) -> str:
    # One option per line; the interpreter's own flags and the script stay readable.
    rows: list[str] = []
    for a in lc.args:
        if not rows or a.startswith("--") or a.endswith(".py"):
            rows.append(a)
        else:
            rows[-1] += " " + a
    out = [f"Launcher: `{lc.launcher}` (command from the log, line {lc.line})", "",
           fence(" \\\n    ".join(rows), "bash")]
    if lc.world:
        out += ["", f"World info (decoded `--world_info`): {lc.world}"]
    if lc.omitted:
        out += ["", f"Omitted (logging/saving only): `{' '.join(lc.omitted)}`"]
    return "\n".join(out)


def _loc(e: Any) -> str:
    """``file:line`` with the file's base name (the excerpt names the file; paths add noise)."""
    return f"{Path(e.file).name}:{e.line}"


def _findings_md(report: Report | None) -> list[str]:
    if report is None:
        return []
    out: list[str] = []
    for f in report.findings:
        loc = f" (evidence: {', '.join(_loc(e) for e in f.evidence[:3])})" if f.evidence else ""
        cfg = f" [config `{f.config_path}`]" if f.config_path else ""
        line = f"- **{f.rule} {f.name}** ({f.severity}): {f.title}{cfg}{loc}"
        if f.fix:
            line += f"  \n  Suggested fix: {f.fix.strip().splitlines()[0]}"
        out.append(line)
    if not out:
        for s in report.symptoms:
            ranks = f", ranks {','.join(map(str, s.ranks[:16]))}" if s.ranks else ""
            out.append(f"- `{s.kind}`: {s.count} occurrence(s), first at {_loc(s.first)}{ranks}: "
                       f"`{s.first.text[:200].replace('`', chr(39))}`")
    return out


def _pkg_versions(env: dict[str, Any] | None) -> dict[str, str | None]:
    return dict((env or {}).get("packages") or {})


def _config_summary(configs: Sequence[ConfigText]) -> str:
    for c in configs:
        if c.lang != "json":
            continue
        try:
            d = json.loads(c.text)
        except ValueError:
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


def _title(report: Report | None, ex: LogExcerpt | None, prefix: str) -> str:
    text = ""
    if report is not None:
        errs = [f for f in report.findings if f.severity == "error"] or list(report.findings)
        if errs:
            text = errs[0].title
    if not text and ex is not None:
        text = ex.error
    if not text and report is not None and report.symptoms:
        text = f"{report.symptoms[0].kind} during training"
    text = re.sub(r"\s+", " ", text).strip() or "training run fails"
    if len(text) > 110:
        text = text[:107].rstrip() + "..."
    return prefix + text


def _description(report: Report | None, ex: LogExcerpt | None, env: dict[str, Any] | None,
                 configs: Sequence[ConfigText], lc: LaunchCommand | None) -> str:
    pk = _pkg_versions(env)
    parts = []
    who = []
    for name in ("deepspeed", "torch", "transformers", "accelerate"):
        if pk.get(name):
            who.append(f"{name} {pk[name]}")
    setup = _config_summary(configs)
    gpus = (env or {}).get("gpus") or []
    where = ""
    if gpus:
        where = f" on {gpu_summary(env or {})}"
    launched = f" (launched with `{lc.launcher}`)" if lc else ""
    parts.append(f"A training run{' with ' + ', '.join(who) if who else ''}"
                 f"{' (' + setup + ')' if setup else ''}{where} fails{launched}.")
    if ex is not None:
        parts.append(f"The first error in the log (`{Path(ex.file).name}` line {ex.error_line}) is: "
                     f"`{ex.error.replace('`', chr(39))}`.")
    if report is not None and report.findings:
        parts.append("dsdoctor's diagnosis: " + "; ".join(f"{f.rule} {f.title}" for f in report.findings[:3]) + ".")
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
        f"- Interconnects (if applicable): {', '.join(ic) if ic else TODO.format('e.g. two machines connected with 100 Gbps IB')}",
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


def build_issue(*, target: str, report: Report | None, logs: Sequence[str],
                configs: Sequence[ConfigText] = (), env: dict[str, Any] | None = None,
                redactor: Redactor | None = None, excerpt: LogExcerpt | None = None,
                launch: LaunchCommand | None = None, inputs_note: Sequence[str] = ()) -> Issue:
    """Assemble the issue for ``target`` from already-gathered pieces (all get redacted)."""
    if target not in TARGETS:
        raise UsageError(f"--target {target}: choose one of {', '.join(TARGETS)}")
    red = redactor or Redactor()
    repo, style, prefix = TARGETS[target]
    if env is not None:
        env = shape(red.obj(env))
    title = _title(report, excerpt, prefix)
    desc = _description(report, excerpt, env, configs, launch)
    findings = _findings_md(report)
    hint = _not_deepspeed_hint(excerpt, target)
    excerpt_md = _excerpt_md(excerpt, Path(excerpt.file).name) if excerpt and excerpt.lines else \
        "_No error line found in the log._ " + TODO.format("paste the error and its traceback")
    launch_md = _launch_md(launch) if launch else (
        "The launch command was not found in the log. " + TODO.format("paste the exact launch command"))
    cfg_md = "\n\n".join(details(f"Config `{Path(c.path).name}`", fence(c.text, c.lang)) for c in configs) \
        or "No config given (`--config FILE`). " + TODO.format("paste the DeepSpeed / Accelerate config")
    env_md = None
    if env is not None:
        env_md = render_markdown(env, heading="####")
    diag = ["**Diagnosis by dsdoctor**", ""] + (findings or ["_dsdoctor found no known failure pattern._"])
    steps = ("Steps to reproduce the behavior:\n1. " + TODO.format("minimal script/command and data to "
             "reproduce (only you can answer this)") + "\n2. Launch command and config below\n3. See error")
    footer = (f"<sub>Generated with [dsdoctor](https://pypi.org/project/dsdoctor/) {__version__} "
              f"(`dsdoctor report --target {target}`); secrets were redacted. Review before posting.</sub>")
    notes = [n for n in (list(report.notes) if report else []) + list(inputs_note) if n]

    if style == "deepspeed":
        sections = [
            ("**Describe the bug**", "\n\n".join(x for x in [desc, "\n".join(diag), hint or "", excerpt_md] if x)),
            ("**To Reproduce**", steps + "\n\n" + launch_md + "\n\n" + cfg_md),
            ("**Expected behavior**", TODO.format("what you expected to happen (e.g. training runs "
                                                   "past step N without the error above)")),
            ("**ds_report output**", _ds_report_md(env)),
            ("**Screenshots**", "Not applicable: the log excerpt is included above."),
            ("**System info (please complete the following information):**",
             "\n".join(_system_info_deepspeed(env))
             + ("\n\n" + details("Full environment report (`dsdoctor env`)", env_md) if env_md else "")),
            ("**Launcher context**", launch_md.split("\n", 1)[0] if launch else
             TODO.format("Are you launching your experiment with the `deepspeed` launcher, MPI, or something else?")),
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
        repro = "\n\n".join(x for x in [
            steps, desc, "\n".join(diag), hint or "", excerpt_md, launch_md, cfg_md,
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
    return Issue(target, repo, title, body, tuple(notes))


def gh_command(issue: Issue, body_file: str) -> str:
    """The command that files the issue with the GitHub CLI."""
    return (f"gh issue create --repo {issue.repo} --title {shlex.quote(issue.title)} "
            f"--body-file {shlex.quote(body_file)}")
