"""How the run was launched, whole, for ``dsdoctor report``: every command the inputs show.

Sources, all read (never run):

* the log, through the facts the scan already extracted (``launch-cmd``: the DeepSpeed runner's
  ``cmd =`` line, typed ``deepspeed``/``torchrun``/``accelerate launch``/``srun``/``mpirun`` lines,
  Accelerate's failure block; ``launch-argv``: the launcher's per-rank argv, wherever it is in the
  log). The patterns live in ``dsdoctor/logs/formats/facts.yaml`` and ``launch-report.yaml``: one
  log-reading path for ``analyze`` and ``report``;
* shell launch scripts given with ``--script run.sh``: comments dropped, ``\\``-continuations
  joined, variables left as written (``$MASTER_ADDR``), ``#SBATCH`` lines kept for the context.

Nothing is dropped from a command: a maintainer reproduces from the whole of it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.errors import UsageError
from dsdoctor.facts.inputs import cached
from dsdoctor.facts.launch import command_lines, read_script_bytes, world_info_dict
from dsdoctor.facts.launch import is_shell_script as facts_is_shell_script
from dsdoctor.facts.logfacts import literal
from dsdoctor.model import Fact, Report
from dsdoctor.render.env import fence
from dsdoctor.render.issue_log import lines_after

#: Launchers, in the order they are recognized in a command's first words.
_LAUNCHERS: tuple[tuple[str, str], ...] = (
    ("srun", r"(?:^|[/\s])srun\s"),
    ("mpirun", r"(?:^|[/\s])(?:mpirun|mpiexec)\s"),
    ("deepspeed", r"deepspeed\.launcher|(?:^|[/\s])deepspeed\s"),
    ("torchrun", r"(?:^|[/\s])torchrun\s|torch\.distributed\.(?:run|launch)"),
    ("accelerate", r"(?:^|[/\s])accelerate\s+launch"),
    ("llamafactory-cli", r"llamafactory-cli"),
)
#: A line of a shell script that launches training (after continuations are joined).
_SCRIPT_CMD_RE = re.compile(
    r"(?:^|[\s;&|(`'\"])(?:srun|mpirun|mpiexec|deepspeed|torchrun|accelerate\s+launch"
    r"|python3?\s+-m\s+(?:torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.runner)"
    r"|llamafactory-cli\s+train|python3?\s+\S+\.py)\b")
_SBATCH_RE = re.compile(r"^#SBATCH\s+(?P<opt>\S.*)$")
#: Config-file arguments that name the config a maintainer will ask for.
CONFIG_ARGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config", "--config_file",
               "--config-file", "--ds_config")


@dataclass(frozen=True)
class LaunchCommand:
    """One command that launched (part of) the run, as written, with where it was found."""

    launcher: str  # srun | mpirun | deepspeed | torchrun | accelerate | llamafactory-cli | python
    text: str  # the whole command as written (a script's continuations joined)
    file: str
    line: int
    source: str  # "runner cmd" | "rank argv" | "typed command" | "accelerate failure" | "script"
    world: str | None = None  # decoded --world_info, e.g. "localhost: GPUs 0,1"

    @property
    def argv(self) -> tuple[str, ...]:
        try:
            return tuple(shlex.split(self.text))
        except ValueError:  # an unbalanced quote in a cut-off log line
            return tuple(self.text.split())

    def config_arg(self) -> str | None:
        """The config path the command passes (``--deepspeed ds.json``), when it passes one."""
        argv = self.argv
        for i, a in enumerate(argv):
            name, eq, val = a.partition("=")
            if name in CONFIG_ARGS:
                if eq and val:
                    return val
                if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    return argv[i + 1]
        return None


@dataclass(frozen=True)
class ShellScript:
    """A launch script read as text: its launch commands and its scheduler directives."""

    path: str
    commands: tuple[LaunchCommand, ...]
    sbatch: tuple[str, ...]  # "#SBATCH" options, e.g. "--nodes=2"


@dataclass(frozen=True)
class Launch:
    """Everything known about how the run was started."""

    commands: tuple[LaunchCommand, ...]  # outermost first (scheduler, launcher, then per rank)
    sbatch: tuple[str, ...] = ()
    slurm_in_log: bool = False  # srun/slurmstepd lines in the log

    @property
    def primary(self) -> LaunchCommand | None:
        return self.commands[0] if self.commands else None

    def launchers(self) -> list[str]:
        seen: list[str] = []
        for c in self.commands:
            if c.launcher not in seen:
                seen.append(c.launcher)
        return seen

    def config_arg(self) -> str | None:
        for c in self.commands:
            path = c.config_arg()
            if path:
                return path
        return None


def launcher_of(text: str) -> str:
    """The launcher a command line starts with (``python`` when it is a bare script)."""
    head = " " + " ".join(text.split()[:8]) + " "
    for name, pat in _LAUNCHERS:
        if re.search(pat, head):
            return name
    return "python"


def decode_world_info(value: str) -> str | None:
    """``eyJsb2NhbGhvc3QiOiBbMCwgMV19`` -> ``localhost: GPUs 0,1`` (the runner's base64 JSON)."""
    data = world_info_dict(value)
    if data is None:
        return None
    return "; ".join(f"{host}: GPUs {','.join(map(str, gpus))}" for host, gpus in data.items()
                     if isinstance(gpus, list))


def _world(text: str) -> str | None:
    m = re.search(r"--world_info[= ](\S+)", text)
    return decode_world_info(m.group(1)) if m else None


def command_from_fact(fact: Fact) -> LaunchCommand | None:
    """A LaunchCommand from a ``launch-cmd`` / ``launch-argv`` fact of the scan."""
    ev = fact.evidence
    if fact.name == "launch-cmd":
        cmd = fact.values.get("cmd")
        if not isinstance(cmd, str) or not cmd.strip():
            return None
        source = "runner cmd" if "deepspeed.launcher.launch" in cmd else "typed command"
        cmd = _continued(cmd.strip(), ev.file, ev.line)
        return LaunchCommand(launcher_of(cmd), cmd, ev.file, ev.line, source, _world(cmd))
    if fact.name in ("launch-argv", "launch-failed-cmd"):
        argv = literal(str(fact.values.get("argv", "")))
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            return None
        text = shlex.join(argv)
        source = "rank argv" if fact.name == "launch-argv" else "accelerate failure"
        return LaunchCommand("python", text, ev.file, ev.line, source)
    return None


#: Continuation lines read after a pasted command that ends in ``\\`` (a shell script's options
#: one per line); a command longer than this is cut, and says so.
MAX_CONTINUATIONS = 200


def _continued(cmd: str, file: str, line: int) -> str:
    """A command echoed or pasted over several lines (``deepspeed train.py \\`` then indented
    ``--deepspeed ds.json \\`` lines), joined as the shell joins it. The scan's pattern sees one
    line; the rest is read from the log after it."""
    if not cmd.endswith("\\") or not os.path.isfile(file):
        return cmd
    parts = [cmd[:-1].rstrip()]
    more = lines_after(file, line, MAX_CONTINUATIONS + 1)
    for i, text in enumerate(more):
        piece = text.strip()
        if i == MAX_CONTINUATIONS:
            parts.append("[... continuation lines cut]")
            break
        if not piece:
            break  # a blank line ends the paste: the command's last part was cut by it
        if piece.endswith("\\"):
            parts.append(piece[:-1].rstrip())
            continue
        parts.append(piece)
        break
    return " ".join(p for p in parts if p)


def _rank_of(cmd: LaunchCommand) -> int:
    m = re.search(r"--local_rank[= ](\d+)", cmd.text)
    return int(m.group(1)) if m else 0


def launch_from_report(report: Report | None) -> tuple[LaunchCommand, ...]:
    """The distinct launch commands the log shows: the user's command and the runner's first,
    then one per-rank argv (the lowest rank's: the others differ only in ``--local_rank``)."""
    if report is None:
        return ()
    outer: list[LaunchCommand] = []
    argvs: list[LaunchCommand] = []
    for f in report.facts:
        if f.name not in ("launch-cmd", "launch-argv", "launch-failed-cmd"):
            continue
        cmd = command_from_fact(f)
        if cmd is None:
            continue
        (argvs if cmd.source == "rank argv" else outer).append(cmd)
    order = {"typed command": 0, "runner cmd": 1, "accelerate failure": 2}
    seen: set[str] = set()
    out: list[LaunchCommand] = []
    for c in sorted(outer, key=lambda c: (order.get(c.source, 3), c.file, c.line)):
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    if argvs:
        out.append(min(argvs, key=lambda c: (_rank_of(c), c.file, c.line)))
    return tuple(out)


def is_shell_script(path: str) -> bool:
    """A launch script (``run.sh``, a SLURM batch file) rather than a Python training script.

    The bytes are read once (``inputs.cached``), bounded, for this test, the report's reader and
    the analysis; an unreadable path raises the same UsageError the analysis would."""
    text = cached("bytes", path, read_script_bytes).decode("utf-8", "replace")
    return facts_is_shell_script(path, text)


def read_shell_script(path: str) -> ShellScript:
    """The launch commands of a shell script, read as text (never run). Bad input: UsageError."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory; pass the launch script (run.sh) itself")
    raw = cached("bytes", path, read_script_bytes)
    if b"\x00" in raw[:65536]:
        raise UsageError(f"{path}: binary file, not a launch script; pass run.sh or the training script")
    text = raw.decode("utf-8", errors="replace")
    cmds: list[LaunchCommand] = []
    sbatch: list[str] = []
    for n, line in command_lines(text, keep_directives=True):
        m = _SBATCH_RE.match(line)
        if m:
            sbatch.append(m.group("opt").split(" #", 1)[0].strip())
            continue
        if _SCRIPT_CMD_RE.search(line) and not re.match(r"(?:export\s+)?[A-Za-z_]\w*=\S*$", line):
            cmds.append(LaunchCommand(launcher_of(line), line, path, n, "script", _world(line)))
    return ShellScript(path, tuple(cmds), tuple(sbatch))


def gather_launch(report: Report | None, scripts: Sequence[ShellScript] = ()) -> Launch:
    """The launch of the run: the scripts' commands (what the user typed) before the log's."""
    cmds: list[LaunchCommand] = [c for s in scripts for c in s.commands]
    seen = {c.text for c in cmds}
    for c in launch_from_report(report):
        if c.text not in seen:
            cmds.append(c)
            seen.add(c.text)
    slurm = False
    if report is not None:
        texts = [e.text for s in report.symptoms for e in s.evidence]
        slurm = any(re.search(r"\bsrun: |slurmstepd|StepId=", t) for t in texts)
    return Launch(tuple(cmds), tuple(o for s in scripts for o in s.sbatch), slurm)


_CONTEXT_NAMES = {
    "deepspeed": "the `deepspeed` launcher",
    "torchrun": "`torchrun` (torch.distributed.run)",
    "accelerate": "`accelerate launch`",
    "mpirun": "MPI (`mpirun`)",
    "srun": "SLURM (`srun`)",
    "llamafactory-cli": "`llamafactory-cli` (which starts torchrun)",
    "python": "a plain `python` process per rank",
}


def launcher_context(launch: Launch) -> str | None:
    """One line for the DeepSpeed template's "Launcher context", or None when nothing says."""
    names = [n for n in launch.launchers() if n != "python"] or launch.launchers()
    if not names:
        return "SLURM (the log has `srun`/`slurmstepd` lines); the launch command is not in the log" \
            if launch.slurm_in_log else None
    parts = [_CONTEXT_NAMES[n] for n in names]
    if (launch.sbatch or launch.slurm_in_log) and "srun" not in names:
        parts.insert(0, "SLURM" + (f" batch job (`#SBATCH {' '.join(launch.sbatch)}`)" if launch.sbatch
                                   else " (the log has `srun`/`slurmstepd` lines)"))
    elif launch.sbatch:
        parts[names.index("srun")] += f" in a batch job (`#SBATCH {' '.join(launch.sbatch)}`)"
    world = next((c.world for c in launch.commands if c.world), None)
    text = "Launched with " + " → ".join(parts)
    if world:
        text += f"; world: {world}"
    return text + "."


def launch_md(launch: Launch) -> str:
    """The commands, whole, one option per line, each saying where it was found."""
    out: list[str] = []
    for c in launch.commands:
        out.append(f"{_SOURCE_LABELS.get(c.source, c.source)} (`{Path(c.file).name}` line {c.line}):")
        out.append("")
        out.append(fence(wrap_command(c.text), "bash"))
        if c.world:
            out.append(f"World info (decoded `--world_info`): {c.world}")
        out.append("")
    return "\n".join(out).strip()


_SOURCE_LABELS = {
    "typed command": "Command echoed in the log",
    "runner cmd": "The DeepSpeed runner's `cmd =`",
    "rank argv": "What each rank ran (the launcher's argv; other ranks differ in `--local_rank`)",
    "accelerate failure": "The command Accelerate ran (from its failure message)",
    "script": "Launch script",
}


def wrap_command(text: str) -> str:
    """The command as written, one option (with its value) per line; quotes and ``$VARS`` kept."""
    lex = shlex.shlex(text, posix=False)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        tokens = list(lex)
    except ValueError:  # an unbalanced quote in a cut-off log line
        tokens = text.split()
    rows: list[str] = []
    for tok in tokens:
        if not rows or tok.startswith("--") or tok.endswith(".py"):
            rows.append(tok)
        else:
            rows[-1] += " " + tok
    return " \\\n    ".join(rows)


__all__ = ["CONFIG_ARGS", "Launch", "LaunchCommand", "ShellScript", "command_from_fact",
           "decode_world_info", "gather_launch", "is_shell_script", "launch_from_report",
           "launch_md", "launcher_context", "launcher_of", "read_shell_script", "wrap_command"]
