"""Shared plumbing for the scenario scripts that produce ``sample_logs/<scenario>/`` from real runs.

Each scenario script has two roles:

* **driver** (``python scripts/scenarios/<name>.py --out DIR``): writes the config, launches the real
  ``deepspeed`` launcher (or ``accelerate launch``) on the same script in worker mode, and captures the
  launcher's stdout+stderr byte for byte into ``DIR/*.log``; then writes ``expected.json`` and the
  ``README.md`` notes with the versions used and how long the run took.
* **worker** (``--worker``): the training process each rank runs.

Nothing here is imported by dsdoctor; this is tooling that needs torch + deepspeed (+ transformers).
The driver must run with the Python of the environment that has DeepSpeed installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

SCENARIO_DIR = Path(__file__).resolve().parent
REPO = SCENARIO_DIR.parents[1]
SAMPLE_LOGS = REPO / "sample_logs"


# --------------------------------------------------------------------------------------------- worker


def patch_cpu_fp16() -> None:
    """Let DeepSpeed's CPU accelerator accept fp16.

    ``CPU_Accelerator.is_fp16_supported()`` returns False unless oneDNN reports native fp16 (it does
    not on this machine), and ``DeepSpeedEngine._do_sanity_check`` then refuses ``fp16.enabled``.
    Only that capability answer is patched: fp16 tensors work on CPU (slowly), so DeepSpeed's real
    fp16 optimizer, overflow check and dynamic loss scaler run unchanged.
    """
    import torch
    from deepspeed.accelerator import get_accelerator

    cls = type(get_accelerator())
    cls.is_fp16_supported = lambda self: True  # type: ignore[method-assign]
    cls.supported_dtypes = lambda self: [torch.float, torch.bfloat16, torch.float16]  # type: ignore[method-assign]


def set_deepspeed_log_level(level: str = "info") -> None:
    """Show DeepSpeed's INFO lines (loss-scale messages, step lines), as users do to see them."""
    try:
        from deepspeed.utils.logging import set_log_level_from_string
    except ImportError:  # older releases (<= 0.15) log at INFO already and lack the helper
        import logging

        from deepspeed.utils import logger

        logger.setLevel(getattr(logging, level.upper()))
        for handler in logger.handlers:
            handler.setLevel(getattr(logging, level.upper()))
        return
    set_log_level_from_string(level)


def worker_args(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """Parse the worker's arguments; the deepspeed launcher appends ``--local_rank=N``."""
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    p.add_argument("--deepspeed_config", default=None)
    p.add_argument("--timeout", type=float, default=30.0)
    if extra:
        extra(p)
    args, _ = p.parse_known_args()
    return args


# --------------------------------------------------------------------------------------------- driver


@dataclass
class Run:
    """One launched process group whose combined output becomes one log file."""

    log_name: str
    argv: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    timed_out: bool = False


@dataclass
class Outcome:
    """What a driver produced: its runs and the scenario's own notes."""

    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)


