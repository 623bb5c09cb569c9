"""The SLURM recipe (contrib/slurm): every job diagnosed when it ends, the record beside its output.

Two kinds of test:

* without SLURM: ``dsdoctor_jobend.py`` against a stand-in ``scontrol`` that prints what a real
  ``scontrol show job`` printed (SLURM 22.05.8, run here): the record of a failed job, the error
  records (no output file, dsdoctor missing, failing or too slow), the Epilog's exit 0 whatever
  happens;
* ``slurm``-marked, on a real one-node cluster (``.ci/slurm-cluster up``; .ci/run starts it and sets
  ``SLURM_CONF`` and ``DSDOCTOR_REQUIRE_SLURM``): a job that fails, one that hangs and is cancelled,
  one that succeeds and one whose output is gone, each diagnosed by the Epilog; then one again by a
  ``--dependency=afterany`` job. Skipped, with how to start the cluster, where there is none.

Nothing waits a fixed time: the tests poll what the cluster wrote, a bounded number of times, and
assert on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CONTRIB = REPO / "contrib" / "slurm"
JOBEND = CONTRIB / "dsdoctor_jobend.py"
EPILOG = CONTRIB / "dsdoctor-epilog"
AFTER = CONTRIB / "dsdoctor-after.sbatch"
SAMPLES = REPO / "sample_logs"
FAILED_SAMPLE = SAMPLES / "checkpoint_disk_full"
HEALTHY_SAMPLE = SAMPLES / "healthy_zero2_trainer"

#: ``scontrol show job 1`` of a job that exited 3, as SLURM 22.05.8 printed it on this machine
#: (paths replaced by the test's, in the same places)
SCONTROL_SHOW_JOB = """\
JobId=1 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0
   RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-11-28T11:41:29 EligibleTime=2026-11-28T11:41:29
   AccrueTime=2026-11-28T11:41:29
   StartTime=2026-11-28T11:41:30 EndTime=2026-11-28T11:41:31 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-28T11:41:30 Scheduler=Main
   Partition=debug AllocNode:Sid=localhost:7056
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=localhost
   BatchHost=localhost
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir={workdir}
   StdErr={stdout}
   StdIn=/dev/null
   StdOut={stdout}
   Power=
"""


def load_jobend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsdoctor_jobend", JOBEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dsdoctor_jobend", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


jobend = load_jobend()


def dsdoctor_command() -> str:
    """This interpreter's dsdoctor (the one under test), as DSDOCTOR wants it."""
    return f"{shlex.quote(sys.executable)} -m dsdoctor"


