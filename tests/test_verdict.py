"""The run's verdict (dsdoctor/diagnose/verdict.py) and the exit code that follows it.

A run that crashed, was killed, hung or is not learning exits 1 whatever the rules had to say; a
healthy run or an fp16 warm-up that recovered exits 0 (unless a finding is an error, e.g. a
config lint). Checked on real logs: the committed samples (their expected.json ``fate``), the
labelled real logs in tests/data/real_logs_extra and ../shared/real_logs (when present), and the
cases issue 8 names.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dsdoctor.cli.main import main
from dsdoctor.diagnose.pipeline import run_analysis
from dsdoctor.model import ERROR_FATES

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SAMPLES = REPO / "sample_logs"
LABELLED = [DATA / "real_logs_extra", REPO.parent / "shared" / "real_logs"]

#: Symptom classes a human labelled in labels.tsv, and the fate each implies (first match wins):
#: a hang is what happened even when the watchdog then killed the ranks; anything that ends a rank
#: is a failure; broken numerics without an end are "not learning".
_HUNG = {"hang"}
_FAILED = {"gpu-oom", "cpu-oom", "op-build-failure", "batch-size-mismatch", "port-in-use",
           "offload-client-optimizer", "python-exception", "launcher-nonzero-exit",
           "config-mismatch",  # Transformers/Accelerate raise on a mismatch (see the override)
           "nccl-error", "cuda-error", "shm-exhausted", "disk-full", "job-time-limit",
           "checkpoint-error", "ssh-failure"}
_NOT_LEARNING = {"loss-scale-collapse", "nan-loss", "loss-zero"}

#: Where the labels' classes alone do not say the fate, the judgement and why.
FATE_OVERRIDES = {
    # the scale walks 64 -> 2 between Trainer dicts; the thread says the run died at the minimum
    # (DS102 already calls it a collapse): not learning, not a recovered warm-up
    "fp16-overflow__chinese-llama534-overflows-between-trainer-dicts.log": ("not-learning",),
    # Accelerate only logs that it overrode gradient_accumulation_steps; nothing failed here
    "config-mismatch__pickscore18-accelerate-updates-ds-grad-accum.log": ("healthy", "unknown"),
    # 15 overflows (16384 -> 2.0) while the bar shows 22 steps done: most steps were skipped and
    # the scale is still falling, so not learning (yet), not a recovered warm-up
    "fp16-overflow__stylegan2-100-apex-overflows-between-tqdm-bar.log": ("not-learning",),
}


def expected_fates(classes: set[str], file: str) -> tuple[str, ...]:
    """The fates a correct verdict may give a labelled log."""
    if file in FATE_OVERRIDES:
        return FATE_OVERRIDES[file]
    if classes & _HUNG:
        return ("hung",)
    if classes & _FAILED:
        # a SIGKILL with no word of memory is "killed" (issue 19): OOM only with OOM evidence
        return ("failed", "killed") if "cpu-oom" in classes else ("failed",)
    if classes & _NOT_LEARNING:
        # ../shared labels name the defining class only: a collapse that ended on DeepSpeed's
        # "Exiting run" exception is a failure; both are errors
        return ("not-learning", "failed")
    if "fp16-overflow" in classes:
        # overflows only: recovered when steps follow the last one, else the excerpt cannot tell
        return ("recovered", "unknown")
    # healthy needs positive evidence (progress, or the run saying it finished); an excerpt with
    # neither (a config dump, ds_report) cannot tell: unknown, which exits 0 as well (issue 19)
    return ("healthy", "unknown")


def _labelled() -> list:
    cases = []
    for folder in LABELLED:
        labels = folder / "labels.tsv"
        if not labels.is_file():
            continue
        with labels.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                classes = {c for c in (row.get("expected_classes") or "").split(",") if c}
                cases.append(pytest.param(folder / row["file"], expected_fates(classes, row["file"]),
                                          id=f"{folder.name}/{row['file'][:60]}"))
    return cases


def _exit(report) -> int:
    """The exit code a report must give: its verdict decides, error findings add."""
    if report.verdict.fate in ERROR_FATES:
        return 1
    return 1 if any(f.severity == "error" for f in report.findings) else 0


@pytest.mark.parametrize(("path", "fates"), _labelled())
def test_labelled_real_log_gets_its_fate_and_exit_code(path: Path, fates: tuple[str, ...]) -> None:
    if not path.is_file():
        pytest.skip(f"{path} not present")
    rep = run_analysis([str(path)], engine="python")
    assert rep.verdict is not None
    assert rep.verdict.fate in fates, f"{path.name}: {rep.verdict.sentence} (expected {fates})"
    if "healthy" in fates and rep.timeline:  # progress and no failure: positive evidence
        assert rep.verdict.fate == "healthy", f"{path.name}: {rep.verdict.sentence}"
    assert rep.exit_code == _exit(rep)
    if fates[0] in ERROR_FATES:
        assert rep.exit_code == 1, f"{path.name}: a {fates[0]} run must exit 1"


def test_every_labelled_class_has_a_fate() -> None:
    """A new symptom kind in labels.tsv must be given a fate here (and a place in verdict.py)."""
    known = _HUNG | _FAILED | _NOT_LEARNING | {"fp16-overflow"}
    for folder in LABELLED:
        labels = folder / "labels.tsv"
        if not labels.is_file():
            continue
        with labels.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                classes = {c for c in (row.get("expected_classes") or "").split(",") if c}
                assert classes <= known, (
                    f"{row['file']}: no fate for {sorted(classes - known)}; add the kind to the sets "
                    "in tests/test_verdict.py and to dsdoctor/diagnose/verdict.py")


def test_labelled_logs_cover_every_fate_that_has_data() -> None:
    """The labelled logs exercise failed, hung, not-learning and healthy (else the test is idle)."""
    seen = set()
    for param in _labelled():
        seen.update(param.values[1][:1])
    assert {"failed", "hung", "not-learning", "healthy"} <= seen


# --- the cases issue 8 names ---------------------------------------------------------------------

def _cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_trainer_run_with_1995_of_2000_steps_skipped_and_loss_zero_is_not_learning(capsys) -> None:
    log = DATA / "verdict" / "trainer-step2000-skipped1995-loss-zero__transformers14531.log"
    code, out = _cli(["analyze", str(log), "--format", "json", "--engine", "python"], capsys)
    verdict = json.loads(out)["verdict"]
    assert code == 1
    assert verdict["fate"] == "not-learning" and verdict["error"] is True
    assert "1995 of 2000 steps were skipped" in verdict["sentence"]
    assert "loss is exactly 0.0" in verdict["sentence"]
    assert (verdict["steps_done"], verdict["steps_skipped"]) == (2000, 1995)


def test_most_steps_skipped_alone_is_not_learning_and_is_told_as_a_problem(tmp_path, capsys) -> None:
    """Without the 0.0 dicts, the step line alone (via the run model) decides, and is shown."""
    lines = (DATA / "verdict" / "trainer-step2000-skipped1995-loss-zero__transformers14531.log"
             ).read_text(encoding="utf-8").splitlines()
    log = tmp_path / "skips.log"
    log.write_text("\n".join([lines[0], lines[3], lines[4]]) + "\n", encoding="utf-8")
    code, out = _cli(["analyze", str(log), "--color", "never"], capsys)
    assert code == 1
    assert out.startswith("NOT-LEARNING: 1995 of 2000 steps were skipped")
    assert "problem 1 of 1 · error · not-learning" in out


@pytest.mark.parametrize(("line", "start", "source"), [
    ("exits with return code = -11", "FAILED: a rank was killed by SIGSEGV",
     "deepspeedai/DeepSpeed#3989"),
    # a SIGBUS exit is how a container's small /dev/shm shows (issue 10: shm-exhausted)
    ("exits with return code = -7", "FAILED: the run ran out of shared memory (/dev/shm) "
     "(exit -7, SIGBUS)", "deepspeedai/DeepSpeed#4002"),
    ("exitcode  : -11 (pid: 5277)", "FAILED: a rank was killed by SIGSEGV",
     "pytorch/pytorch#175254"),
])
def test_launcher_exit_on_a_signal_is_a_failure(line: str, start: str, source: str, tmp_path,
                                                capsys) -> None:
    log = tmp_path / "launcher.log"
    log.write_text(line + "\n", encoding="utf-8")  # the fragment the user quoted in `source`
    code, out = _cli(["analyze", str(log), "--color", "never"], capsys)
    assert code == 1, source
    first = out.splitlines()[0]
    assert first.startswith(start), first


#: Real fragments of other launchers' and trainers' endings (issue 19: patterns for the meaning).
@pytest.mark.parametrize(("text", "start", "source"), [
    # MPICH / Intel MPI Hydra's box: the signal comes from its EXIT STRING line
    ("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 9665 RUNNING AT NeuroRTX6000\n"
     "=   EXIT CODE: 9\n=   CLEANING UP REMAINING PROCESSES\n"
     "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n",
     "KILLED: a rank was killed by SIGKILL", "openai/jukebox#155"),
    ("Primary job  terminated normally, but 1 process returned\n"
     "a non-zero exit code. Per user-direction, the job has been aborted.\n",
     "FAILED: a rank exited non-zero", "horovod/horovod#1421"),
    ("ssh: Could not resolve hostname lm-horovod-job-worker-5.lm-horovod-job: Name or service not known\n"
     "ORTE was unable to reliably start one or more daemons.\n",
     "FAILED: the run could not start: the launcher could not ssh to a node", "volcano-sh/volcano#2226"),
    ("bash: orted: command not found\nORTE was unable to reliably start one or more daemons.\n",
     "FAILED: the run could not start", "horovod/horovod#1021"),
    ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. Try "
     "lowering the learning rate, using gradient clipping or increasing the batch size.\n",
     "FAILED: the fp16 loss scale collapsed", "facebookresearch/fairseq#1529"),
])
def test_mpi_and_fairseq_endings_get_their_fate(text: str, start: str, source: str, tmp_path,
                                               capsys) -> None:
    log = tmp_path / "ending.log"
    log.write_text(text, encoding="utf-8")
    code, out = _cli(["analyze", str(log), "--color", "never"], capsys)
    assert code == 1, source
    first = out.splitlines()[0]
    assert first.startswith(start), (source, first)


#: what slurmstepd 22.05.8 wrote into a batch job's output when the job was scancel'ed (run here)
SCANCEL_LINE = "slurmstepd-localhost: error: *** JOB 2 ON localhost CANCELLED AT 2026-11-28T11:42:44 ***"
#: a preempted job: the step's plain cancel, then the job's with its reason (facebookincubator/submitit#1613)
PREEMPTED_LINES = ("slurmstepd: error: *** STEP 37361369.0 ON learnfair5146 CANCELLED AT 2021-03-15T17:50:23 ***\n"
                   "slurmstepd: error: *** JOB 37361369 ON learnfair5146 CANCELLED AT 2021-03-15T18:00:46 DUE TO PREEMPTION ***\n")


def _healthy_start() -> str:
    """The healthy sample up to its first Trainer loss dict: a run in progress (lines end in \\n)."""
    text = (SAMPLES / "healthy_zero2_trainer" / "train.log").read_text(encoding="utf-8")
    lines = text.split("\n")
    first_loss = next(i for i, line in enumerate(lines) if "{'loss'" in line)
    return "\n".join(lines[:first_loss + 1]) + "\n"


def test_a_scancelled_run_is_stopped_not_ended_mid_run(tmp_path) -> None:
    """A job that hung and was scancel'ed ends on slurmstepd's cancel line: stopped (exit 1), never
    healthy or "ended mid-run" (issue 22: it came out HEALTHY before)."""
    log = tmp_path / "slurm-2.out"
    log.write_text(_healthy_start() + SCANCEL_LINE + "\n", encoding="utf-8")
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "stopped"
    assert "cancelled by the scheduler" in rep.verdict.sentence
    assert rep.exit_code == 1


def test_a_preempted_run_is_stopped_on_its_reason_not_on_the_plain_step_cancel(tmp_path) -> None:
    """Issue 19 item 1: a preemption took the machines from a run that had not failed: stopped,
    at its step, and a resume carries on (the job's line with its reason decides, not the step's
    plain cancel before it)."""
    log = tmp_path / "slurm-37361369.out"
    log.write_text(_healthy_start() + PREEMPTED_LINES, encoding="utf-8")
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "stopped"
    assert rep.verdict.sentence.startswith("stopped: the scheduler preempted the run (line ")
    assert rep.verdict.retriable == "yes"
    assert rep.exit_code == 1


#: a job that met its time limit: slurmstepd's line (Nextomics/NextDenovo#114)
TIME_LIMIT_LINE = ("slurmstepd: error: *** JOB 867816 ON c0700a-s1 CANCELLED AT 2021-05-11T12:06:17 "
                   "DUE TO TIME LIMIT ***\n")


def test_a_run_at_its_time_limit_fails_not_stopped(tmp_path) -> None:
    """A time limit ends the same run at the same point again (the wild corpus's labelled time
    limit, cbio256, reads killed/no, never stopped): failed, named as the scheduler's end."""
    log = tmp_path / "slurm-867816.out"
    log.write_text(_healthy_start() + TIME_LIMIT_LINE, encoding="utf-8")
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "failed"
    assert "ended by the scheduler" in rep.verdict.sentence