def free_port() -> int:
    """A TCP port free right now on localhost (each run gets its own rendezvous port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the launched processes: unbuffered output so ranks' lines keep their order."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    # Nothing may be downloaded: every model is built from a config.
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # DeepSpeed's CPU accelerator counts its "devices" from LOCAL_SIZE, else from `numactl
    # --hardware`; releases up to 0.15 crash in the launcher when numactl is not installed. Every
    # scenario runs 2 ranks on one node.
    env.setdefault("LOCAL_SIZE", "2")
    # One JIT-op cache per DeepSpeed release: releases share op names but not sources, so with one
    # shared cache every switch between releases (CI runs two) rebuilds the ops (~1 min each).
    ds = package_versions()["deepspeed"] or "none"
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions" / f"deepspeed-{ds}"))
    env.update(extra or {})
    return env


def deepspeed_cmd(script: Path, n_ranks: int, script_args: Sequence[str], port: int | None = None) -> list[str]:
    """The real ``deepspeed`` launcher command line, as users type it."""
    exe = Path(sys.executable).parent / "deepspeed"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "deepspeed.launcher.runner"]
    return [*base, f"--num_gpus={n_ranks}", f"--master_port={port or free_port()}",
            str(script), *script_args]


def run_logged(run: Run, out: Path, *, env: dict[str, str] | None = None, timeout: float = 600,
               cwd: Path | None = None,
               watch: Callable[[subprocess.Popen], None] | None = None) -> Run:
    """Run ``run.argv`` with stdout+stderr going, unmodified, into ``out/run.log_name``.

    The launcher's own lines and every rank's lines land in one file in the order the OS delivered
    them, exactly as a user's terminal or ``tee`` would have them. A run that outlives ``timeout``
    is killed (its process group) and noted; the log keeps what was printed.
    """
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / run.log_name
    t0 = time.monotonic()
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(run.argv, stdout=fh, stderr=subprocess.STDOUT, env=env or launcher_env(),
                                cwd=str(cwd or out), start_new_session=True)
        if watch is not None:
            threading.Thread(target=watch, args=(proc,), daemon=True).start()
        try:
            run.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            os.killpg(proc.pid, 9)
            run.returncode = proc.wait()
    run.seconds = round(time.monotonic() - t0, 1)
    return run


class RssWatchdog:
    """A stand-in for the kernel OOM killer: SIGKILL the largest worker when the node is "full".

    It polls the launcher's descendant processes and, when their summed resident memory passes
    ``limit_bytes`` (the RAM of the node the env snapshot describes), sends SIGKILL to the one with
    the most RSS, as the kernel's OOM killer picks its victim by memory use. Like the kernel, it
    prints nothing into the run's log; the launcher sees the signal as return code -9.
    """

    def __init__(self, limit_bytes: int, interval: float = 0.05) -> None:
        self.limit_bytes = limit_bytes
        self.interval = interval
        self.peak_bytes = 0
        self.killed: dict[str, Any] | None = None

    def __call__(self, proc: subprocess.Popen) -> None:
        import psutil

        try:
            root = psutil.Process(proc.pid)
        except psutil.NoSuchProcess:
            return
        while proc.poll() is None and self.killed is None:
            procs, total = [], 0
            for p in root.children(recursive=True):
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                procs.append((rss, p))
                total += rss
            self.peak_bytes = max(self.peak_bytes, total)
            if total > self.limit_bytes and procs:
                rss, victim = max(procs, key=lambda t: t[0])
                try:
                    victim.kill()  # SIGKILL, like the OOM killer
                    self.killed = {"pid": victim.pid, "rss_bytes": rss, "total_rss_bytes": total}
                except psutil.Error:
                    pass
            time.sleep(self.interval)


class StepTrigger:
    """Act on a running launch once the log shows ``n`` progress lines (a person or a scheduler).

    Polls the log file the run writes (the same bytes the user sees) for lines matching
    ``pattern``; at the ``n``-th it calls ``action(proc)`` once, with ``proc`` the launcher command
    the driver started, and keeps what the action returned (which pid got which signal) and the
    last progress line seen, for the scenario's README. It prints nothing into the log.
    """

    def __init__(self, log_path: Path, pattern: str, n: int,
                 action: Callable[[subprocess.Popen], dict[str, Any]], interval: float = 0.1) -> None:
        import re

        self.log_path = log_path
        self.regex = re.compile(pattern, re.M)
        self.n = n
        self.action = action
        self.interval = interval
        self.fired: dict[str, Any] | None = None

    def __call__(self, proc: subprocess.Popen) -> None:
        while proc.poll() is None and self.fired is None:
            try:
                text = self.log_path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            hits = self.regex.findall(text)
            if len(hits) >= self.n:
                last = [ln for ln in text.splitlines() if self.regex.search(ln)][-1]
                self.fired = {"after": last, **self.action(proc)}
                return
            time.sleep(self.interval)


def launcher_processes(proc: subprocess.Popen) -> dict[str, Any]:
    """The processes under the ``deepspeed`` command: ``runner`` (the command itself), ``launch``
    (its ``deepspeed.launcher.launch`` child, which spawns the ranks) and ``ranks`` (local rank ->
    psutil.Process), found by their command lines."""
    import psutil

    runner = psutil.Process(proc.pid)
    out: dict[str, Any] = {"runner": runner, "launch": None, "ranks": {}}
    for p in runner.children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "deepspeed.launcher.launch" in cmd:
            out["launch"] = p
        for a in cmd:
            if a.startswith("--local_rank="):
                out["ranks"][int(a.split("=", 1)[1])] = p
    return out


def free_ram_bytes() -> int:
    """MemAvailable from /proc/meminfo (what the kernel could give without swapping)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return -1