def fake_scontrol(tmp_path: Path, workdir: Path, stdout: Path) -> Path:
    """A stand-in ``scontrol`` that prints the real output above for the test's paths."""
    shown = tmp_path / "scontrol.out"
    shown.write_text(SCONTROL_SHOW_JOB.format(workdir=workdir, stdout=stdout), encoding="utf-8")
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\ncat {shlex.quote(str(shown))}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def run_jobend(tmp_path: Path, workdir: Path, stdout: Path, dsdoctor: str,
               timeout_s: int = 120) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    env = {**os.environ, "SCONTROL": str(fake_scontrol(tmp_path, workdir, stdout)),
           "DSDOCTOR": dsdoctor, "DSDOCTOR_TIMEOUT": str(timeout_s)}
    env.pop("DSDOCTOR_DB", None)
    proc = subprocess.run([sys.executable, str(JOBEND), "1", "--written-by", "epilog",
                           "--node", "localhost"], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    record_path = Path(str(stdout) + ".dsdoctor.json")
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else None
    return proc, record


def job_dir(tmp_path: Path, sample: Path | None) -> Path:
    workdir = tmp_path / "job"
    workdir.mkdir()
    if sample is not None:
        shutil.copy(sample / "ds_config.json", workdir / "ds_config.json")
        shutil.copy(sample / "train.log", workdir / "slurm-1.out")
    return workdir


# ---- without SLURM ------------------------------------------------------------------------------

def test_scontrol_output_is_read_with_paths_that_hold_spaces() -> None:
    text = SCONTROL_SHOW_JOB.format(workdir="/scratch/my runs/a=b", stdout="/scratch/my runs/a=b/o.out")
    job = jobend.job_from_fields(jobend.parse_scontrol(text))
    assert (job.job_id, job.name, job.user, job.uid, job.gid) == ("1", "wrap", "root", 0, 0)
    assert (job.state, job.exit_code, job.batch_host) == ("FAILED", "3:0", "localhost")
    assert job.work_dir == "/scratch/my runs/a=b"
    assert job.logs() == ["/scratch/my runs/a=b/o.out"]  # StdErr is the same file: once


def test_scontrol_one_line_form_and_a_relative_output_path() -> None:
    one_line = " ".join(line.strip() for line in SCONTROL_SHOW_JOB.format(
        workdir="/w", stdout="o.out").splitlines())
    fields = jobend.parse_scontrol(one_line)
    job = jobend.job_from_fields(fields)
    assert fields["TRES"] == "cpu=1,node=1,billing=1"
    assert job.stdout == "/w/o.out" and job.state == "FAILED"


def test_failed_job_record_has_the_analysis_and_the_config_beside_it(tmp_path) -> None:
    workdir = job_dir(tmp_path, FAILED_SAMPLE)
    out = workdir / "slurm-1.out"
    proc, record = run_jobend(tmp_path, workdir, out, dsdoctor_command())
    assert proc.returncode == 0, proc.stderr
    assert record is not None
    assert record["record"] == "dsdoctor-slurm-job" and record["written_by"] == "epilog"
    assert record["error"] is None
    assert record["verdict"] == "failed" == record["analysis"]["verdict"]["fate"]
    assert record["inputs"] == {"logs": [str(out)], "config": str(workdir / "ds_config.json")}
    assert record["job"]["state"] == "FAILED" and record["job"]["exit_code"] == "3:0"
    assert not list(workdir.glob(".dsdoctor-*.tmp"))  # the temporary file was renamed


def test_missing_output_gives_an_error_record(tmp_path) -> None:
    workdir = job_dir(tmp_path, None)
    out = workdir / "slurm-1.out"  # never written
    proc, record = run_jobend(tmp_path, workdir, out, dsdoctor_command())
    assert proc.returncode == 0, proc.stderr
    assert record is not None and record["analysis"] is None and record["verdict"] is None
    assert "no output to analyze" in record["error"] and str(out) in record["error"]


def test_dsdoctor_not_installed_gives_an_error_record(tmp_path) -> None:
    workdir = job_dir(tmp_path, HEALTHY_SAMPLE)
    _, record = run_jobend(tmp_path, workdir, workdir / "slurm-1.out", str(tmp_path / "no-dsdoctor"))
    assert record is not None and record["analysis"] is None
    assert "cannot run" in record["error"] and "DSDOCTOR" in record["error"]


def test_dsdoctor_refusing_the_log_gives_its_message_in_the_record(tmp_path) -> None:
    workdir = job_dir(tmp_path, None)
    out = workdir / "slurm-1.out"
    out.write_bytes(b"\x80\x04\x95" + bytes(range(256)) * 8)  # a pickle's header: not a log
    _, record = run_jobend(tmp_path, workdir, out, dsdoctor_command())
    assert record is not None and record["analysis"] is None
    assert record["error"].startswith("dsdoctor exited 2: dsdoctor: ")


def test_an_analysis_past_its_time_bound_is_stopped_and_recorded(tmp_path) -> None:
    workdir = job_dir(tmp_path, HEALTHY_SAMPLE)
    # a "dsdoctor" that never answers: the bound (1 s) stops it and its process group
    stuck = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(600)'"
    proc, record = run_jobend(tmp_path, workdir, workdir / "slurm-1.out", stuck, timeout_s=1)
    assert proc.returncode == 0, proc.stderr
    assert record is not None and record["analysis"] is None
    assert "took more than 1 s" in record["error"]


def test_another_node_of_the_job_writes_nothing(tmp_path) -> None:
    workdir = job_dir(tmp_path, HEALTHY_SAMPLE)
    env = {**os.environ, "SCONTROL": str(fake_scontrol(tmp_path, workdir, workdir / "slurm-1.out")),
           "DSDOCTOR": dsdoctor_command()}
    proc = subprocess.run([sys.executable, str(JOBEND), "1", "--node", "node-2"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and not (workdir / "slurm-1.out.dsdoctor.json").exists()


def test_unknown_job_prints_an_error_record_and_the_epilog_still_exits_0(tmp_path) -> None:
    failing = tmp_path / "scontrol"
    failing.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n",
                       encoding="utf-8")
    failing.chmod(0o755)
    env = {**os.environ, "SCONTROL": str(failing), "DSDOCTOR": dsdoctor_command()}
    proc = subprocess.run([sys.executable, str(JOBEND), "999"], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 1
    record = json.loads(proc.stdout)
    assert record["job"] == {"job_id": "999"} and "Invalid job id" in record["error"]
    # the Epilog: a non-zero exit would drain the node
    conf = tmp_path / "epilog.conf"
    conf.write_text(f"SCONTROL={shlex.quote(str(failing))}\nexport SCONTROL\n", encoding="utf-8")
    epilog = subprocess.run(["bash", str(EPILOG)], capture_output=True, text=True, timeout=600,
                            env={**env, "SLURM_JOB_ID": "999", "DSDOCTOR_EPILOG_CONF": str(conf)},
                            check=False)
    assert epilog.returncode == 0, epilog.stderr


def test_epilog_and_after_script_are_executable_shell() -> None:
    for script in (EPILOG, AFTER):
        assert script.stat().st_mode & stat.S_IXUSR, script
        subprocess.run(["bash", "-n", str(script)], check=True)


# ---- on a real SLURM cluster --------------------------------------------------------------------

#: polls: at most this many looks, this far apart (a generous bound, not a timing assumption)
POLLS, POLL_S = 1200, 0.5


def _slurm(*args: str, check: bool = True) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _cluster_problem() -> str | None:
    """Why no SLURM test cluster can be used here (None when one can)."""
    how = "start one with `.ci/slurm-cluster install && .ci/slurm-cluster up` and export SLURM_CONF"
    conf = os.environ.get("SLURM_CONF", "")
    if not conf or not Path(conf).is_file():
        return f"SLURM_CONF is not set to a slurm.conf: {how}"
    missing = [c for c in ("sbatch", "scontrol", "scancel", "sinfo", "slurmctld") if shutil.which(c) is None]
    if missing:
        return f"{', '.join(missing)} not installed: {how}"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60, check=False)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return f"slurmctld does not answer (scontrol ping: {ping.stdout.strip() or ping.stderr.strip()}): {how}"
    epilog = next((line.split("=", 1)[1].strip() for line in Path(conf).read_text().splitlines()
                   if line.startswith("Epilog=")), "")
    if not epilog or "dsdoctor-epilog" not in Path(epilog).read_text(errors="replace"):
        return f"{conf} has no Epilog that runs contrib/slurm/dsdoctor-epilog: {how}"
    return None


@pytest.fixture(scope="module")
def slurm_cluster() -> str:
    problem = _cluster_problem()
    if problem and os.environ.get("DSDOCTOR_REQUIRE_SLURM"):
        pytest.fail(f"DSDOCTOR_REQUIRE_SLURM is set but {problem}")
    if problem:
        pytest.skip(f"SLURM recipe test skipped: {problem}")
    return os.environ["SLURM_CONF"]


JOB_PY = '''\
"""A stand-in training job: replays a real log's lines, then ends as MODE says."""
import os, sys, time
log, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(log, "rb").read().split(b"\\n")
if mode == "hang":  # up to the first Trainer loss: training had started, then it hangs
    lines = lines[:next(i for i, line in enumerate(lines) if b"{'loss'" in line) + 1]
sys.stdout.buffer.write(b"\\n".join(lines) + b"\\n")
sys.stdout.flush()
if mode == "hang":
    time.sleep(3600)
if mode == "vanish":  # the output is gone before the job ends (deleted, a full scratch purge)
    os.unlink(out)
sys.exit(1 if mode == "fail" else 0)
'''


def _submit(workdir: Path, sample: Path, mode: str) -> tuple[str, Path]:
    """Submit the stand-in job in ``workdir`` (with the sample's ds_config.json there)."""
    workdir.mkdir()
    shutil.copy(sample / "ds_config.json", workdir / "ds_config.json")
    (workdir / "job.py").write_text(JOB_PY, encoding="utf-8")
    script = workdir / "job.sbatch"
    out = workdir / "train.out"
    script.write_text(f"#!/bin/bash\nexec {shlex.quote(sys.executable)} job.py "
                      f"{shlex.quote(str(sample / 'train.log'))} {mode} {shlex.quote(str(out))}\n",
                      encoding="utf-8")
    job_id = _slurm("sbatch", "--parsable", f"--job-name=dsdoctor-test-{mode}", "--ntasks=1",
                    f"--chdir={workdir}", f"--output={out}", str(script)).split(";")[0]
    return job_id, out


def _poll(what: str, look):
    for _ in range(POLLS):
        value = look()
        if value:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"gave up waiting for {what} after {POLLS} looks {POLL_S} s apart")


def _record(out: Path, written_by: str) -> dict[str, Any] | None:
    path = Path(str(out) + ".dsdoctor.json")
    if not path.exists():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))  # written by a rename: never partial
    return record if record.get("written_by") == written_by else None


