"""Child-process probes: torch, DeepSpeed's op report, and another interpreter's packages.

Heavy packages are only ever imported in a child Python process, with a timeout, run isolated
from the directory the user runs dsdoctor in (see :func:`run_probe`). Each probe prints its JSON
after a marker, because libraries may print first.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

# Child-process probe for torch: versions of the CUDA stack torch was built with / sees.
TORCH_PROBE = r"""
import json, sys
out = {}
import torch
out["torch"] = torch.__version__
v = getattr(torch, "version", None)
out["cuda"] = getattr(v, "cuda", None)
out["hip"] = getattr(v, "hip", None)
try:
    out["cudnn"] = torch.backends.cudnn.version()
except Exception as e:
    out["cudnn_error"] = repr(e)
try:
    nccl = torch.cuda.nccl.version()
    out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
except Exception as e:
    out["nccl"] = None
try:
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = int(torch.cuda.device_count()) if out["cuda_available"] else 0
except Exception as e:
    out["cuda_error"] = repr(e)
try:
    from torch.utils import cpp_extension
    out["cpp_extension_cuda_home"] = cpp_extension.CUDA_HOME
except Exception as e:
    out["cpp_extension_error"] = repr(e)
sys.stdout.write("\n@@DSDOCTOR@@" + json.dumps(out) + "\n")
"""

# Child-process probe for DeepSpeed's op compatibility: what ``ds_report`` prints, as data.
# verbose=True so each builder's own warnings ("async_io requires the dev libaio ...") are
# captured and reported, exactly as ds_report shows them.
DEEPSPEED_PROBE = r"""
import contextlib, io, json, re, sys
buf = io.StringIO()
out = {}
with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
    import deepspeed
    from deepspeed.ops.op_builder.all_ops import ALL_OPS
    from deepspeed.ops.op_builder.builder import probe_is_compatible
    from deepspeed.git_version_info import installed_ops, torch_info, accelerator_name
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()._name
    ops = {}
    for name, builder in ALL_OPS.items():
        try:
            compatible = bool(probe_is_compatible(builder, True))
        except Exception as e:
            compatible = None
        ops[name] = {"installed": bool(installed_ops.get(name, False) and accelerator_name == acc),
                     "compatible": compatible}
    try:
        from torch.utils.cpp_extension import is_ninja_available
        ninja = bool(is_ninja_available())
    except Exception:
        ninja = None
    out = {"version": deepspeed.__version__, "git_hash": getattr(deepspeed, "__git_hash__", None),
           "git_branch": getattr(deepspeed, "__git_branch__", None), "accelerator": acc,
           "ninja": ninja, "compiled_with": {k: str(v) for k, v in dict(torch_info).items()},
           "ops": ops}
ansi = re.compile(r"\x1b\[[0-9;]*m")
warnings = []
for line in buf.getvalue().splitlines():
    line = ansi.sub("", line).strip()
    if "[WARNING]" in line and line not in warnings:
        warnings.append(line)
