"""Shared pytest options and markers.

* ``--update-golden``: rewrite ``tests/golden/*`` from the current renderers instead of comparing
  (review the result with ``git diff tests/golden``).
* ``deepspeed`` marker: tests that run real DeepSpeed scenarios. They need a Python that can import
  ``torch`` and ``deepspeed`` (this one, or the one named by ``--ds-python`` / ``DSDOCTOR_DS_PYTHON``)
  and are skipped with the reason when there is none; nothing is ever installed by the tests.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsdoctor")
    group.addoption("--update-golden", action="store_true", default=False,
                    help="rewrite tests/golden/* from the current output instead of comparing")
    group.addoption("--ds-python", default=os.environ.get("DSDOCTOR_DS_PYTHON", ""),
                    help="Python with torch + deepspeed for the 'deepspeed' tests "
                    "(default: $DSDOCTOR_DS_PYTHON, else this interpreter)")


@functools.cache
def deepspeed_python_problem(python: str) -> str | None:
    """Why ``python`` cannot run the live scenarios (None when it can).

    Checked in a subprocess so that this test process never imports torch or deepspeed itself.
    """
    probe = ("import importlib.util as u, sys; "
             "missing=[m for m in ('torch','deepspeed','transformers') if u.find_spec(m) is None]; "
             "print(','.join(missing)); sys.exit(0)")
    try:
        proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    missing = proc.stdout.strip()
    if proc.returncode != 0:
        return f"{python} failed: {proc.stderr.strip()[-200:]}"
    if missing:
        return (f"{missing} not importable by {python}; install them with "
                f"scripts/install_deepspeed.sh VENV and pass --ds-python VENV/bin/python "
                f"(or set DSDOCTOR_DS_PYTHON)")
    return None


@pytest.fixture(scope="session")
def ds_python(request: pytest.FixtureRequest) -> str:
    """The Python interpreter that runs the live DeepSpeed scenarios."""
    return request.config.getoption("--ds-python") or sys.executable


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run should rewrite golden files."""
    return bool(request.config.getoption("--update-golden"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the ``deepspeed``-marked tests, with the reason, when DeepSpeed cannot run."""
    ds_items = [item for item in items if item.get_closest_marker("deepspeed")]
    if not ds_items:
        return
    python = config.getoption("--ds-python") or sys.executable
    problem = deepspeed_python_problem(python)
    if problem and os.environ.get("DSDOCTOR_REQUIRE_DEEPSPEED"):
        # CI installs DeepSpeed on purpose: there a missing DeepSpeed is a failure, not a skip
        raise pytest.UsageError(f"DSDOCTOR_REQUIRE_DEEPSPEED is set but {problem}")
    if problem:
        skip = pytest.mark.skip(reason=f"DeepSpeed live tests skipped: {problem}")
        for item in ds_items:
            item.add_marker(skip)


SHM = "/dev/shm"


@pytest.fixture(autouse=True)
def _remove_deepspeed_shared_memory(request: pytest.FixtureRequest):
    """DeepSpeed's CPU accelerator gives each run two 66 MB all-reduce buffers in /dev/shm
    (``deepspeed_allreduce_buffer_*``) and never removes them; a rank that is killed (the hang
    scenarios end that way) cannot. They are RAM: 290 left by earlier runs held 19 GB of this
    machine's 24 GB and made the live tests time out. Each live test removes the ones it made."""
    if not request.node.get_closest_marker("deepspeed") or not os.path.isdir(SHM):
        yield
        return
    before = {n for n in os.listdir(SHM) if n.startswith("deepspeed_")}
    yield
    for name in os.listdir(SHM):
        if name.startswith("deepspeed_") and name not in before:
            try:
                os.unlink(os.path.join(SHM, name))
            except OSError:
                pass
