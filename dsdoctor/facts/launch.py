"""Launch command lines, read (never run): who launches, on how many ranks, with which arguments.

Two places give them: the log (the runner's ``cmd = ...`` line, the launcher's per-rank argv,
torchrun/``accelerate launch`` lines a user pasted; see ``logfacts``) and shell launch scripts
given with ``--script run.sh``. :func:`parse_command` turns one command's tokens into a
:class:`Launch`: the launcher (``deepspeed``, ``torchrun``, ``accelerate``, ``python``), its
world size and node count when its options state them, the DeepSpeed config path, and the
training script's own options (the Trainer arguments). Shell variables stay as written
(``--num_gpus $NGPU`` gives no number), so nothing is guessed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.facts.logfacts import _options, _script_and_rest
from dsdoctor.safeio import MAX_SCRIPT_BYTES, read_bounded

#: Commands that start a training run, by their first word (after VAR=value assignments).
_LAUNCHERS = ("deepspeed", "torchrun", "accelerate", "python", "python3")
#: Words that run the command after them (``nohup deepspeed ...``, ``srun torchrun ...``).
_PREFIXES = ("nohup", "exec", "time", "env", "srun", "stdbuf", "nice", "CUDA_VISIBLE_DEVICES")
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")


@dataclass(frozen=True)
class Launch:
    """One launch command and what its options state. ``None``: the command does not say."""

    launcher: str  # deepspeed | torchrun | accelerate | python
    file: str  # the log or script that holds it
    line: int  # first line of the command (continuation lines joined)
    text: str  # the command as written, continuations joined
    script: str | None = None  # the training script (or -m module)
    world_size: int | None = None
    nodes: int | None = None
    ds_config: str | None = None  # --deepspeed ds.json / --deepspeed_config_file ds.json
    launcher_options: dict[str, Any] = field(default_factory=dict)  # before the script
    script_options: dict[str, Any] = field(default_factory=dict)  # after it (Trainer arguments)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


def split_words(text: str) -> list[str]:
    """Shell words of one command (quotes removed, ``$VAR`` kept as written)."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote
        return text.split()


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+", v.strip()):
        return int(v)
    return None


def _count_include(spec: str) -> tuple[int, int] | None:
    """(ranks, hosts) of deepspeed's ``--include host1:0,1@host2:0,1``; None if not countable."""
    ranks = hosts = 0
    for part in spec.split("@"):
        host, _, slots = part.partition(":")
        if not host:
            return None
        hosts += 1
        if not slots:
            return None  # all GPUs of the host: how many is not written
        ranks += len([s for s in slots.split(",") if s.strip()])
    return (ranks, hosts) if ranks else None


def world_info_dict(encoded: str) -> dict[str, Any] | None:
    """The runner's ``--world_info=<base64 JSON {host: [gpu ids]}>`` decoded, or None."""
    try:
        data = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        return None  # RecursionError: a planted '{"a":{"a":...' nested 10^4 deep
    return data if isinstance(data, dict) and all(isinstance(k, str) for k in data) else None


def _world_info(encoded: str) -> tuple[int, int] | None:
    """(ranks, hosts) of the runner's ``--world_info``."""
    data = world_info_dict(encoded)
    if not data:
        return None
    ranks = sum(len(v) for v in data.values() if isinstance(v, list))
    return (ranks, len(data)) if ranks else None