out["warnings"] = warnings[:50]
sys.stdout.write("\n@@DSDOCTOR@@" + json.dumps(out) + "\n")
"""


# Prepended to every child probe: keep only absolute sys.path entries ('' and '.' stand for the
# working directory), in case the interpreter put the working directory there before this runs.
_PROBE_PRELUDE = "import os, sys; sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]\n"


@functools.lru_cache(maxsize=1)
def _neutral_dir() -> str:
    """An empty private directory the child probes run in (removed when dsdoctor exits)."""
    path = tempfile.mkdtemp(prefix="dsdoctor-probe-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def run_probe(python: str, code: str, *argv: str) -> subprocess.Popen[bytes]:
    """Start a child probe; it prints its JSON after a marker (libraries may print first).

    ``python -c`` puts the working directory first on ``sys.path``, so a ``json.py``, ``torch.py``
    or ``sitecustomize.py`` where the user runs dsdoctor would be imported and run. The probe
    therefore runs in an empty private directory, with PYTHONSAFEPATH (3.11+: no working
    directory on ``sys.path`` at all) and a prelude that drops relative entries. ``-I`` is not
    used: it would also drop PYTHONPATH and the user site, where a training environment may keep
    torch or DeepSpeed, and the probe must see what the training sees.
    """
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    env["PYTHONSAFEPATH"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return subprocess.Popen([python, "-c", _PROBE_PRELUDE + code, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env,
                            stdin=subprocess.DEVNULL, cwd=_neutral_dir())


#: Lines of a child probe's own stderr kept in the snapshot (its last ones).
MAX_STDERR_LINES = 50


#: The most of a child's stdout (and, apart, of its stderr) kept: a probe's JSON is a few KiB,
#: ``nvcc --version`` a few hundred bytes. A child that prints more (a planted ``nvcc`` or
#: interpreter flooding its output) is stopped there, its memory never ours.
MAX_CHILD_OUTPUT = 1 << 20


def communicate_bounded(proc: subprocess.Popen[bytes], timeout: float,
                        limit: int = MAX_CHILD_OUTPUT) -> tuple[bytes, bytes, bool]:
    """(stdout, stderr, cut) of a child, at most ``limit`` bytes each; a child past the limit or
    the timeout is killed (``cut`` True for the limit; TimeoutExpired for the timeout)."""
    kept: dict[int, bytearray] = {}
    over = threading.Event()

    def drain(name: int, pipe: Any) -> None:
        buf = kept.setdefault(name, bytearray())
        while True:
            chunk = pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16)
            if not chunk:
                return
            room = limit - len(buf)
            buf += chunk[:max(room, 0)]
            if len(chunk) > room:
                over.set()
                try:
                    proc.kill()
                except OSError:
                    pass
                return

    readers = [threading.Thread(target=drain, args=(i, pipe), daemon=True)
               for i, pipe in enumerate((proc.stdout, proc.stderr)) if pipe is not None]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in readers:
            t.join(timeout=5)
    return bytes(kept.get(0, b"")), bytes(kept.get(1, b"")), over.is_set()


def finish_probe(proc: subprocess.Popen[bytes], what: str, timeout: float) -> dict[str, Any]:
    try:
        raw_out, raw_err, cut = communicate_bounded(proc, timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} probe timed out after {timeout:.0f} s") from None
    if cut:
        raise RuntimeError(f"{what} probe printed more than {MAX_CHILD_OUTPUT:,} bytes; stopped "
                           "(is the interpreter what it should be?)")
    out = raw_out.decode("utf-8", errors="replace")
    err = raw_err.decode("utf-8", errors="replace")
    marker = out.rfind("@@DSDOCTOR@@")
    if marker < 0:
        last = (err or out).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise RuntimeError(f"{what} probe failed (exit {proc.returncode}): {last[0][:300]}")
    lines = out[marker + len("@@DSDOCTOR@@"):].strip().splitlines()
    try:
        data = json.loads(lines[0]) if lines else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):  # a JSON number, a list, garbage: not what a probe prints
        raise RuntimeError(f"{what} probe printed no JSON object after its marker")
    if err and err.strip():
        # what the child wrote to the real stderr (C++ builders, libraries): kept apart, bounded
        kept = [ln.rstrip() for ln in err.splitlines() if ln.strip()]
        data["stderr"] = kept[-MAX_STDERR_LINES:]
    return data


# Run in another interpreter (``dsdoctor env --python PATH``): its version and the versions of the
# packages it has, from package metadata (nothing is imported).
INTERPRETER_PROBE = r"""
import importlib.metadata as md, json, os, platform, sys
names = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
pk = {}
for shown, dists in names.items():
    pk[shown] = None
    for d in dists:
        try:
            pk[shown] = md.version(d)
            break
        except md.PackageNotFoundError:
            pass
out = {"python": {"version": platform.python_version(),
                  "implementation": platform.python_implementation(),
                  "executable": sys.executable,
                  "virtualenv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
                  "conda_env": os.environ.get("CONDA_DEFAULT_ENV")},
       "packages": pk}
print("@@DSDOCTOR@@" + json.dumps(out))
"""


def absolute_which(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``shutil.which`` over the absolute PATH entries only: ``.``, an empty entry (``PATH=:/usr/bin``
    or a trailing ``:``) and relative ones stand for the working directory, where a planted
    ``nvcc`` would be run by ``dsdoctor env``."""
    environ = os.environ if environ is None else environ
    dirs = [d for d in environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(d)]
    return shutil.which(name, path=os.pathsep.join(dirs)) if dirs else None


def training_python(environ: Mapping[str, str] | None = None) -> str:
    """The interpreter the training most likely uses: the active venv's or conda env's, else ours.

    dsdoctor may be installed on its own (pipx, another venv) while the user's shell has the
    training environment activated; its packages are the ones that matter.
    """
    environ = os.environ if environ is None else environ
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = environ.get(var)
        if not prefix or not os.path.isabs(prefix):
            continue  # a relative prefix would run an interpreter from the working directory
        for cand in (os.path.join(prefix, "bin", "python"), os.path.join(prefix, "python.exe")):
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                if os.path.realpath(prefix) != os.path.realpath(sys.prefix):
                    return cand
                return sys.executable
    return sys.executable


def probe_interpreter(python: str, timeout: float,
                      packages: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """Version and package versions of another interpreter, from a child process."""
    proc = run_probe(python, INTERPRETER_PROBE, json.dumps(packages))
    return finish_probe(proc, f"interpreter {python}", timeout)


__all__ = ["DEEPSPEED_PROBE", "INTERPRETER_PROBE", "MAX_CHILD_OUTPUT", "TORCH_PROBE",
           "absolute_which", "communicate_bounded", "finish_probe",
           "probe_interpreter", "run_probe", "training_python"]
