"""A collective timeout told only by where it was raised.

c10's ``Exception raised from checkTimeout at .../ProcessGroupNCCL.cpp`` (a fact of
formats/nccl.yaml) is the location line of the error ``WorkNCCL::checkTimeout`` throws, which it
throws only when a collective ran past its timeout. Under the watchdog's own message it repeats
that message; a paste that cut the message off keeps only this line and the watchdog's frames.
Then it is the hang: one symptom per timeout, never a second count of one already told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsdoctor.logs.derived import symptom_from_facts
from dsdoctor.model import Fact, Symptom

TIMEOUT_LOCATION_FACT = "nccl-timeout-location"


def with_located_timeout(symptoms: Mapping[str, Symptom], facts: Sequence[Fact]
                         ) -> dict[str, Symptom]:
    """``symptoms``, plus a hang from the timeouts' location lines when no line told a hang."""
    out = dict(symptoms)
    if "hang" in out:
        return out
    derived = symptom_from_facts("hang", TIMEOUT_LOCATION_FACT, facts)
    if derived is not None:
        out["hang"] = derived
    return out


__all__ = ["TIMEOUT_LOCATION_FACT", "with_located_timeout"]
