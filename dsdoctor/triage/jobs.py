"""Which files make a job: one job per directory, or ``--job-pattern`` naming a job's files.

A job directory's logs are its files with a log's name (``*.log``, ``*.out``, ``*.err``,
``*.txt``, compressed or not); its DeepSpeed/Accelerate config and its training and launch scripts
are taken when they lie beside them under the usual names. Nothing is run or imported: the files
are only read, by the analysis, as ``dsdoctor analyze`` reads them.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dsdoctor.errors import UsageError

LOG_NAMES = ("*.log", "*.out", "*.err", "*.txt", "*.log.gz", "*.out.gz", "*.log.zst", "*.log.xz",
             "*.log.bz2")
CONFIG_NAMES = ("ds_config*.json", "*deepspeed*.json", "zero*.json", "accelerate*.yaml",
                "accelerate*.yml")
SCRIPT_NAMES = ("*.py", "*.sh", "*.sbatch", "*.slurm")
_GLOB_CHARS = re.compile(r"[*?\[]")
JOB_FIELD = "{job}"


@dataclass(frozen=True)
class Job:
    """One job: its name, where it was found, and its input files."""

    name: str
    where: str
    logs: tuple[str, ...]
    configs: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _expand(paths: Iterable[str]) -> list[str]:
    """Globs expanded here (a scheduler's hook passes them quoted), in sorted order; a path that
    does not exist is bad usage."""
    out: list[str] = []
    for path in paths:
        if _GLOB_CHARS.search(path) and not os.path.exists(path):
            found = sorted(glob.glob(path))
            if not found:
                raise UsageError(f"{path}: no file or directory matches; give job directories, "
                                 "log files or a glob that matches them")
            out += found
        elif os.path.exists(path):
            out.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return out


def job_of_directory(directory: str) -> Job | None:
    """The job in one directory (its files, not its subdirectories), or None without a log."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise UsageError(f"{directory}: cannot list it ({exc.strerror})") from None
    files = [n for n in names if os.path.isfile(os.path.join(directory, n))]
    logs = [os.path.join(directory, n) for n in files if _matches(n, LOG_NAMES)]
    if not logs:
        return None
    return Job(name=os.path.basename(os.path.normpath(directory)) or directory, where=directory,
               logs=tuple(logs),
               configs=tuple(os.path.join(directory, n) for n in files
                             if _matches(n, CONFIG_NAMES)),
               scripts=tuple(os.path.join(directory, n) for n in files
                             if _matches(n, SCRIPT_NAMES)))


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """``--job-pattern``: a glob over the path below a PATH (``*`` within one name, ``**`` across
    names) with one ``{job}`` naming the part that says which job a file belongs to:
    ``slurm-{job}.out``, ``{job}/rank*.log``, ``{job}-node*.log``."""
    if pattern.count(JOB_FIELD) != 1:
        raise UsageError(f"--job-pattern {pattern!r}: it needs exactly one {JOB_FIELD}, the part "
                         "of the name that says which job a file belongs to (e.g. slurm-{job}.out)")
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith(JOB_FIELD, i):
            out.append(r"(?P<job>[^/]+?)")
            i += len(JOB_FIELD)
        elif pattern.startswith("**", i):
            out.append(r".*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def jobs_by_pattern(roots: Sequence[str], pattern: str) -> list[Job]:
    """Jobs whose files match ``pattern`` below each root, grouped by what ``{job}`` matched."""
    regex = pattern_regex(pattern)
    grouped: dict[tuple[str, str], list[str]] = {}
    for root in roots:
        if os.path.isfile(root):
            candidates = [(os.path.basename(root), root)]
        else:
            candidates = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for n in sorted(filenames):
                    full = os.path.join(dirpath, n)
                    candidates.append((os.path.relpath(full, root), full))
        for rel, full in candidates:
            m = regex.match(rel.replace(os.sep, "/"))
            if m:
                grouped.setdefault((root, m.group("job")), []).append(full)
    return [Job(name=name, where=root, logs=tuple(files))
            for (root, name), files in sorted(grouped.items())]


def find_jobs(paths: Sequence[str], pattern: str | None = None) -> list[Job]:
    """The jobs named on the command line: each directory is a job (or, with ``pattern``, the
    files below it grouped by job); a log file given by itself is a job of its own."""
    expanded = _expand(paths)
    if pattern:
        jobs = jobs_by_pattern(expanded, pattern)
        if not jobs:
            raise UsageError(f"--job-pattern {pattern!r} matches no file below "
                             f"{', '.join(paths)}; it is matched against the path below each PATH")
        return jobs
    jobs = []
    for path in expanded:
        if os.path.isdir(path):
            job = job_of_directory(path)
            if job is not None:
                jobs.append(job)
        else:
            jobs.append(Job(name=os.path.basename(path), where=path, logs=(path,)))
    if not jobs:
        raise UsageError(f"no job found in {', '.join(paths)}: a job directory holds its logs "
                         f"({', '.join(LOG_NAMES[:4])}); or name a job's files with --job-pattern")
    return jobs


__all__ = ["Job", "find_jobs", "job_of_directory", "jobs_by_pattern", "pattern_regex"]
