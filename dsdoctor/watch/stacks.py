"""Inside the ranks on a stall: dump each rank's Python stack with py-spy, group identical stacks,
name the odd ranks out and the function they are stuck in, and say what to do for that place.

py-spy (``pip install py-spy``) is an optional dependency: it reads another process's memory
(ptrace), never runs code in it. It is run as ``py-spy dump --pid N --full-filenames``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dsdoctor.logs.rankfacts import Frame as LogFrame
from dsdoctor.watch.ranks import RankProcess

DUMP_TIMEOUT = 30.0
INSTALL_HINT = "pip install py-spy  (to see each rank's Python stack on a stall)"
PTRACE_HINT = ("py-spy was denied ptrace access to the ranks: run dsdoctor as root or as the job's "
               "user with 'sudo sysctl kernel.yama.ptrace_scope=0' (in a container: "
               "--cap-add SYS_PTRACE)")

_THREAD = re.compile(r'^Thread (?P<id>0x[0-9A-Fa-f]+|\d+) \((?P<state>[\w-]+)\)(?::\s*"(?P<name>.*)")?\s*$')
_FRAME = re.compile(r"^ {4}(?P<func>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")

# torch.distributed / DeepSpeed comm functions that block until every rank joins
COLLECTIVES = frozenset({
    "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object", "all_reduce",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast",
    "broadcast_object_list", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single",
    "send", "recv", "isend", "irecv", "gather", "scatter", "reduce", "wait", "inference_all_reduce",
    "all_gather_coalesced", "allgather_fn",
})
# ZeRO-3 waits on its own all-gather handles (AllGatherHandle.wait in partition_parameters.py)
_COMM_FILES = ("torch/distributed/", "deepspeed/comm/", "deepspeed/runtime/zero/")
_LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None

    @property
    def short_file(self) -> str:
        """The path after site-packages (torch/distributed/...), else relative to here."""
        for marker in ("site-packages/", "dist-packages/"):
            if marker in self.file:
                return self.file.split(marker, 1)[1]
        if os.path.isabs(self.file):
            rel = os.path.relpath(self.file)
            return rel if not rel.startswith("..") else self.file
        return self.file

    @property
    def where(self) -> str:
        return f"{self.short_file}:{self.line}" if self.line is not None else self.short_file

    @property
    def is_library(self) -> bool:
        return any(d in self.file for d in _LIBRARY_DIRS) or self.file.startswith("<")

    @property
    def is_collective(self) -> bool:
        name = self.function.rsplit(".", 1)[-1]
        return name in COLLECTIVES and any(f in self.file for f in _COMM_FILES)


@dataclass(frozen=True)
class ThreadStack:
    thread_id: str
    state: str  # idle, active, gil, ...
    name: str
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them


@dataclass(frozen=True)
class RankStack:
    """One rank's main-thread stack, or why it could not be read."""

    rank: int | None
    pid: int
    frames: tuple[Frame, ...] = ()
    error: str = ""


def parse_dump(text: str) -> list[ThreadStack]:
    """Parse ``py-spy dump`` output (0.3/0.4 format) into thread stacks."""
    threads: list[ThreadStack] = []
    head: re.Match | None = None
    frames: list[Frame] = []

    def close() -> None:
        if head is not None:
            threads.append(ThreadStack(head["id"], head["state"], head["name"] or "",
                                       tuple(frames)))

    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            close()
            head, frames = m, []
            continue
        f = _FRAME.match(line)
        if f and head is not None:
            frames.append(Frame(f["func"], f["file"], int(f["line"]) if f["line"] else None))
    close()
    return threads


def main_stack(threads: Sequence[ThreadStack]) -> tuple[Frame, ...]:
    """The main thread's frames (the training loop); else the first thread's."""
    for t in threads:
        if t.name == "MainThread":
            return t.frames
    return threads[0].frames if threads else ()


