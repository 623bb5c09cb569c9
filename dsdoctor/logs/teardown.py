"""A launcher ending its ranks says a rank failed, even when the paste stops before its exit line.

DeepSpeed's launcher prints ``sigkill_handler] Killing subprocess N`` and torch elastic's agent
``Sending process N closing signal SIGTERM`` (facts of formats/deepspeed-launcher.yaml and
torch-elastic.yaml) in two cases: a rank exited non-zero, or the launcher itself got a signal. A
paste that stops after those lines shows neither the exit code nor a signal. When nothing else in
the log says how the ranks ended (no launcher exit line, no stop signal, no SIGKILL or OOM kill,
no scheduler's end), the teardown is the launcher's reaction to a rank that exited: a
launcher-nonzero-exit with no code (issue 19: the collectors' reading of such pastes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsdoctor.model import Fact, Symptom

TEARDOWN_FACT = "launcher-teardown"
#: Kinds that already say how the ranks ended: the teardown adds nothing to them.
ENDINGS = frozenset({"launcher-nonzero-exit", "run-stopped", "cpu-oom", "job-time-limit"})
MAX_EVIDENCE = 8


def with_launcher_exit(symptoms: Mapping[str, Symptom], facts: Sequence[Fact]
                       ) -> dict[str, Symptom]:
    """``symptoms``, plus a launcher-nonzero-exit derived from the teardown lines when no
    symptom says how the ranks ended."""
    out = dict(symptoms)
    if ENDINGS & set(out):
        return out
    evidence = sorted((f.evidence for f in facts if f.name == TEARDOWN_FACT),
                      key=lambda e: (e.file, e.line))
    if not evidence:
        return out
    out["launcher-nonzero-exit"] = Symptom(
        kind="launcher-nonzero-exit", count=len(evidence), evidence=tuple(evidence[:MAX_EVIDENCE]),
        first=evidence[0], last=evidence[-1],
        ranks=tuple(sorted({e.rank for e in evidence if e.rank is not None})),
        files=tuple(dict.fromkeys(e.file for e in evidence)),
        patterns={TEARDOWN_FACT: len(evidence)}, values={})
    return out


__all__ = ["ENDINGS", "TEARDOWN_FACT", "with_launcher_exit"]
