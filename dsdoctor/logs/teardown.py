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

from dsdoctor.logs.derived import symptom_from_facts
from dsdoctor.model import Fact, Symptom

TEARDOWN_FACT = "launcher-teardown"
#: Kinds that already say how the ranks ended: the teardown adds nothing to them.
ENDINGS = frozenset({"launcher-nonzero-exit", "run-stopped", "cpu-oom", "job-time-limit"})


def with_launcher_exit(symptoms: Mapping[str, Symptom], facts: Sequence[Fact]
                       ) -> dict[str, Symptom]:
    """``symptoms``, plus a launcher-nonzero-exit derived from the teardown lines when no
    symptom says how the ranks ended."""
    out = dict(symptoms)
    if ENDINGS & set(out):
        return out
    derived = symptom_from_facts("launcher-nonzero-exit", TEARDOWN_FACT, facts)
    if derived is not None:
        out["launcher-nonzero-exit"] = derived
    return out


__all__ = ["ENDINGS", "TEARDOWN_FACT", "with_launcher_exit"]
