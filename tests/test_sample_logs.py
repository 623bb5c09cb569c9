"""The committed sample_logs (real DeepSpeed runs) against ``dsdoctor analyze``.

For each scenario folder: every symptom kind and rule code in its ``expected.json`` is reported, no
``must_not`` kind is, no finding is worse than ``max_severity``, the verdict is its ``fate`` and
the exit code follows (failed/hung/not-learning: 1); and the text, JSON and Markdown
renderings match ``tests/golden/<scenario>.{txt,json,md}`` (refresh with ``pytest --update-golden``
and review the diff). One test case per expected item, so a failure names exactly what is missing.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import sample_check  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"
SCENARIOS = sample_check.scenarios()
FORMATS = {"txt": "text", "json": "json", "md": "markdown"}


@functools.cache
def analyzed(scenario: str, fmt: str = "json") -> tuple[int, str, str]:
    """``dsdoctor analyze`` of one committed scenario (cached: several tests read it)."""
    return sample_check.run_analyze(sample_check.SAMPLE_LOGS / scenario, fmt)


def report(scenario: str) -> dict:
    code, out, err = analyzed(scenario)
    assert code in (0, 1), f"analyze exited {code}: {err.strip()}"
    return json.loads(out)


def _cases() -> list:
    cases = []
    for s in SCENARIOS:
        exp = sample_check.Expected.load(sample_check.SAMPLE_LOGS / s)
        cases += [pytest.param(s, "symptom", k, id=f"{s}-symptom-{k}") for k in exp.symptoms]
        cases += [pytest.param(s, "rule", r, id=f"{s}-rule-{r}") for r in exp.rules]
        cases += [pytest.param(s, "must_not", k, id=f"{s}-must_not-{k}") for k in exp.must_not]
        cases += [pytest.param(s, "must_not_rule", r, id=f"{s}-must_not_rule-{r}")
                  for r in exp.must_not_rules]
        if exp.max_severity:
            cases.append(pytest.param(s, "max_severity", exp.max_severity,
                                      id=f"{s}-max_severity-{exp.max_severity}"))
        if exp.fate:
            cases.append(pytest.param(s, "fate", exp.fate, id=f"{s}-fate-{exp.fate}"))
    return cases


def test_every_scenario_folder_is_complete() -> None:
    """Each scenario has logs, a config, notes naming the DeepSpeed version, a sane expected.json."""
    assert len(SCENARIOS) >= 3
    from dsdoctor.model import SYMPTOM_KINDS

    for s in SCENARIOS:
        folder = sample_check.SAMPLE_LOGS / s
        assert [*folder.glob("*.log"), *folder.glob("*.log.gz")], f"{s}: no log"
        notes = (folder / "README.md").read_text(encoding="utf-8")
        # Pinned version for real runs; the public source for logs taken from issue threads.
        assert re.search(r"deepspeed \d+\.\d+", notes, re.I) or "## Source" in notes, (
            f"{s}: README.md names neither the DeepSpeed version nor the source")
        exp = sample_check.Expected.load(folder)
        for kind in (*exp.symptoms, *exp.must_not):
            assert kind in SYMPTOM_KINDS, f"{s}: unknown symptom kind {kind!r}"
        assert not set(exp.symptoms) & set(exp.must_not), f"{s}: a kind is both expected and not"
        assert not set(exp.rules) & set(exp.must_not_rules), f"{s}: a rule is both expected and not"
        for rule in (*exp.rules, *exp.must_not_rules):
            assert rule[:2] == "DS" and rule[2:].isdigit(), f"{s}: bad rule code {rule!r}"


@pytest.mark.parametrize(("scenario", "what", "item"), _cases())
def test_analyze_finds_what_expected_says(scenario: str, what: str, item: str) -> None:
    rep = report(scenario)
    kinds = {s["kind"] for s in rep["symptoms"]}
    rules = {f["rule"]: f for f in rep["findings"]}
    if what == "symptom":
        assert item in kinds, f"{scenario}: symptom {item!r} not reported (got {sorted(kinds)})"
        sym = next(s for s in rep["symptoms"] if s["kind"] == item)
        assert sym["evidence"], f"{scenario}: symptom {item!r} without evidence"
        for ev in sym["evidence"]:
            assert ev["file"].startswith(f"sample_logs/{scenario}/") and ev["line"] >= 1
    elif what == "rule":
        assert item in rules, f"{scenario}: rule {item} not reported (got {sorted(rules)})"
    elif what == "must_not_rule":
        assert item not in rules, f"{scenario}: wrong diagnosis {item}: {rules[item]['title']}"
    elif what == "fate":
        code, _out, _err = analyzed(scenario)
        assert rep["verdict"]["fate"] == item, f"{scenario}: {rep['verdict']['sentence']}"
        want = sample_check.expected_exit(rep, item)
        assert code == want, f"{scenario}: exit {code} for a {item} run (want {want})"
    elif what == "must_not":
        assert item not in kinds, f"{scenario}: false positive {item!r}: " + json.dumps(
            next(s for s in rep["symptoms"] if s["kind"] == item)["first"])
    else:
        limit = sample_check.SEVERITY_RANK[item]
        worse = [f"{f['rule']} ({f['severity']})" for f in rep["findings"]
                 if sample_check.SEVERITY_RANK.get(f["severity"], 2) > limit]
        assert not worse, f"{scenario}: findings worse than {item}: {worse}"


def test_evidence_lines_are_real_lines_of_the_log() -> None:
    """Every evidence line number points at a log line that contains the evidence text."""
    for s in SCENARIOS:
        rep = report(s)
        for sym in rep["symptoms"]:
            for ev in sym["evidence"]:
                path = REPO / ev["file"]
                if path.suffix == ".gz":
                    continue
                lines = path.read_bytes().split(b"\n")
                raw = lines[ev["line"] - 1].decode("utf-8", "replace")
                probe = ev["text"].strip()[:40]
                assert probe in raw or probe.replace(" ", "") in raw.replace(" ", ""), (
                    f"{s}: {ev['file']}:{ev['line']} does not contain {probe!r}")


def normalize(text: str) -> str:
    """Make the rendering comparable across machines.

    Inputs are passed with paths relative to the repository, the prefilter engine is fixed
    (``--engine python``) and the terminal width too (``COLUMNS=120``), so the reports hold nothing
    that depends on the machine. The logs themselves mention the paths of the machine that made
    them (``/work/...``): that is content, and must not be rewritten, so only the trailing
    whitespace is normalized here.
    """
    return text.rstrip() + "\n"


@pytest.mark.parametrize("ext", sorted(FORMATS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_rendering(scenario: str, ext: str, update_golden: bool) -> None:
    code, out, err = analyzed(scenario, FORMATS[ext])
    assert code in (0, 1), f"analyze exited {code}: {err.strip()}"
    got = normalize(out)
    path = GOLDEN / f"{scenario}.{ext}"
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
        return
    assert path.exists(), f"{path} missing: run pytest {Path(__file__).name} --update-golden"
    want = path.read_text(encoding="utf-8")
    assert got == want, (f"{scenario} {FORMATS[ext]} rendering changed; if intended, run "
                         f"pytest tests/test_sample_logs.py --update-golden and review git diff")


def test_checker_flags_every_kind_of_miss() -> None:
    """sample_check.problems() (also used by the live tests) reports each way a report can be wrong."""
    exp = sample_check.Expected(symptoms=("hang",), rules=("DS107",), must_not=("cpu-oom",),
                                max_severity="warning", must_not_rules=("DS106",))
    good = {"symptoms": [{"kind": "hang"}], "findings": [{"rule": "DS107", "severity": "warning"}]}
    assert sample_check.problems(good, exp) == []
    bad = {"symptoms": [{"kind": "cpu-oom"}],
           "findings": [{"rule": "DS106", "severity": "error"}]}
    assert sample_check.problems(bad, exp) == [
        "symptom 'hang' not reported", "rule DS107 not reported", "false positive symptom 'cpu-oom'",
        "wrong diagnosis DS106", "finding DS106 has severity error > warning"]
    hung = sample_check.Expected(symptoms=(), rules=(), must_not=(), fate="hung")
    assert sample_check.problems({"verdict": {"fate": "hung"}}, hung, exit_code=1) == []
    assert sample_check.problems({"verdict": {"fate": "healthy"}}, hung, exit_code=0) == [
        "verdict 'healthy', expected 'hung'", "exit code 0 for a hung run"]
