"""Scan results in a form that compares NaN equal to NaN.

dsdoctor keeps one NaN object for every NaN (formats.convert), and Python 3.10-3.12 compare
dataclasses as tuples, where that one object equals itself. Python 3.13 compares them field by
field with ``==``, and nan != nan: two identical results with a NaN loss compare unequal. Tests
that compare two scans compare these instead.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def comparable(obj: Any) -> Any:
    """``obj`` (dataclasses, mappings, sequences, numbers) with every NaN replaced by "nan"."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__,
                {f.name: comparable(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return {k: comparable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(comparable(v) for v in obj)
    if isinstance(obj, float) and math.isnan(obj):
        return "nan"
    return obj
