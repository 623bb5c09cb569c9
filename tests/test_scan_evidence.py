"""A million matched lines are counted, not kept: an Evidence is made only for the lines a
symptom keeps (first, last, the first three, the strongest, the first of each rank), so the
work per extra line does not include one (0.85 us each, issue 14 item 10)."""

from __future__ import annotations

import io

import pytest

from dsdoctor.logs import aggregate
from dsdoctor.logs import scan as scan_mod
from dsdoctor.logs.formats import load_file
from dsdoctor.logs.prefilter import available_engines
from dsdoctor.logs.scan import Scanner
from dsdoctor.model import Evidence
from tests.test_scan import TEST_FORMATS

# DeepSpeed's loss_scaler.py line, 8 ranks: test_scan.py's overflow pattern alone
OVERFLOW_ONLY = [p for p in load_file(TEST_FORMATS, "test.yaml") if p.id == "t-overflow"]
LINE = ("[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
        "OVERFLOW! Rank {r} Skipping step. Attempted loss scale: {a}, reducing to {b}")


def _scan(n: int, engine: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, object]:
    made = [0]

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        made[0] += 1
        return Evidence(*args, **kwargs)

    monkeypatch.setattr(aggregate, "Evidence", counted)
    monkeypatch.setattr(scan_mod, "Evidence", counted)
    data = "".join(LINE.format(r=i % 8, a=2 ** (16 - i % 8), b=2 ** (15 - i % 8)) + "\n"
                   for i in range(n)).encode()
    s = Scanner(OVERFLOW_ONLY, engine=engine)
    s._scan_stream("t.log", io.BytesIO(data), len(data), False, None)
    return made[0], s.result()


@pytest.mark.parametrize("engine", available_engines())
def test_evidence_is_made_for_kept_lines_only(engine, monkeypatch) -> None:
    small, res_small = _scan(200, engine, monkeypatch)
    big, res_big = _scan(4000, engine, monkeypatch)
    sym = res_big.symptoms["fp16-overflow"]  # type: ignore[attr-defined]
    assert sym.count == 4000 and sym.ranks == tuple(range(8))
    assert sym.first.line == 1 and sym.last.line == 4000  # the last one still made, at build
    assert sym.values["attempted_scale"]["min"] == 512
    assert big == small <= 8 + 1  # first, 8 ranks (first 3 and strongest among them), last