def log_frames(stack: RankStack) -> tuple[LogFrame, ...]:
    """A py-spy stack (innermost first) as a traceback's frames (outermost first), the form the
    rank table reads (diagnose/ranks.py). py-spy names a function by its qualified name
    (``worker.<locals>.mean_loss``); a traceback, and so the table, by its own (``mean_loss``)."""
    return tuple(LogFrame(f.file, f.line or 0, f.function.rsplit(".", 1)[-1])
                 for f in reversed(stack.frames))


def find_py_spy() -> str | None:
    """py-spy on PATH, or next to this Python (a venv's bin/ is often not on PATH)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=DUMP_TIMEOUT)


def dump_rank(proc: RankProcess, py_spy: str, run: Runner = _run) -> RankStack:
    try:
        done = run([py_spy, "dump", "--pid", str(proc.pid), "--full-filenames"])
    except subprocess.TimeoutExpired:
        return RankStack(proc.rank, proc.pid, error=f"py-spy took over {DUMP_TIMEOUT:.0f}s")
    except OSError as exc:
        return RankStack(proc.rank, proc.pid, error=f"py-spy could not run: {exc.strerror}")
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip()
        if "Permission Denied" in err or "Operation not permitted" in err:
            return RankStack(proc.rank, proc.pid, error="ptrace permission denied")
        first = err.splitlines()[0] if err else f"exit status {done.returncode}"
        return RankStack(proc.rank, proc.pid, error=f"py-spy: {first[:200]}")
    return RankStack(proc.rank, proc.pid, frames=main_stack(parse_dump(done.stdout)))


def dump_ranks(procs: Sequence[RankProcess], py_spy: str | None = None,
               run: Runner = _run) -> list[RankStack]:
    """Every rank's stack, dumped in parallel (py-spy pauses each process for a moment)."""
    exe = py_spy or find_py_spy()
    if exe is None:
        return []
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(procs)))) as pool:
        return list(pool.map(lambda p: dump_rank(p, exe, run), procs))


# ------------------------------------------------------------------------------------ the verdict

@dataclass(frozen=True)
class Place:
    """A known place to be stuck in, and what to do about it."""

    label: str
    advice: str


def _place(frames: Sequence[Frame]) -> tuple[Place, Frame] | None:
    """The outermost-known place on the stack (generate, data loader, checkpoint save, lock)."""
    for f in frames:  # innermost first: a lock inside a save is about the lock
        name = f.function.rsplit(".", 1)[-1]
        path = f.file
        if name in ("acquire", "wait") and ("filelock" in path or "file_baton" in path):
            return Place("an extension build lock",
                         "this rank waits for another process's JIT op build; if no rank is "
                         "building (see the other stacks), the lock is stale from a killed build: "
                         "remove the 'lock' file under TORCH_EXTENSIONS_DIR (default "
                         "~/.cache/torch_extensions), or pre-build the ops (DS_BUILD_OPS=1 pip "
                         "install deepspeed)"), f
        if "torch/utils/cpp_extension" in path and name in (
                "_run_ninja_build", "_write_ninja_file_and_build_library", "_jit_compile",
                "load"):
            return Place("a JIT op build",
                         "this rank is compiling a DeepSpeed/torch op with ninja (minutes on the "
                         "first run, then cached in TORCH_EXTENSIONS_DIR): wait, or pre-build the "
                         "ops (DS_BUILD_OPS=1 pip install deepspeed) so ranks never build at "
                         "startup"), f
        if name in ("_next_data", "__next__", "_get_data", "_try_get_data") and \
                "torch/utils/data" in path:
            return Place("the data loader",
                         "this rank waits for a batch: a data loader worker is slow, dead or "
                         "deadlocked; rerun with num_workers=0 to see its error, and check that "
                         "every rank gets the same number of batches"), f
        if name in ("save_checkpoint", "_save_checkpoint", "save_model", "_save") and (
                "deepspeed/" in path or "transformers/" in path or "torch/serialization" in path):
            return Place("a checkpoint save",
                         "this rank is saving a checkpoint while the others went on: every rank "
                         "must call save_checkpoint (DeepSpeed gathers shards from all ranks); if "
                         "all do, the storage is slow: save less often or to local disk"), f
        if name == "generate" and "transformers/generation" in path:
            return Place("generate",
                         "under ZeRO-3 every forward all-gathers the weights from all ranks, so "
                         "ranks that finish generate() early leave the others waiting: pass "
                         "synced_gpus=True to generate()"), f
    return None