def test_run_that_died_on_a_python_exception_fails() -> None:
    """DeepSpeed#618: the old launcher printed no exit code, but both ranks died on a NameError."""
    rep = run_analysis([str(DATA / "real_logs_extra" /
                            "negative__ds618-launcher-nameerror-returns-zero.log")], engine="python")
    assert rep.verdict.fate == "failed"
    assert "NameError" in rep.verdict.sentence
    assert rep.exit_code == 1


def test_crashed_zero3_generate_sample_fails_without_script() -> None:
    """The hang is in the log: no --script (which DS202 needs) is required to call it an error."""
    folder = SAMPLES / "zero3_generate_hang"
    rep = run_analysis([str(folder / "generate.log")], engine="python")
    assert rep.verdict.fate == "hung"
    assert rep.exit_code == 1
    assert all(f.rule != "DS202" for f in rep.findings)  # no --script: not the rule's doing


def test_recovered_warmup_exits_zero_and_says_so() -> None:
    folder = SAMPLES / "fp16_overflow_warmup"
    rep = run_analysis([str(folder / "train.log")], configs=[str(folder / "ds_config.json")],
                       engine="python")
    assert rep.verdict.fate == "recovered"
    assert "then training went on after step 300" in rep.verdict.sentence
    assert rep.exit_code == 0


