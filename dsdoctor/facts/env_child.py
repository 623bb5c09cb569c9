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


def run_probe(python: str, code: str, *argv: str) -> subprocess.Popen[str]:
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
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, cwd=_neutral_dir())


#: Lines of a child probe's own stderr kept in the snapshot (its last ones).
MAX_STDERR_LINES = 50


def finish_probe(proc: subprocess.Popen[str], what: str, timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{what} probe timed out after {timeout:.0f} s") from None
    marker = out.rfind("@@DSDOCTOR@@")
    if marker < 0:
        last = (err or out).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise RuntimeError(f"{what} probe failed (exit {proc.returncode}): {last[0][:300]}")
    data = json.loads(out[marker + len("@@DSDOCTOR@@"):].strip().splitlines()[0])
    if isinstance(data, dict) and err and err.strip():
        # what the child wrote to the real stderr (C++ builders, libraries): kept apart, bounded
        lines = [ln.rstrip() for ln in err.splitlines() if ln.strip()]
        data["stderr"] = lines[-MAX_STDERR_LINES:]
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


def training_python(environ: Mapping[str, str] | None = None) -> str:
    """The interpreter the training most likely uses: the active venv's or conda env's, else ours.

    dsdoctor may be installed on its own (pipx, another venv) while the user's shell has the
    training environment activated; its packages are the ones that matter.
    """
    environ = os.environ if environ is None else environ
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = environ.get(var)
        if not prefix:
            continue
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


__all__ = ["DEEPSPEED_PROBE", "INTERPRETER_PROBE", "TORCH_PROBE", "finish_probe",
           "probe_interpreter", "run_probe", "training_python"]
