"""The inputs of one analysis, as one frozen value, and a per-process cache of the files they name.

The CLI turns its argparse Namespace into :class:`AnalysisInputs` (``cli/options.inputs_from``);
everything below the CLI (``diagnose.pipeline``, ``facts.context``, the rule examples, the tests)
takes this value and never sees argparse.

Each input file (config, script, model config, env snapshot) is read and parsed once per process:
:func:`cached` keys a loader's result on (what, path, size, mtime), so ``report`` (which reads the
config again for its body) and ``watch`` (which re-analyzes on every refresh) do not re-read a file
that has not changed on disk, and do read it again when it has.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dsdoctor.logs.rankfacts import Frame
    from dsdoctor.settings import Selection

R = TypeVar("R")


@dataclass(frozen=True)
class AnalysisInputs:
    """Everything one analysis reads besides its own code: logs and the files that describe the run.

    ``trainer_args`` (a mapping, or an argv list such as ``["--fp16", "--lr", "2e-5"]``) and
    ``world_size`` are given by rule examples and tests; the CLI gets them from the log.
    """

    logs: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()  # DeepSpeed JSON / Accelerate YAML, in the order given
    model: str | None = None  # the model's config.json or its directory
    env: str | None = None  # an env snapshot (dsdoctor env --format json) or "local"
    envs: tuple[str, ...] = ()  # every node's snapshot when several are given (env is the first)
    scripts: tuple[str, ...] = ()  # training scripts (.py) and shell launch scripts (.sh)
    ds_version: str | None = None  # the DeepSpeed release to lint against
    engine: str = "auto"  # the prefilter engine
    jobs: int | None = None  # worker processes for a big log (None: up to 2; 1: one process)
    trainer_args: Mapping[str, Any] | tuple[str, ...] | None = None
    world_size: int | None = None
    traces: tuple[str, ...] = ()  # Flight Recorder dumps: per-rank files, or folders of them
    # which rules report (dsdoctor/settings.py: --select/--ignore, [tool.dsdoctor]); None: all
    selection: Selection | None = None
    # each rank's Python stack as ``watch`` read it with py-spy on a stall, outermost first:
    # where a rank was when its own lines do not say (logs/rankfacts.with_stacks)
    rank_stacks: tuple[tuple[int, tuple[Frame, ...]], ...] = ()

    @classmethod
    def of(cls, logs: Sequence[str] = (), configs: Sequence[str] = (), model: str | None = None,
           env: str | None = None, scripts: Sequence[str] = (), ds_version: str | None = None,
           engine: str = "auto", trainer_args: Any = None,
           world_size: int | None = None, jobs: int | None = None,
           traces: Sequence[str] = (), envs: Sequence[str] = (),
           selection: Selection | None = None) -> AnalysisInputs:
        """Build inputs from lists (tuples are stored, so the value stays immutable)."""
        if isinstance(trainer_args, list):
            trainer_args = tuple(str(a) for a in trainer_args)
        envs = tuple(envs)
        if env is None and envs:
            env = envs[0]
        return cls(logs=tuple(logs), configs=tuple(configs), model=model, env=env, envs=envs,
                   scripts=tuple(scripts), ds_version=ds_version, engine=engine,
                   trainer_args=trainer_args, world_size=world_size, jobs=jobs,
                   traces=tuple(traces), selection=selection)


# ------------------------------------------------------------------------------ file cache

_CACHE: dict[tuple[str, str, str], tuple[tuple[int, ...], Any]] = {}
_LOCK = threading.Lock()  # watch's worker thread and the UI thread may both analyze
_STATS = {"loads": 0, "hits": 0}


def _stamp(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # the loader reports the error in its own words
    # inode and ctime too: an editor that replaces the file keeps size and mtime only by chance
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def cached(what: str, path: str, loader: Callable[[str], R]) -> R:
    """``loader(path)``, computed once per (what, path, size, mtime) in this process.

    ``what`` names the parse ("config", "script", ...): one file may be read in two ways. A loader
    that raises (UsageError for bad input) caches nothing. Results are shared: do not modify them.
    """
    stamp = _stamp(path)
    # keyed on the path as given, not its absolute form: results quote their path (ConfigDoc.path)
    key = (what, os.fspath(path), os.getcwd() if not os.path.isabs(path) else "")
    if stamp is not None:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is not None and hit[0] == stamp:
                _STATS["hits"] += 1
                return hit[1]
    value = loader(path)
    with _LOCK:
        _STATS["loads"] += 1
        if stamp is not None and _stamp(path) == stamp:  # not changed while it was read
            _CACHE[key] = (stamp, value)
    return value


def cache_stats() -> dict[str, int]:
    """How many loads and cache hits this process made (for tests and benchmarks)."""
    with _LOCK:
        return dict(_STATS)


def clear_cache() -> None:
    """Forget every cached file (tests)."""
    with _LOCK:
        _CACHE.clear()
        _STATS.update(loads=0, hits=0)


__all__ = ["AnalysisInputs", "cache_stats", "cached", "clear_cache"]
