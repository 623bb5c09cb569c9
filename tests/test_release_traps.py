"""Version arithmetic of the release-combination checks (checks/release_traps.py)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from dsdoctor.diagnose.checks.release_traps import _deepcompile_range, _torch_in


@pytest.mark.parametrize(("torch_v", "high"), [("2.7.0+cu126", "2.7"), ("2.9.0+cu128", "2.9"),
                                               ("2.7.0", "2.7"), ("2.7.1", "2.7"), ("2.6.0+cu124", "2.7")])
def test_torch_bound_matches_deepspeeds_packaging_compare(torch_v: str, high: str) -> None:
    """DeepSpeed's required_torch_version compares packaging Versions of torch.__version__:
    a local build tag sorts after the release, so 2.7.0+cu126 is above max_version 2.7."""
    inside = Version("2.6") <= Version(torch_v) <= Version(high)
    assert _torch_in(torch_v, "2.6", high) is inside


def test_local_tag_is_above_the_bound() -> None:
    assert Version("2.7") < Version("2.7.0+cu126")
    assert _torch_in("2.7.0+cu126", "2.6", "2.7") is False
    assert _torch_in("2.7.0", "2.6", "2.7") is True


def test_nightly_is_not_judged() -> None:
    assert _torch_in("2.8.0.dev20250601+cu126", "2.6", "2.7") is None


@pytest.mark.parametrize(("ds", "expected"), [("0.16.5", None), ("0.16.6", ("2.6", "2.7")),
                                              ("0.18.3", ("2.6", "2.7")), ("0.18.4", ("2.6", "2.9")),
                                              ("0.19.0", ("2.6", None)), ("0.19.8", ("2.6", None))])
def test_deepcompile_range_per_release(ds: str, expected: tuple[str, str | None] | None) -> None:
    assert _deepcompile_range(ds) == expected
