"""Root causes, not lists (dsdoctor/diagnose/problems.py) and how text/JSON/Markdown show them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.render.analysis import render_json, render_markdown, render_text

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_logs"
EXTRA = Path(__file__).resolve().parent / "data" / "real_logs_extra"
EVIDENCE = re.compile(r"▸ (\S+?:\d+)")


def _sample(name: str, log: str = "train.log", **kw):
    folder = SAMPLES / name
    configs = [str(p) for p in sorted(folder.glob("ds_config*.json"))]
    return run_analysis([str(folder / log)], configs=configs, engine="python", **kw)


def test_collapse_its_nan_and_its_exit_are_one_problem() -> None:
    rep = _sample("fp16_loss_scale_collapse")
    assert len(rep.problems) == 1
    (p,) = rep.problems
    assert p.cause == "loss-scale" and p.severity == "error"
    assert p.rules == ("DS102", "DS103")
    assert set(p.symptoms) == {"fp16-overflow", "loss-scale-collapse", "nan-loss",
                               "launcher-nonzero-exit", "python-exception"}
    assert "17 fp16 overflow(s), scale 65536 → 1" in p.what and "exit 1" in p.what
    assert 1 <= len(p.evidence) <= 3
    # the defining line (the scaler's "Exiting run" exception), then the exit it caused
    assert [e.line for e in p.evidence[:2]] == [246, 267]


def test_collapse_text_prints_one_problem_each_evidence_line_once_in_27_lines(monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # paths as a user in the repository gives them (sample_logs/...)
    folder = Path("sample_logs") / "fp16_loss_scale_collapse"
    rep = run_analysis([str(folder / "train.log")], configs=[str(folder / "ds_config.json")],
                       engine="python")
    text = render_text(rep, color=False, width=100)
    lines = text.splitlines()
    # 25, one for DS103's own fix on its also line (issue 20), one for the retry answer
    assert len(lines) <= 27, text
    assert all(len(line) <= 100 for line in lines)
    assert lines[0].startswith("FAILED: the fp16 loss scale collapsed")
    assert len(re.findall(r"^problem \d+ of \d+", text, re.MULTILINE)) == 1
    shown = EVIDENCE.findall(text)
    assert shown and len(shown) == len(set(shown)), shown
    assert "DS103 nan-loss" in text  # the grouped finding is named once, under "also"
    assert "also: DS103 nan-loss: lower the learning rate (now 0.01) or add warmup" in text


def test_verbose_text_adds_every_finding_and_symptom() -> None:
    rep = _sample("fp16_loss_scale_collapse")
    short = render_text(rep, color=False, width=100)
    full = render_text(rep, color=False, width=100, verbose=True)
    assert "All findings" not in short and "Symptoms" not in short
    assert "All findings" in full and "Symptoms" in full
    for f in rep.findings:
        assert f"{f.rule} {f.name}" in full
    for s in rep.symptoms:
        assert re.search(rf"^{re.escape(s.kind)}\s+{s.count}\s", full, re.MULTILINE), s.kind


def test_oom_and_the_exception_it_raised_are_one_problem() -> None:
    rep = run_analysis([str(EXTRA / "gpu-oom__jaxformer10-deepspeed-init-0-bytes-free.log")],
                       engine="python")
    assert len(rep.problems) == 1
    (p,) = rep.problems
    assert p.cause == "gpu-oom" and p.rules[0] == "DS105"
    assert set(p.symptoms) == {"gpu-oom", "python-exception"}


def test_a_failure_and_the_launcher_exit_it_caused_are_one_problem() -> None:
    rep = run_analysis([str(EXTRA / "op-build-failure__ds4889-fused-adam-so-missing-then-exit-1.log")],
                       engine="python")
    assert len(rep.problems) == 1
    (p,) = rep.problems
    assert p.cause == "op-build" and p.severity == "error"
    assert {"op-build-failure", "launcher-nonzero-exit", "python-exception"} == set(p.symptoms)
    assert "DS113" not in p.rules or p.rules[0] == "DS108"


def test_cpu_oom_groups_its_cross_check() -> None:
    """DS203 (the estimator says offload needs more RAM than the node has) explains DS106."""
    folder = SAMPLES / "cpu_offload_oom_killed"
    rep = run_analysis([str(folder / "train.log")], configs=[str(folder / "ds_config.json")],
                       model=str(folder / "model_config.json"), env=str(folder / "env.json"),
                       engine="python")
    first = rep.problems[0]
    assert first.cause == "cpu-oom" and first.rules[0] == "DS106" and "DS203" in first.rules


def test_a_config_lint_is_its_own_problem(tmp_path) -> None:
    folder = SAMPLES / "zero3_generate_synced"
    # the sample's config with an LAMB optimizer offloaded to the CPU (DS313), a plain config lint
    cfg = json.loads((folder / "ds_config.json").read_text())
    cfg["optimizer"] = {"type": "Lamb", "params": {"lr": 1e-3}}
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(cfg, indent=2))
    rep = run_analysis([str(folder / "generate.log")], configs=[str(path)], engine="python")
    assert rep.verdict.fate == "healthy"
    assert [p.rules for p in rep.problems] == [("DS313",)]
    (p,) = rep.problems
    assert p.cause == "lamb-with-optimizer-offload" and not p.symptoms
    assert p.config_where and p.config_where.startswith(str(path) + ":")


def test_a_generate_only_run_is_not_told_to_gather_on_save() -> None:
    """The sample only generates and saves nothing: DS314 stays silent (it was its only finding)."""
    folder = SAMPLES / "zero3_generate_synced"
    rep = run_analysis([str(folder / "generate.log")], configs=[str(folder / "ds_config.json")],
                       engine="python")
    assert rep.verdict.fate == "healthy" and rep.problems == ()


def test_every_finding_is_in_exactly_one_problem_and_json_keeps_everything() -> None:
    for name, log in (("fp16_loss_scale_collapse", "train.log"), ("zero3_generate_hang",
                                                                  "generate.log"),
                      ("trainer_config_mismatch", "train.log"), ("bf16_model_in_fp16", "train.log")):
        rep = _sample(name, log)
        data = json.loads(render_json(rep))
        assert len(data["findings"]) == len(rep.findings)
        assert len(data["symptoms"]) == len(rep.symptoms)
        grouped = [r for p in data["problems"] for r in p["rules"]]
        assert sorted(set(grouped)) == sorted({f.rule for f in rep.findings}), name
        assert len(grouped) == len(set(grouped)), f"{name}: a rule in two problems"
        assert data["verdict"]["fate"] == rep.verdict.fate
        for p in data["problems"]:
            assert len(p["evidence"]) <= 3


def test_fix_is_shown_as_an_exact_change_when_the_finding_has_one(tmp_path, capsys) -> None:
    """A typo'd key (DS303 knows the real one): the problem carries and prints the exact rename."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{\n  "train_micro_batch_size_per_gpu": 1,\n  "zero_optimization": {\n'
                   '    "stage": 2,\n    "overlap_com": true\n  }\n}\n', encoding="utf-8")
    main(["analyze", "--config", str(cfg), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"]["fate"] == "unknown"  # pre-flight: no log, no fate
    (p,) = [p for p in data["problems"] if p["fix_change"]]
    assert p["fix_change"]["path"] == "zero_optimization.overlap_com"
    assert p["config"] == f"{cfg}:5 zero_optimization.overlap_com"
    main(["analyze", "--config", str(cfg), "--color", "never"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("change: rename zero_optimization.overlap_com → zero_optimization.overlap_comm "
            f"({cfg}:5 zero_optimization.overlap_com)") in text


def test_markdown_follows_the_text() -> None:
    rep = _sample("fp16_loss_scale_collapse")
    md = render_markdown(rep)
    assert md.splitlines()[2].startswith("**FAILED**: the fp16 loss scale collapsed")
    assert md.count("### Problem") == 1
    assert "### Symptoms" not in md and "### Symptoms" in render_markdown(rep, verbose=True)
    lines = [line for line in md.splitlines() if re.match(r"^\S+:\d+", line)]
    assert lines and len(lines) == len(set(lines))


def test_verbose_flag_reaches_the_text_and_markdown(capsys) -> None:
    folder = SAMPLES / "gpu_nccl_watchdog"
    log = str(next(folder.glob("*.log")))
    for fmt, marker in (("text", "All findings"), ("markdown", "### All findings")):
        assert main(["analyze", log, "--format", fmt, "--color", "never"]) == 1
        assert marker not in capsys.readouterr().out
        assert main(["analyze", log, "--format", fmt, "--color", "never", "--verbose"]) == 1
        assert marker in capsys.readouterr().out


def test_a_finding_that_quotes_the_fatal_exception_joins_the_exit_problem() -> None:
    """DS216 quotes ZeRO's assertion, the line the ranks died on: one problem, not two."""
    rep = _sample("zero_untested_optimizer")
    assert len(rep.problems) == 1
    (p,) = rep.problems
    assert p.cause == "exit" and p.severity == "error"
    assert p.rules[0] == "DS216"
    lines = [e.line for e in p.evidence]
    assert 51 in lines and len(lines) == len(set(lines))


def test_accelerate_refusing_mixed_precision_is_one_problem_at_the_config_line() -> None:
    folder = SAMPLES / "accelerate_mixed_precision_true"
    rep = run_analysis([str(folder / "train.log")],
                       configs=[str(folder / "accelerate_config.yaml")], engine="python")
    assert [p.rules for p in rep.problems] == [("DS324",)]
    f = next(f for f in rep.findings if f.rule == "DS324")
    assert f.config_path == "mixed_precision" and f.config_line == 9


def test_a_zero3_save_side_note_never_leads() -> None:
    """DS314 (ZeRO-3 save without the 16-bit gather) is listed after another warning of the same
    severity, and never titles an issue (problems.NEVER_LEAD)."""
    from dsdoctor.diagnose.problems import group
    from dsdoctor.model import Finding
    from dsdoctor.redact import Redactor
    from dsdoctor.render.issue_body import _title

    def f(rule: str, title: str) -> Finding:
        return Finding(rule=rule, name=rule.lower(), severity="warning", title=title, message=title)

    side, other = f("DS314", "ZeRO-3 without gather"), f("DS304", "offload_param below stage 3")
    problems = group([], [side, other])
    assert [p.rules for p in problems] == [("DS304",), ("DS314",)]
    report = type("R", (), {"findings": [side], "symptoms": []})()
    assert "ZeRO-3 without gather" not in _title(report, None, "", "run", None, Redactor())


def _mismatch(count: int = 1):
    """The config-mismatch symptom of a Trainer refusing a config (tests/golden's
    trainer_config_mismatch prints this ValueError at train.log:36)."""
    from dsdoctor.model import Evidence, Symptom

    ev = Evidence("train.log", 36, "ValueError: Please correct the following DeepSpeed config "
                  "values that mismatch TrainingArguments values:", 0)
    return Symptom(kind="config-mismatch", count=count, evidence=(ev,), first=ev, last=ev), ev


def test_the_finding_tied_to_the_logs_failure_gives_the_fix_and_the_lint_stays_as_also() -> None:
    """Issue 20, item 5: a config lint (no log line, listed first, more severe) does not take the
    problem's fix from the finding that quotes the failure; its own fix stays, as one also line."""
    from dsdoctor.diagnose.problems import group
    from dsdoctor.model import Finding

    symptom, ev = _mismatch()
    lint = Finding(rule="DS311", name="trainer-config-mismatch", severity="error",
                   title="A config value differs from the Trainer argument",
                   message="the config says 4, the Trainer 2",
                   fix="Set gradient_accumulation_steps to 2. Or to \"auto\".",
                   fix_change={"op": "set", "path": "gradient_accumulation_steps", "old": 4,
                               "new": "auto"})
    tied = Finding(rule="DS109", name="trainer-deepspeed-mismatch-in-log", severity="warning",
                   title="Transformers refused the DeepSpeed config",
                   message="The Trainer refused the DeepSpeed config", evidence=(ev,),
                   fix="Set gradient_accumulation_steps to \"auto\" so the Trainer fills it.")
    (p,) = group([symptom], [lint, tied])
    assert p.rules == ("DS109", "DS311") and p.severity == "error"
    assert p.fix == tied.fix and p.why == (tied.message,) and p.what.startswith(tied.title)
    assert p.also == ('DS311 trainer-config-mismatch: Set gradient_accumulation_steps to 2. '
                      '(change: gradient_accumulation_steps: 4 → "auto")',)
    text = render_text(_report_of(p), color=False, width=100)
    assert "also: DS311 trainer-config-mismatch: Set gradient_accumulation_steps to 2." in text
    assert text.count("Set gradient_accumulation_steps to 2.") == 1


def test_identical_notes_of_grouped_findings_are_printed_once() -> None:
    from dsdoctor.diagnose.problems import group
    from dsdoctor.model import Finding

    symptom, ev = _mismatch()

    def f(rule: str, name: str, fix: str) -> Finding:
        return Finding(rule=rule, name=name, severity="error", title=f"{rule} title",
                       message=rule, evidence=(ev,), fix=fix)

    log = "trainer-deepspeed-mismatch-in-log"
    lead = f("DS109", log, "Set train_micro_batch_size_per_gpu to \"auto\".")
    same_as_lead = f("DS109", log, "set train_micro_batch_size_per_gpu to  \"auto\"")
    shared = [f("DS109", log, "Give both the same value."),
              f("DS109", log, "Give both the same value."),
              f("DS311", "trainer-config-mismatch", "Give both the same value.")]
    (p,) = group([symptom], [lead, same_as_lead, *shared])
    assert p.fix == lead.fix
    # the second DS109's fix is the problem's own: not repeated
    assert p.also == ("DS109 trainer-deepspeed-mismatch-in-log, DS311 trainer-config-mismatch: "
                      "Give both the same value.",)


def _report_of(p):
    from dsdoctor.model import Report

    return Report(files=(), symptoms=(), problems=(p,))