def _launcher_of(words: list[str]) -> tuple[str, list[str]] | None:
    """The launcher and the words after it, or None when the command launches no training."""
    i = 0
    if words and (_ASSIGN.match(words[0]) or words[0] in _PREFIXES):
        # VAR=value, nohup, srun -N 2 ...: the launcher is the first launcher word after them
        i = next((j for j, w in enumerate(words) if _is_launcher(w)), len(words))
    if i >= len(words):
        return None
    head = _basename(words[i])
    rest = words[i + 1:]
    if head == "accelerate":
        return ("accelerate", rest[1:]) if rest[:1] == ["launch"] else None
    if head in ("deepspeed", "torchrun"):
        return head, rest
    if re.fullmatch(r"python(\d(\.\d+)?)?", head):
        if len(rest) >= 2 and rest[0] == "-m" and rest[1].startswith("torch.distributed."):
            return "torchrun", rest[2:]
        if len(rest) >= 2 and rest[0] == "-m" and rest[1].startswith("deepspeed.launcher"):
            return "deepspeed", rest[2:]
        if len(rest) >= 3 and rest[0] == "-u" and rest[1] == "-m" and \
                rest[2].startswith("deepspeed.launcher"):
            return "deepspeed", rest[3:]
        return "python", rest
    return None


def _basename(word: str) -> str:
    """``/usr/bin/python3`` and ``C:\\venv\\Scripts\\python.exe`` -> ``python3``, ``python``."""
    head = re.split(r"[/\\]", word)[-1]
    return head[:-4] if head.lower().endswith(".exe") else head


def _is_launcher(word: str) -> bool:
    head = _basename(word)
    return head in _LAUNCHERS or bool(re.fullmatch(r"python\d(\.\d+)?", head))


_REDIRECT = re.compile(r"^(?:\d*>>?|&>>?|\d*<|\d>&\d|\||\|&|&|;|&&|\|\|)")


def parse_command(text: str, file: str, line: int) -> Launch | None:
    """The :class:`Launch` of one command line, or None when it starts no training."""
    words = split_words(text)
    # the command ends at a redirection or a pipe (``&> $OUTPUT/training.log``, ``| tee log``)
    cut = next((i for i, w in enumerate(words) if _REDIRECT.match(w)), len(words))
    words = words[:cut]
    found = _launcher_of(words)
    if found is None:
        return None
    launcher, rest = found
    script, after = _script_and_rest(rest)
    before = rest[: len(rest) - len(after) - (1 if script else 0)] if script else rest
    lopts = _options(tuple(before))
    sopts = {k: v for k, v in _options(after).items() if k not in ("local_rank", "world_info")}
    world = nodes = None
    if launcher == "deepspeed":
        inc = _count_include(str(lopts["include"])) if isinstance(lopts.get("include"), str) \
            else None
        info = _world_info(str(lopts["world_info"])) if isinstance(lopts.get("world_info"), str) \
            else None
        gpus, n = _int(lopts.get("num_gpus")), _int(lopts.get("num_nodes"))
        if info:
            world, nodes = info
        elif inc:
            world, nodes = inc
        elif gpus is not None and (n is not None or "hostfile" not in lopts):
            nodes = n if n is not None else 1
            world = gpus * nodes
    elif launcher == "torchrun":
        per = _int(lopts.get("nproc_per_node"))
        n = _int(lopts.get("nnodes", 1))  # "1:4" (elastic) gives no count
        if per is not None and n is not None:
            world, nodes = per * n, n
    elif launcher == "accelerate":
        world = _int(lopts.get("num_processes"))
        nodes = _int(lopts.get("num_machines"))
    ds_config = sopts.get("deepspeed") if launcher != "accelerate" else lopts.get(
        "deepspeed_config_file")
    return Launch(launcher, file, line, text, script, world, nodes,
                  ds_config if isinstance(ds_config, str) else None, lopts, sopts)


