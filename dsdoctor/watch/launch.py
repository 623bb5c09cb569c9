"""``dsdoctor watch -- CMD ARGS...``: launch the training command and tee its output to a log file.

The command runs in its own process group (its own session), so that stopping it reaches every rank
the launcher started, and so that the terminal's Ctrl-C reaches dsdoctor first: dsdoctor then stops
the group in order (SIGINT like a Ctrl-C, then SIGTERM, then SIGKILL after a grace period).
The command is run, never imported; its output is copied byte for byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from dsdoctor.errors import UsageError

GRACE_SECONDS = 10.0  # after SIGINT, and again after SIGTERM, before the next signal


def stamped_path(prefix: str, suffix: str, now: float | None = None) -> str:
    """``PREFIX-YYYYmmdd-HHMMSS.SUFFIX`` in the current directory, absolute."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return os.path.abspath(f"{prefix}-{stamp}.{suffix}")


def default_log_path(now: float | None = None) -> str:
    """``dsdoctor-watch-YYYYmmdd-HHMMSS.log`` in the current directory."""
    return stamped_path("dsdoctor-watch", "log", now)


@dataclass(frozen=True)
class ExitStatus:
    """How the command ended: its exit code, or the signal that ended it."""

    returncode: int

    def describe(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name} (exit status {self.returncode})"
        return f"exit status {self.returncode}"


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The launched command's environment: ours, with ``PYTHONUNBUFFERED=1`` unless it is set.

    The command writes into a pipe, not a terminal, so Python block-buffers its ``print()``s: a
    hand-written loop printing ``step N | loss X`` once a second reaches the log (and the stall
    clock) 8 KiB at a time, every few minutes, and looks hung meanwhile. Unbuffered, each line
    arrives when it is printed, as on a terminal (the launchers on this machine, torchrun and
    deepspeed, pass the environment on to their ranks). A value the user set is left as it is.
    """
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Launched:
    """A running command whose stdout+stderr go to ``log_path`` (appended to, never truncated)."""

    def __init__(self, argv: list[str], log_path: str):
        if not argv:
            raise UsageError("nothing to launch after '--': give the training command, "
                             "e.g. 'dsdoctor watch -- deepspeed train.py'")
        self.argv = argv
        self.log_path = log_path
        existed = os.path.exists(log_path)
        try:
            self._log = open(log_path, "ab")  # noqa: SIM115 - closed by the copier thread
        except OSError as exc:
            raise UsageError(f"{log_path}: cannot write the command's log ({exc.strerror}); "
                             "choose another place with --log-file") from exc
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=child_environment(os.environ))
        except OSError as exc:
            self._log.close()
            if not existed:  # leave no empty log behind for a command that never started
                os.unlink(log_path)
            raise UsageError(f"cannot start {argv[0]!r}: {exc.strerror}; "
                             "check the command after '--'") from exc
        self.pid = self.proc.pid
        self._copier = threading.Thread(target=self._copy, daemon=True, name="dsdoctor-tee")
        self._copier.start()

    def _copy(self) -> None:
        # read1: whatever is available, so a progress line reaches the log (and the stall
        # detector) as soon as the command prints it, not when a 64 KiB block fills up
        assert self.proc.stdout is not None
        with self._log:
            while True:
                data = self.proc.stdout.read1(1 << 16)  # type: ignore[attr-defined]  # a BufferedReader
                if not data:
                    break
                self._log.write(data)
                self._log.flush()

    def poll(self) -> ExitStatus | None:
        """The exit status once the command has ended and its output is all in the log."""
        code = self.proc.poll()
        if code is None:
            return None
        self._copier.join(timeout=5)
        return ExitStatus(code)

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def stop(self, grace: float = GRACE_SECONDS) -> ExitStatus | None:
        """SIGINT to the group, then SIGTERM, then SIGKILL, each after ``grace`` seconds."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            if not self._signal_group(sig):
                break
            status = self.wait(timeout=grace if sig != signal.SIGKILL else 5.0)
            if status is not None:
                # the launcher is gone; ranks it left behind in the group are ended too
                self._signal_group(signal.SIGTERM)
                return status
        return self.poll()