def remove_shm_buffers(port: int) -> list[str]:
    """Remove the /dev/shm all-reduce buffers of the run on ``port``.

    DeepSpeed's CPU accelerator names them ``deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>``
    (66 MB each) and never removes them; a killed or stopped rank cannot. Only this run's are
    removed (by its port), so other runs on the machine keep theirs.
    """
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    gone = []
    for f in shm.glob(f"deepspeed_*_{port}_*"):
        try:
            f.unlink()
            gone.append(f.name)
        except OSError:
            pass
    return gone


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with a trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def package_versions() -> dict[str, str | None]:
    """Versions of the packages that printed the logs (None when absent)."""
    out: dict[str, str | None] = {}
    for name in ("torch", "deepspeed", "transformers", "accelerate"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def env_snapshot(*, ram_total_bytes: int, cpu_count: int,
                 gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An env.json in the shape ``dsdoctor env --format json`` writes (the keys analyze reads).

    The packages are the ones that produced the log; CPU, RAM and GPUs describe the node the run
    is sized for (the scenario's README says so).
    """
    return {
        "schema_version": 1,
        "python": {"version": platform.python_version()},
        "cpu": {"count": cpu_count, "ram_total_bytes": ram_total_bytes},
        "gpus": gpus or [],
        "packages": package_versions(),
    }


def write_expected(out: Path, symptoms: list[str], rules: list[str], must_not: list[str], *,
                   max_severity: str | None = None, scripts: list[str] | None = None,
                   must_not_rules: list[str] | None = None, fate: str | None = None) -> None:
    """``expected.json``: what a correct ``dsdoctor analyze`` must (and must not) report.

    ``max_severity``: the worst finding severity allowed (healthy runs); ``scripts``: training
    scripts (relative to the repository) that analyze gets with ``--script``; ``must_not_rules``:
    rule codes that would be wrong diagnoses of this run; ``fate``: the verdict a correct analysis
    gives (failed, hung, not-learning, recovered, healthy), which sets the exit code.
    """
    d: dict[str, Any] = {"symptoms": symptoms, "rules": rules, "must_not": must_not}
    if max_severity:
        d["max_severity"] = max_severity
    if must_not_rules:
        d["must_not_rules"] = must_not_rules
    if scripts:
        d["scripts"] = scripts
    if fate:
        d["fate"] = fate
    write_json(out / "expected.json", d)


def write_readme(out: Path, scenario: str, title: str, body: str, outcome: Outcome) -> None:
    """The scenario's notes: what it shows, how it was made, versions, what was patched, timing."""
    v = package_versions()
    runs = "\n".join(
        f"- `{r.log_name}`: `{' '.join(_display_argv(r.argv))}` -> exit code {r.returncode}"
        + (" (killed by the driver's timeout)" if r.timed_out else "") + f", {r.seconds:.0f} s"
        for r in outcome.runs
    )
    text = f"""# {scenario}: {title}

{body.strip()}

## How it was made
Generated by `scripts/scenarios/{scenario}.py` (regenerate with
`python scripts/regenerate_samples.py {scenario}` using the Python of an environment with DeepSpeed).
The logs are the launcher's stdout+stderr captured byte for byte; nothing in them was edited.

{runs}

Regeneration takes about {max(1, round(outcome.seconds))} s on a 2-core CPU-only machine.

## Versions
- deepspeed {v['deepspeed']}, torch {v['torch']}, transformers {v['transformers']}, accelerate {v['accelerate']}
- Python {platform.python_version()}, {platform.system()} {platform.machine()}, CPU accelerator, gloo backend
"""
    (out / "README.md").write_text(text, encoding="utf-8")


def _display_argv(argv: Sequence[str]) -> list[str]:
    """argv with the machine's paths shortened so the notes do not depend on where the repo lives."""
    shown = []
    for a in argv:
        a = a.replace(str(REPO) + "/", "")
        if a == sys.executable or a.startswith(str(Path(sys.executable).parent) + "/"):
            a = Path(a).name
        shown.append(a)
    return shown


def driver_main(name: str, generate: Callable[[Path], Outcome], worker: Callable[[], None]) -> None:
    """Entry point shared by every scenario script: worker mode or driver mode."""
    if "--worker" in sys.argv:
        worker()
        return
    p = argparse.ArgumentParser(description=f"Regenerate sample_logs/{name} from a real run.")
    p.add_argument("--out", type=Path, default=SAMPLE_LOGS / name, help="output folder")
    args = p.parse_args()
    out: Path = args.out
    if out.exists():
        # Old logs would mix with the new ones; only files this script writes are removed.
        for f in out.iterdir():
            if f.is_file():
                f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    outcome = generate(out)
    print(f"{name}: wrote {out} in {time.monotonic() - t0:.0f} s "
          f"({', '.join(f'{r.log_name} rc={r.returncode}' for r in outcome.runs)})")


def require(cond: bool, msg: str) -> None:
    """Fail the regeneration loudly when the real run did not show what the scenario is about."""
    if not cond:
        raise SystemExit(f"scenario check failed: {msg}")


def read_log(out: Path, name: str) -> str:
    """The captured log as text (for the driver's own sanity checks)."""
    return (out / name).read_text(encoding="utf-8", errors="replace")


__all__ = [
    "Outcome", "RssWatchdog", "Run", "SAMPLE_LOGS", "SCENARIO_DIR", "StepTrigger", "deepspeed_cmd",
    "driver_main", "env_snapshot", "free_port", "free_ram_bytes", "launcher_env", "launcher_processes",
    "remove_shm_buffers", "package_versions", "patch_cpu_fp16", "read_log", "require",
    "run_logged", "set_deepspeed_log_level", "worker_args", "write_expected",
    "write_json", "write_readme",
]