def command_lines(text: str, keep_directives: bool = False) -> list[tuple[int, str]]:
    """(first line, command) of each shell command: ``\\`` continuations joined, comments and
    blank lines dropped, ``;``/``&&`` lists left whole (``split_words`` stops at nothing).

    ``keep_directives`` keeps ``#SBATCH`` lines (the report quotes them as the job's context)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not buf:
            if not line or (line.startswith("#") and not (keep_directives and line.startswith("#SBATCH"))):
                continue
            start = n
        elif line.startswith("#"):
            continue  # a comment line between the continued lines of one command
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf.append(line[:-1].strip())
            continue
        buf.append(line)
        out.append((start, " ".join(p for p in buf if p)))
        buf = []
    if buf:
        out.append((start, " ".join(p for p in buf if p)))
    return out


def read_script_bytes(path: str) -> bytes:
    """A --script file's bytes (read once through ``inputs.cached``: the AST check, the shell
    reader and the report share them). Bounded; a FIFO or device is refused before reading."""
    return read_bounded(path, MAX_SCRIPT_BYTES, "--script",
                        "pass the training script (.py) or the shell launch script (.sh)")


_SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".slurm", ".sbatch", ".pbs", ".lsf")
_SHEBANG_SHELL = re.compile(r"#!\s*\S*(?:/|env\s+)(?:ba|z|k|da)?sh\b")
_LAUNCH_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:deepspeed|torchrun|accelerate\s+launch|srun|"
                          r"mpirun|python3?\s+-m\s+torch\.distributed\.(?:run|launch))\s", re.M)


def is_shell_script(path: str, text: str) -> bool:
    """A shell launch script (by name, shebang, or a launcher command at the start of a line).

    A ``.py`` file is always Python; anything else that is not valid Python but launches
    deepspeed/torchrun/accelerate is read as a shell script.
    """
    if path.endswith(".py"):
        return False
    if path.lower().endswith(_SHELL_SUFFIXES) or _SHEBANG_SHELL.match(text):
        return True
    if not _LAUNCH_LINE.search(text):
        return False
    from dsdoctor.facts.pyparse import ParseBudgetError, parse_bounded  # noqa: PLC0415

    try:
        parse_bounded(text)
    except ParseBudgetError:
        return False  # too big to tell: read as Python, whose check says why it is not parsed
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return False


def read_launch_script(path: str, text: str) -> list[Launch]:
    """Every training launch in a shell script's text (read, never run)."""
    launches: list[Launch] = []
    for line, cmd in command_lines(text):
        for piece in re.split(r"\s(?:&&|\|\||;)\s", cmd):
            launch = parse_command(piece, path, line)
            if launch is not None and (launch.launcher != "python" or launch.script):
                launches.append(launch)
    return launches


_SBATCH = re.compile(r"^#SBATCH\s+(--?[\w-]+)(?:[=\s]\s*(\S+))?")
#: Launchers that start one process per GPU themselves (SLURM must start one of them per node).
_SPAWNER = re.compile(r"(?<![-\w./])(?:torchrun|(?:python3?\s+-m\s+)?torch\.distributed\.(?:run|launch)|"
                      r"accelerate\s+launch|deepspeed)\s")  # not --deepspeed, not ds.deepspeed


def sbatch_options(text: str) -> dict[str, tuple[str, int]]:
    """``#SBATCH`` options of a job script: name (``ntasks-per-node``, ``nodes``) -> (value, line).
    Short forms are named as their long ones (``-N`` nodes, ``-n`` ntasks)."""
    short = {"-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-G": "gpus"}
    out: dict[str, tuple[str, int]] = {}
    for line, cmd in command_lines(text, keep_directives=True):
        m = _SBATCH.match(cmd)
        if m:
            name = short.get(m.group(1), m.group(1).lstrip("-"))
            out.setdefault(name, (m.group(2) or "", line))
    return out


def spawning_launch(text: str) -> tuple[int, str] | None:
    """(line, command) of the first command that runs a per-node launcher (torchrun,
    torch.distributed.run, accelerate launch, deepspeed), also inside ``srun bash -c '...'``."""
    for line, cmd in command_lines(text):
        if _SPAWNER.search(cmd + " "):
            return line, cmd
    return None


__all__ = ["Launch", "command_lines", "is_shell_script", "parse_command", "read_launch_script",
           "read_script_bytes", "sbatch_options", "spawning_launch", "split_words"]