@pytest.mark.slurm
def test_every_job_gets_its_record_from_the_epilog_and_a_dependency_job(slurm_cluster, tmp_path) -> None:
    hang_id, hang_out = _submit(tmp_path / "hang", HEALTHY_SAMPLE, "hang")
    fail_id, fail_out = _submit(tmp_path / "fail", FAILED_SAMPLE, "fail")
    ok_id, ok_out = _submit(tmp_path / "ok", HEALTHY_SAMPLE, "ok")
    gone_id, gone_out = _submit(tmp_path / "gone", HEALTHY_SAMPLE, "vanish")
    try:
        # cancel the hanging job once it has trained (its loss line is in its output)
        _poll(f"job {hang_id} to print its first loss",
              lambda: hang_out.exists() and b"{'loss'" in hang_out.read_bytes())
        _slurm("scancel", hang_id)
        records = {job: _poll(f"the Epilog's record of job {job}", lambda out=out: _record(out, "epilog"))
                   for job, out in ((fail_id, fail_out), (hang_id, hang_out), (ok_id, ok_out),
                                    (gone_id, gone_out))}
    finally:
        _slurm("scancel", hang_id, fail_id, ok_id, gone_id, check=False)

    failed, hung, healthy, gone = (records[j] for j in (fail_id, hang_id, ok_id, gone_id))
    assert failed["verdict"] == "failed", failed["error"] or failed["analysis"]["verdict"]
    assert "disk space" in failed["analysis"]["verdict"]["sentence"]
    assert failed["inputs"]["config"] == str(tmp_path / "fail" / "ds_config.json")
    assert hung["verdict"] in ("stopped", "hung"), hung["error"] or hung["analysis"]["verdict"]
    assert "CANCELLED" in hung["analysis"]["verdict"]["evidence"][0]["text"]
    assert hung["job"]["exit_code"].endswith(":15")  # SIGTERM from scancel
    assert healthy["verdict"] == "healthy", healthy["error"] or healthy["analysis"]["verdict"]
    assert healthy["analysis"]["verdict"]["error"] is False
    assert gone["analysis"] is None and "no output to analyze" in gone["error"]
    for record, job in ((failed, fail_id), (hung, hang_id), (healthy, ok_id), (gone, gone_id)):
        assert record["job"]["job_id"] == job and record["job"]["batch_host"] == "localhost"
    # an Epilog that failed would have drained the node
    assert "drain" not in _slurm("sinfo", "-h", "-n", "localhost", "-o", "%T")

    # the same failed job, diagnosed again by a job that depends on it (afterany)
    Path(str(fail_out) + ".dsdoctor.json").unlink()
    after_id = _slurm("sbatch", "--parsable", f"--dependency=afterany:{fail_id}",
                      f"--chdir={tmp_path}", f"--output={tmp_path / 'after-%j.out'}",
                      f"--export=ALL,DSDOCTOR={dsdoctor_command()},DSDOCTOR_JOBEND={JOBEND}",
                      str(AFTER), fail_id).split(";")[0]
    again = _poll(f"the record of job {fail_id} from dependency job {after_id}",
                  lambda: _record(fail_out, "dependency"))
    assert again["verdict"] == "failed" and again["job"]["job_id"] == fail_id
    assert again["job"]["state"] == "FAILED"  # after the job ended: its final state
    assert again["analysis"]["verdict"].get("fingerprint") == failed["analysis"]["verdict"].get("fingerprint")
    # the Epilog does not diagnose the diagnosing job itself (COMPLETED: its Epilog has run)
    _poll(f"dependency job {after_id} to complete",
          lambda: "JobState=COMPLETED" in _slurm("scontrol", "show", "job", after_id))
    assert (tmp_path / f"after-{after_id}.out").exists()
    assert not (tmp_path / f"after-{after_id}.out.dsdoctor.json").exists()