def test_collapse_sample_fails_with_the_run_models_step_counts() -> None:
    folder = SAMPLES / "fp16_loss_scale_collapse"
    rep = run_analysis([str(folder / "train.log")], configs=[str(folder / "ds_config.json")],
                       engine="python")
    assert rep.verdict.fate == "failed"
    # the script prints "epoch 0 | step 17 | loss nan" after DeepSpeed's last "step=15,
    # skipped=15" line (DeepSpeed logs every 5 steps): 17 steps ran, 15 skipped as of step 15
    assert rep.verdict.sentence == ("failed: the fp16 loss scale collapsed and the run stopped after "
                                    "step 17 (15 skipped) (exit 1)")
    assert rep.verdict.evidence and rep.verdict.evidence[0].line == 246


def test_preflight_without_log_is_unknown_and_exits_on_findings_only() -> None:
    cfg = SAMPLES / "zero3_generate_synced" / "ds_config.json"
    rep = run_analysis(configs=[str(cfg)])
    assert rep.verdict.fate == "unknown"
    assert rep.exit_code == (1 if any(f.severity == "error" for f in rep.findings) else 0)


@pytest.mark.parametrize("scenario", sorted(p.parent.name for p in SAMPLES.glob("*/expected.json")))
def test_every_sample_names_its_fate(scenario: str) -> None:
    """Every committed sample says its fate, so that test_sample_logs checks verdict and exit."""
    d = json.loads((SAMPLES / scenario / "expected.json").read_text(encoding="utf-8"))
    # killed and stopped: the fates issue 19 adds (SIGKILL without OOM evidence; a signal or Ctrl-C)
    assert d.get("fate") in ("failed", "hung", "killed", "stopped", "not-learning", "recovered",
                             "healthy"), scenario



