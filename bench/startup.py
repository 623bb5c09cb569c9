"""Start-up cost: the README sample's analysis against a bare ``python -c pass`` of the same
interpreter.

Runs them interleaved (so that the shared machine's load hits all alike) and prints median wall
and CPU (user + system, from wait4) of each and their ratios to the bare interpreter's, for the
JSON output and for the text output README command 1 prints.

Which install is measured matters:
- by default, this checkout through the interpreter running the script (an editable install in
  the project's venv). An editable install's finder runs at every interpreter start, ``python -c
  pass`` included, and imports pathlib, typing and more: it adds ~10 ms to the baseline and
  flatters the ratio;
- ``--installed``: a venv under bench/out/ where dsdoctor is installed as README command 1
  installs it (``pip install .``; the code is refreshed on every run), the way users run it;
- ``--code DIR``: also an older copy of the package (e.g. ``git archive`` of a commit), through
  PYTHONPATH, in the same run.
A third command is the floor: an interpreter importing just the standard-library modules the
analysis imports, and nothing else.
The data cache and bytecode are written once before timing, as after any install:
PYTHONDONTWRITEBYTECODE is removed from the children's environment (set, as on this project's
machine, every run compiles about 90 modules from source, CPU that no installed copy spends).
Children run in an empty directory, so that ``-m dsdoctor`` finds the install being measured.

    python bench/startup.py --repeat 21 [--installed] [--code /tmp/before]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE = REPO / "sample_logs" / "fp16_loss_scale_collapse"
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``cmd``."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=cwd)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime


def installed_python() -> str:
    """The interpreter of bench/out/venv-installed, with this checkout installed as README
    command 1 does it (created once; the package refreshed on every run)."""
    venv = HERE / "out" / "venv-installed"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO)], check=True)
    else:
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                        str(REPO)], check=True)
    return str(py)


# Run in a child: the standard-library modules a JSON analysis imports beyond a bare interpreter's.
_STDLIB_USED = """
import contextlib, io, json, sys
bare = set(json.loads(sys.argv[1]))
from dsdoctor.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[2:])
print(json.dumps(sorted(m for m in sys.modules
                        if m not in bare and m.split(".")[0] in sys.stdlib_module_names)))
"""


def stdlib_floor_cmd(python: str, cwd: str) -> list[str]:
    """``python -c`` importing just the standard-library modules the README sample's JSON
    analysis imports: the floor no Python implementation of this design can go under."""
    # (the bare interpreter's modules printed without importing json for it)
    bare = subprocess.run([python, "-c", "import sys; print(repr(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True, cwd=cwd).stdout
    bare = json.dumps(ast.literal_eval(bare))
    used = subprocess.run([python, "-c", _STDLIB_USED, bare, *analyze_cmd(python, "json")[3:]],
                          capture_output=True, text=True, check=True, cwd=cwd, env=CHILD_ENV).stdout
    names = json.loads(used)
    return [python, "-c", f"import importlib\nfor m in {names!r}:\n    importlib.import_module(m)"]


def analyze_cmd(python: str, output: str) -> list[str]:
    cmd = [python, "-m", "dsdoctor", "analyze", str(SAMPLE / "train.log"), "--config",
           str(SAMPLE / "ds_config.json")]
    return cmd + (["--format", "json"] if output == "json" else [])


def measure(python: str, repeat: int, code: str | None = None) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of ``python -c pass`` and of the README sample's analysis
    (json and text, and with ``code`` the older copy's), each with its ratio to the bare run."""
    runs: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([python, "-c", "pass"], CHILD_ENV),
        "analyze --format json": (analyze_cmd(python, "json"), CHILD_ENV),
        "analyze (text)": (analyze_cmd(python, "text"), CHILD_ENV),
    }
    with tempfile.TemporaryDirectory() as cwd:
        runs["its standard-library imports only"] = (stdlib_floor_cmd(python, cwd), CHILD_ENV)
    if code:
        # -P: otherwise ``-m`` finds the working directory's dsdoctor first
        cmd = analyze_cmd(python, "json")
        runs["analyze --format json (--code)"] = (
            [cmd[0], "-P", *cmd[1:]], dict(CHILD_ENV, PYTHONPATH=os.path.abspath(code)))
    with tempfile.TemporaryDirectory() as cwd:
        for cmd, env in runs.values():
            timed(cmd, env, cwd)  # bytecode and the data cache written once
        walls: dict[str, list[float]] = {k: [] for k in runs}
        cpus: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(repeat):
            for name, (cmd, env) in runs.items():
                w, c = timed(cmd, env, cwd)
                walls[name].append(w)
                cpus[name].append(c)
    bw, bc = statistics.median(walls["python -c pass"]), statistics.median(cpus["python -c pass"])
    out = {}
    for name in runs:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        out[name] = {"wall_s": w, "cpu_s": c, "wall_ratio": w / bw, "cpu_ratio": c / bc}
    return out


def print_table(title: str, results: dict[str, dict[str, float]]) -> None:
    print(title)
    for name, r in results.items():
        print(f"  {name:32s} wall {r['wall_s']:6.3f} s ({r['wall_ratio']:5.1f}x)   "
              f"cpu {r['cpu_s']:6.3f} s ({r['cpu_ratio']:5.1f}x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--installed", action="store_true",
                    help="also measure a venv where dsdoctor is installed as README command 1 does")
    ap.add_argument("--code", help="also time the dsdoctor package found in this directory")
    a = ap.parse_args()
    print_table(f"this checkout ({sys.executable})", measure(sys.executable, a.repeat, a.code))
    if a.installed:
        py = installed_python()
        print_table(f"installed with pip install . ({py})", measure(py, a.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
