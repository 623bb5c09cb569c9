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


#: torchrun --log-dir's own levels, not counted in MAX_DEPTH: ``<run_id>/attempt_0/<local_rank>``
#: (torch 2.13.0 torch/distributed/elastic/multiprocessing/api.py:290-291), so that
#: ``node1/logdir/none_x/attempt_0/3/stdout.log`` is found under ``node1/``.
_ELASTIC_LEVELS = re.compile(r"^attempt_\d+$|^\d+$")


def _depth(folder: str, base: int) -> int:
    parts = folder.rstrip(os.sep).split(os.sep)[base + 1:]
    elastic = sum(1 for p in parts if _ELASTIC_LEVELS.match(p)) if "attempt_" in folder else 0
    # the run id folder above attempt_N is torchrun's too
    return len(parts) - (elastic + 1 if elastic else 0)


def _logs_under(root: str) -> list[str]:
    found: list[str] = []
    base = root.rstrip(os.sep).count(os.sep)
    for folder, dirs, files in os.walk(root):
        if _depth(folder, base) >= MAX_DEPTH:
            dirs[:] = []
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.join(folder, f) for f in sorted(files)
                     if LOG_NAME.search(f) and os.path.isfile(os.path.join(folder, f)))
    return found


__all__ = ["LOG_NAME", "expand"]
