"""One schema for machines (issue 22, item 3): every sample's ``analyze --format json``, each line
of ``--format jsonl`` and each ``triage --format jsonl`` record validate against the JSON Schema
the package ships (``dsdoctor schema``), checked by a real validator; ``--exit-code fate`` gives
each fate its own code. And triage gives every job the verdict ``analyze`` gives it."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import analyze
from dsdoctor.model import FATE_EXIT_CODES, SCHEMA_VERSION, combined_exit_code
from dsdoctor.triage.jobs import find_jobs, pattern_regex
from dsdoctor.triage.run import analyze_jobs, job_inputs

jsonschema = pytest.importorskip("jsonschema")  # in the test extra (pyproject.toml)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import sample_check  # noqa: E402

WILD = REPO / "tests" / "data" / "real_logs_wild"
EXTRA = REPO / "tests" / "data" / "real_logs_extra"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def validator():
    code, text, _err = cli("schema")
    assert code == 0
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _valid(validator, doc: dict) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


@pytest.mark.parametrize("scenario", sample_check.scenarios())
def test_every_sample_validates(validator, scenario: str) -> None:
    code, out, err = sample_check.run_analyze(sample_check.SAMPLE_LOGS / scenario, "json")
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc["schema_version"] == SCHEMA_VERSION
    _valid(validator, doc)


def test_the_schema_rejects_what_it_must(validator) -> None:
    """A schema that accepts anything validates nothing: a wrong answer is caught."""
    code, out, _err = sample_check.run_analyze(sample_check.SAMPLE_LOGS / "killed_sigkill", "json")
    doc = json.loads(out)
    doc["verdict"]["retriable"] = "maybe"
    doc["problems"][0]["fingerprint"] = "not-hex"
    del doc["verdict"]["steps_lost"]
    paths = set()
    for e in validator.iter_errors(doc):  # the verdict's errors are inside its oneOf (or null)
        paths |= {"/".join(map(str, c.absolute_path)) for c in [e, *(e.context or [])]}
    assert {"verdict/retriable", "problems/0/fingerprint", "verdict"} <= paths


def test_jsonl_one_analysis_per_log_and_the_exit_code_of_fates(validator) -> None:
    logs = [str(REPO / "sample_logs" / s / "train.log") for s in
            ("gpu_cuda_oom", "stopped_ctrl_c", "healthy_zero2_trainer")]
    logs = [p if Path(p).exists() else str(next(Path(p).parent.glob("*.log"))) for p in logs]
    code, out, err = cli("analyze", *logs, "--format", "jsonl", "-q", "--engine", "python")
    lines = out.splitlines()
    assert len(lines) == 3, err
    docs = [json.loads(line) for line in lines]
    for log, doc in zip(logs, docs):
        _valid(validator, doc)
        assert doc["input"] == log
    assert [d["verdict"]["fate"] for d in docs] == ["failed", "stopped", "healthy"]
    assert code == 1
    code, _out, _err = cli("analyze", *logs, "--format", "jsonl", "-q", "--exit-code", "fate")
    assert code == FATE_EXIT_CODES["failed"] == 3  # failed before stopped
    for log, fate in zip(logs, ["failed", "stopped", "healthy"]):
        code, _out, _err = cli("analyze", log, "--format", "json", "-q", "--exit-code", "fate")
        assert code == FATE_EXIT_CODES.get(fate, 0), fate


def test_fate_codes_are_distinct_and_keep_0_1_2() -> None:
    codes = list(FATE_EXIT_CODES.values())
    assert len(set(codes)) == len(codes) == 5 and not {0, 1, 2} & set(codes)
    assert combined_exit_code([0, 6, 4], "fate") == 4 and combined_exit_code([0, 1], "fate") == 1
    assert combined_exit_code([0, 1, 0], "any") == 1


def _corpus_jobs() -> list:
    paths = [str(p) for p in sorted(WILD.glob("*.log"))[::3]] + [
        str(p) for p in sorted(EXTRA.glob("*.log"))[::3]]
    return find_jobs(paths)


def test_triage_gives_each_job_the_verdict_analyze_gives_it(validator) -> None:
    """In one process, after many other jobs, each job's report is the one a process of its own
    gives: same fate, retry answer, problems and fingerprints (the caches carry nothing over)."""
    jobs = _corpus_jobs()
    assert len(jobs) > 60
    seen = 0
    for job, report, outcome in analyze_jobs(jobs, engine="python"):
        assert report is not None, outcome.sentence
        alone = analyze(job_inputs(job, "python"))
        assert report.verdict == alone.verdict, job.name
        assert report.problems == alone.problems, job.name
        assert outcome.fingerprint == (alone.problems[0].fingerprint if alone.problems else "")
        seen += 1
    assert seen == len(jobs)


def test_triage_cli_records_validate_and_the_history_counts_causes(tmp_path, validator) -> None:
    # two jobs of the same failure (the ALLREDUCE watchdog, two threads), one directory each
    for name, log in (("job1", EXTRA / "hang__basicsr737-torch26-watchdog-pg-guid.log"),
                      ("job2", WILD / "hang__llm-training7-slurm-allreduce-watchdog-frames.log"),
                      ("job3", REPO / "sample_logs" / "stopped_ctrl_c" / "train.log")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank0.log").write_bytes(log.read_bytes())
    db = tmp_path / "history.sqlite"
    code, out, err = cli("triage", str(tmp_path / "job*"), "--format", "jsonl", "--db", str(db),
                         "-q", "--engine", "python")
    assert code == 1, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["job"] for d in docs] == ["job1", "job2", "job3"]
    for d in docs:
        _valid(validator, d)
    code, text, err = cli("triage", "--db", str(db), "--since", "7d")
    assert code == 0, err
    assert "3 job(s) in the last 7d: 2 hung, 1 stopped" in text
    fp = docs[0]["problems"][0]["fingerprint"]
    assert fp == docs[1]["problems"][0]["fingerprint"]
    assert any(line.split()[:2] == ["2", "hang"] and fp in line for line in text.splitlines())
    code, table, _err = cli("triage", str(tmp_path / "job1"), str(tmp_path / "job3"))
    assert table.splitlines()[0].split() == ["JOB", "VERDICT", "CAUSE", "RETRY", "FINGERPRINT", "LOST"]
    assert table.splitlines()[2].split()[:2] == ["job3", "stopped"]


def test_job_pattern_groups_a_jobs_files(tmp_path) -> None:
    for name in ("slurm-101.out", "slurm-102.out", "notes.md"):
        (tmp_path / name).write_text("x\n")
    jobs = find_jobs([str(tmp_path)], "slurm-{job}.out")
    assert [j.name for j in jobs] == ["101", "102"]
    (tmp_path / "7").mkdir()
    for r in (0, 1):
        (tmp_path / "7" / f"rank{r}.log").write_text("x\n")
    jobs = find_jobs([str(tmp_path)], "{job}/rank*.log")
    assert [(j.name, len(j.logs)) for j in jobs] == [("7", 2)]
    assert pattern_regex("{job}-node*.log").match("a1-node3.log")


@pytest.mark.parametrize("argv,message", [
    (("triage",), "nothing to triage"),
    (("triage", "/nonexistent-jobend-dir"), "no such file"),
    (("triage", "/nonexistent-jobend-*"), "no file or directory matches"),
    (("triage", ".", "--job-pattern", "*.log"), "exactly one {job}"),
    (("triage", "--db", "/nonexistent-jobend.sqlite", "--since", "7d"), "no such history"),
])
def test_triage_bad_usage_is_one_line_and_exit_2(argv, message) -> None:
    code, out, err = cli(*argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_job_that_cannot_be_read_does_not_stop_the_others(tmp_path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.log").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)  # a pickle
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "train.log").write_bytes(
        (REPO / "sample_logs" / "stopped_ctrl_c" / "train.log").read_bytes())
    code, text, err = cli("triage", str(tmp_path / "bad"), str(tmp_path / "good"))
    assert "Traceback" not in err
    rows = text.splitlines()
    assert rows[1].split()[:2] == ["bad", "error"] and rows[2].split()[:2] == ["good", "stopped"]
    assert code == 2