@dataclass(frozen=True)
class StackGroup:
    ranks: tuple[int | None, ...]
    frames: tuple[Frame, ...]
    pids: tuple[int, ...] = ()

    def describe(self) -> str:
        who = _ranks_label(self.ranks, self.pids)
        verb_ranks = "wait" if len(self.ranks) > 1 else "waits"
        collective = next((f for f in self.frames if f.is_collective), None)
        user = next((f for f in self.frames if not f.is_library), None)
        place = _place(self.frames)
        if not self.frames:
            return f"{who}: empty stack"
        shown = collective or self.frames[0]
        if collective is not None:
            text = f"{who} {verb_ranks} in {collective.function} ({collective.where})"
        else:
            text = f"{who} {'are' if len(self.ranks) > 1 else 'is'} in {shown.function} ({shown.where})"
        if place is not None and place[1] != shown:
            text += f", inside {place[0].label} ({place[1].where})"
        if user is not None and user != shown and (place is None or user != place[1]):
            text += f", called from {user.function} ({user.where})"
        return text


def _ranks_label(ranks: Sequence[int | None], pids: Sequence[int] = ()) -> str:
    known = sorted(r for r in ranks if r is not None)
    if not known:
        if pids:
            return f"pid{'s' if len(pids) > 1 else ''} {','.join(map(str, sorted(pids)))}"
        return f"{len(ranks)} process{'es' if len(ranks) > 1 else ''}"
    word = "ranks" if len(known) > 1 else "rank"
    if len(known) > 2 and known == list(range(known[0], known[-1] + 1)):
        return f"{word} {known[0]}-{known[-1]}"
    return f"{word} {','.join(map(str, known))}"


def group_stacks(stacks: Sequence[RankStack]) -> list[StackGroup]:
    """Identical main-thread stacks together, largest group first."""
    groups: dict[tuple[Frame, ...], list[RankStack]] = {}
    for s in stacks:
        if s.frames:
            groups.setdefault(s.frames, []).append(s)
    ordered = sorted(groups.items(), key=lambda kv: (
        -len(kv[1]), min((s.rank for s in kv[1] if s.rank is not None), default=0)))
    return [StackGroup(tuple(s.rank for s in members), frames, tuple(s.pid for s in members))
            for frames, members in ordered]


@dataclass(frozen=True)
class StackVerdict:
    """What the stacks say, as lines: the groups (majority first), the odd ones out, advice."""

    lines: tuple[str, ...]


def explain(stacks: Sequence[RankStack]) -> StackVerdict:
    """Group the stacks, name the odd ranks out and the place they are in, with the fix."""
    if not stacks:
        return StackVerdict((f"no rank stacks: {INSTALL_HINT}",))
    lines: list[str] = []
    denied = [s for s in stacks if s.error == "ptrace permission denied"]
    if denied:
        lines.append(PTRACE_HINT)
    for s in stacks:
        if s.error and s.error != "ptrace permission denied":
            lines.append(f"{_ranks_label([s.rank], [s.pid])} (pid {s.pid}): {s.error}")
    groups = group_stacks(stacks)
    if not groups:
        return StackVerdict(tuple(lines))
    if len(groups) == 1:
        one = groups[0]
        lines.append(("all in one place: " if len(one.ranks) > 1 else "") + one.describe())
    else:
        majority = groups[0] if len(groups[0].ranks) > len(groups[1].ranks) else None
        if majority is None:
            lines.append(f"the ranks are in {len(groups)} different places (no majority): a rank "
                         "that left a loop or a collective early leaves the others waiting")
        for g in groups:
            prefix = "odd one out: " if majority is not None and g is not majority else ""
            lines.append(prefix + g.describe())
    for g in groups:
        place = _place(g.frames)
        if place is not None:
            lines.append(f"what to do ({_ranks_label(g.ranks, g.pids)} in {place[0].label}): "
                         f"{place[0].advice}")
    return StackVerdict(tuple(lines))
