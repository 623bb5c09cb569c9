"""Follow a growing log for ``dsdoctor watch``: read new bytes, scan them, evaluate the rules.

Used by the TUI (tui.py) and by ``watch --plain``; it imports no UI library.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from dsdoctor.facts.inputs import AnalysisInputs
from dsdoctor.model import Evidence, Finding
from dsdoctor.diagnose.pipeline import evaluate
from dsdoctor.render.analysis import timeline_summary
from dsdoctor.logs.scan import Scanner, TailScanner

POLL_SECONDS = 0.5
READ_BYTES = 4 << 20


@dataclass
class WatchState:
    """What the UI shows; replaced (not mutated) by the worker under a lock."""

    lines: int = 0
    bytes: int = 0
    symptoms: tuple = ()
    findings: tuple[Finding, ...] = ()
    timeline: str = ""
    error: str = ""


class Tailer:
    """Follows one file (also across truncation/rotation), feeding a TailScanner."""

    def __init__(self, path: str, inputs: AnalysisInputs, from_start: bool = True,
                 scanner: Scanner | None = None):
        self.path = path
        self.inputs = inputs
        self.events: list[tuple[str, Evidence, dict]] = []
        # hook for watch/follow.py: timeline events are progress (stall detection)
        self.on_progress: Callable[[Evidence, dict], None] | None = None
        self._lock = threading.Lock()
        # several logs followed together share one Scanner, so their symptoms aggregate
        self._scanner = scanner or Scanner(engine=inputs.engine)
        self.tail = TailScanner(path, self._scanner, on_event=self._on_event)
        self._pos = 0 if from_start else (os.path.getsize(path) if os.path.exists(path) else 0)
        self._ino = None
        self.state = WatchState()

    def _on_event(self, kind: str, ev: Evidence, values: dict) -> None:
        if kind == "timeline" and self.on_progress is not None:
            self.on_progress(ev, values)
        if kind == "timeline" or kind.startswith("fact:"):
            return
        with self._lock:
            self.events.append((kind, ev, values))

    def take_events(self) -> list[tuple[str, Evidence, dict]]:
        with self._lock:
            out, self.events = self.events, []
        return out

    def poll(self) -> bool:
        """Read what is new; True when something was read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.state = dataclasses.replace(self.state, error=f"waiting for {self.path}")
            return False
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self._pos):
            # rotated or truncated: start over on the new file
            self._pos = 0
            self._scanner = Scanner(engine=self.inputs.engine)
            self.tail = TailScanner(self.path, self._scanner, on_event=self._on_event)
        self._ino = st.st_ino
        if st.st_size <= self._pos:
            self.tail.flush()
            return False
        with open(self.path, "rb") as fh:
            fh.seek(self._pos)
            data = fh.read(READ_BYTES)
        self._pos += len(data)
        self.tail.feed(data)
        return True

    def snapshot(self) -> WatchState:
        res = self.tail.result()
        try:
            findings, _, _ = evaluate(self.inputs, res)
            error = ""
        except Exception as exc:  # noqa: BLE001 - a rule failing must not kill the watcher
            findings, error = list(self.state.findings), f"rules: {exc}"
        return WatchState(
            lines=self.tail.lines_read,
            bytes=self.tail.bytes_read,
            symptoms=tuple(sorted(res.symptoms.values(), key=lambda s: s.first.line)),
            findings=tuple(findings),
            timeline=timeline_summary(tuple(res.timeline)),
            error=error,
        )
