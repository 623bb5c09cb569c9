"""Log folders: ``analyze node0/ node1/`` or ``analyze logs/`` (one sub-folder per node).

A multi-node job writes its logs per node (each node's launcher prints its own ranks' lines), so a
folder given as a LOG stands for the log files in it and in its sub-folders, in name order; the
per-rank table then spans the nodes (logs/rankfacts.py maps each node's local ranks to global ranks
from the launcher's lines). Only names that say "log" are taken: a checkpoint or a config in the
same folder is never read as a log.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from dsdoctor.errors import UsageError

#: What a log file is called: train.log, rank3.log.gz, slurm-1234.out, job.err, stdout.txt.
LOG_NAME = re.compile(r"\.(?:log|out|err|txt)(?:\.(?:gz|bz2|xz|zst))?$|\.log\.\d+$", re.I)
#: Sub-folder depth searched: logs/node1/ranks/ at most.
MAX_DEPTH = 3


def expand(paths: Sequence[str]) -> list[str]:
    """``paths`` with each folder replaced by the log files under it (name order); files and
    ``-`` stay as given. A folder without one log file is a usage error."""
    out: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found = _logs_under(path)
            if not found:
                raise UsageError(f"{path}: a folder with no log file in it or its sub-folders "
                                 "(*.log, *.out, *.err, *.txt, optionally .gz); name the log "
                                 "files instead")
            out.extend(found)
        else:
            out.append(path)
    return list(dict.fromkeys(out))


def _logs_under(root: str) -> list[str]:
    found: list[str] = []
    base = root.rstrip(os.sep).count(os.sep)
    for folder, dirs, files in os.walk(root):
        if folder.rstrip(os.sep).count(os.sep) - base >= MAX_DEPTH:
            dirs[:] = []
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.join(folder, f) for f in sorted(files)
                     if LOG_NAME.search(f) and os.path.isfile(os.path.join(folder, f)))
    return found


__all__ = ["LOG_NAME", "expand"]
