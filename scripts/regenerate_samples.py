#!/usr/bin/env python3
"""Regenerate sample_logs/ from real DeepSpeed runs: every scenario, or the ones named.

Run it with the Python of an environment that has torch + deepspeed + transformers (see
scripts/install_deepspeed.sh)::

    /path/to/venv-ds/bin/python scripts/regenerate_samples.py                 # all scenarios
    /path/to/venv-ds/bin/python scripts/regenerate_samples.py zero3_generate_hang
    /path/to/venv-ds/bin/python scripts/regenerate_samples.py --list
    /path/to/venv-ds/bin/python scripts/regenerate_samples.py --out /tmp/s fp16_loss_scale_collapse

Each scenario script in scripts/scenarios/ launches its own real run (the deepspeed launcher or
torchrun, 2 CPU ranks, gloo) and rewrites its folder; scenarios made from public issue logs (GPU-only
failures) have no script and are never touched. ``--check`` then runs dsdoctor analyze on each
regenerated folder (needs dsdoctor importable by this Python) and prints what it misses.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
SCENARIO_DIR = SCRIPTS / "scenarios"
REPO = SCRIPTS.parent


def available() -> list[str]:
    """Scenario names: one script each in scripts/scenarios (helpers start with '_')."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--out", type=Path, help="write into OUT/<scenario> instead of sample_logs/")
    p.add_argument("--check", action="store_true", help="run dsdoctor analyze on the results")
    args = p.parse_args(argv)
    names = available()
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [s for s in args.scenarios if s not in names]
    if unknown:
        print(f"regenerate_samples: unknown scenario(s) {', '.join(unknown)}; "
              f"choose from: {', '.join(names)}", file=sys.stderr)
        return 2
    failed = []
    for name in args.scenarios or names:
        out = (args.out or REPO / "sample_logs") / name
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, str(SCENARIO_DIR / f"{name}.py"), "--out", str(out)])
        print(f"== {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {time.monotonic() - t0:.0f} s",
              flush=True)
        if rc:
            failed.append(name)
        elif args.check:
            sys.path.insert(0, str(SCRIPTS))
            import sample_check  # noqa: PLC0415

            if sample_check.main([str(out)]):
                failed.append(f"{name} (check)")  # --check must be able to fail
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