def test_verdict_and_problems_quote_only_redacted_text(tmp_path) -> None:
    """They are built after redaction: a token in the fatal exception never reaches the sentence.

    The line is constructed for this test (not a sample): an exception whose message holds a
    Hugging Face token of the documented shape (hf_ + 34 characters).
    """
    token = "hf_" + "A1b2C3d4E5" * 3 + "f6G7"
    log = tmp_path / "run.log"
    log.write_text(f"OSError: 401 Client Error for token {token}\n", encoding="utf-8")
    rep = run_analysis([str(log)], engine="python")
    assert rep.verdict.fate == "failed" and "OSError" in rep.verdict.sentence
    dumped = json.dumps([rep.verdict.to_dict(), [p.to_dict() for p in rep.problems]])
    assert token not in dumped


def test_a_symptom_kind_the_verdict_does_not_know_is_never_called_healthy() -> None:
    """Formats may gain kinds before verdict.py judges them: the fate is then unknown, not healthy."""
    from dsdoctor.diagnose.verdict import Progress, decide
    from dsdoctor.model import Evidence, Symptom

    ev = Evidence("run.log", 3, "(a line of the new kind)")
    v = decide({"some-new-kind": Symptom("some-new-kind", 1, (ev,), ev, ev)}, (), (), Progress(),
               has_log=True)
    assert v.fate == "unknown" and "some-new-kind" in v.sentence and v.evidence == (ev,)
