#!/usr/bin/env python3
"""Diagnose a finished SLURM job with dsdoctor and write the result beside its output.

    dsdoctor_jobend.py JOBID [--written-by epilog|dependency] [--node NODE]

Run by ``dsdoctor-epilog`` (SLURM's Epilog, as root on each node of the job) or by
``dsdoctor-after.sbatch`` (a job submitted with ``--dependency=afterany:JOBID``, as the user). It
asks ``scontrol show job JOBID`` where the job wrote its output (StdOut, StdErr) and where it ran
(WorkDir: its ``ds_config.json`` is passed as ``--config`` when there is one), runs ``dsdoctor
analyze --format json`` on the output, bounded by ``DSDOCTOR_TIMEOUT`` seconds (default 120), and
writes one JSON record to ``<StdOut>.dsdoctor.json``: the job as SLURM saw it and the analysis, or,
when there is no analysis (no output file, dsdoctor failed, ran out of time or is not installed),
an ``error`` saying why. Docs: docs/schedulers.md.

Only the standard library is used, and dsdoctor runs in its own process: this script must still
write its error record when dsdoctor itself is broken. As root (the Epilog) the analysis and the
write run as the job's user, so that the record is the user's and no path the user controls is
opened with root's rights. Exit status: 0 when a record was written or there was nothing to do
(another node of the job, a job with no output file); 1 when no record could be written; 2 on bad
usage. The Epilog ignores it (an Epilog that fails drains the node).

Settings (environment): ``DSDOCTOR`` the dsdoctor command line (default ``dsdoctor``; split like
a shell would, e.g. ``/opt/venv/bin/python -m dsdoctor``), ``DSDOCTOR_TIMEOUT`` seconds for the
analysis, ``DSDOCTOR_DB`` the job history (see ``append_history``), ``SCONTROL`` the scontrol
binary (default ``scontrol``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

RECORD_KIND = "dsdoctor-slurm-job"
RECORD_VERSION = 1
RECORD_SUFFIX = ".dsdoctor.json"
#: the job name of dsdoctor-after.sbatch, whose own end is not diagnosed
AFTER_JOB_NAME = "dsdoctor-after"
DEFAULT_TIMEOUT_S = 120
SCONTROL_TIMEOUT_S = 30
#: the file beside the job's working directory that is passed as --config when present
CONFIG_NAMES = ("ds_config.json",)
#: scontrol prints these keys on a line of their own: their value is the rest of the line, spaces
#: included (paths and command lines may hold spaces and "=")
WHOLE_LINE_KEYS = ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment", "AdminComment")
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
#: at most this much of dsdoctor's stderr goes into an error record
STDERR_TAIL = 2000


class JobEndError(Exception):
    """Why no analysis could be made (goes into the record's ``error``)."""


@dataclass(frozen=True)
class SlurmJob:
    """What ``scontrol show job`` says of a job, as far as the record needs it."""

    job_id: str
    name: str
    user: str
    uid: int | None
    gid: int | None
    state: str
    reason: str
    exit_code: str
    batch_host: str
    work_dir: str
    stdout: str
    stderr: str

    def logs(self) -> list[str]:
        """The job's output files, stdout first, each once."""
        return [p for i, p in enumerate((self.stdout, self.stderr))
                if p and p != "/dev/null" and p not in (self.stdout, self.stderr)[:i]]


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job`` output (multi-line or ``-o``) as key → value."""
    fields: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, rest = line.partition("=")
        if sep and key in WHOLE_LINE_KEYS:
            fields[key] = rest
            continue
        starts = list(_KEY.finditer(line))
        for i, match in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
            fields.setdefault(match.group(1), line[match.end():end].strip())
    return fields


def _id_of(value: str) -> tuple[str, int | None]:
    """``root(0)`` → ("root", 0)."""
    match = re.fullmatch(r"(.*)\((\d+)\)", value)
    if match is None:
        return value, None
    return match.group(1), int(match.group(2))


def _absolute(path: str, work_dir: str) -> str:
    if not path or path == "(null)":
        return ""
    return path if os.path.isabs(path) or not work_dir else os.path.join(work_dir, path)


def job_from_fields(fields: Mapping[str, str]) -> SlurmJob:
    user, uid = _id_of(fields.get("UserId", ""))
    _, gid = _id_of(fields.get("GroupId", ""))
    work_dir = fields.get("WorkDir", "")
    work_dir = "" if work_dir == "(null)" else work_dir
    return SlurmJob(
        job_id=fields.get("JobId", ""), name=fields.get("JobName", ""), user=user, uid=uid, gid=gid,
        state=fields.get("JobState", ""), reason=fields.get("Reason", ""),
        exit_code=fields.get("ExitCode", ""), batch_host=fields.get("BatchHost", ""),
        work_dir=work_dir, stdout=_absolute(fields.get("StdOut", ""), work_dir),
        stderr=_absolute(fields.get("StdErr", ""), work_dir))


def read_job(job_id: str, scontrol: str) -> SlurmJob:
    try:
        proc = subprocess.run([scontrol, "show", "job", job_id], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JobEndError(f"cannot run {scontrol} show job {job_id}: {exc}") from exc
    if proc.returncode != 0:
        raise JobEndError(f"{scontrol} show job {job_id} failed: {proc.stderr.strip()[-300:]} "
                          "(a job is forgotten MinJobAge seconds after it ends)")
    return job_from_fields(parse_scontrol(proc.stdout))


def config_of(job: SlurmJob) -> str | None:
    """The DeepSpeed config in the job's working directory, when there is one."""
    for name in CONFIG_NAMES:
        path = os.path.join(job.work_dir, name) if job.work_dir else ""
        if path and os.path.isfile(path):
            return path
    return None


def dsdoctor_command() -> list[str]:
    return shlex.split(os.environ.get("DSDOCTOR", "").strip() or "dsdoctor")


def timeout_seconds() -> int:
    value = os.environ.get("DSDOCTOR_TIMEOUT", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_TIMEOUT_S


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def run_analysis(logs: list[str], config: str | None, timeout_s: int) -> dict[str, Any]:
    """dsdoctor's JSON analysis of ``logs``; raises JobEndError with the reason when there is none."""
    missing = [p for p in logs if not os.path.isfile(p)]
    if not logs or missing:
        raise JobEndError(f"no output to analyze: {', '.join(missing) or 'the job has no StdOut'} "
                          "does not exist (or is not a regular file)")
    cmd = [*dsdoctor_command(), "analyze", *logs, "--format", "json", "--quiet"]
    if config:
        cmd += ["--config", config]
    try:
        # a session of its own: a timeout kills dsdoctor and anything it started
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise JobEndError(f"cannot run {shlex.join(cmd[:3])}: {exc} (set DSDOCTOR to the dsdoctor "
                          "command, e.g. /opt/dsdoctor/bin/dsdoctor)") from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        proc.communicate()
        raise JobEndError(f"the analysis took more than {timeout_s} s and was stopped "
                          "(DSDOCTOR_TIMEOUT)") from exc
    if proc.returncode not in (0, 1):  # 0 healthy, 1 failed/hung/...: both have a report
        raise JobEndError(f"dsdoctor exited {proc.returncode}: {err.strip()[-STDERR_TAIL:]}")
    try:
        analysis = json.loads(out)
    except ValueError as exc:
        raise JobEndError(f"dsdoctor's output is not JSON ({exc}): {err.strip()[-STDERR_TAIL:]}") from exc
    if not isinstance(analysis, dict):
        raise JobEndError("dsdoctor's output is not a JSON object")
    return analysis


def append_history(record: dict[str, Any]) -> str | None:
    """HISTORY HOOK: append the record to the job history named by DSDOCTOR_DB.

    The history is ``dsdoctor triage --db FILE`` (an SQLite file, issue 22 item 4), which this
    dsdoctor does not have yet: until it does, a set DSDOCTOR_DB is only noted in the record. When
    triage lands, call it here on the record's job (``dsdoctor triage --db $DSDOCTOR_DB <StdOut>``,
    bounded like the analysis) and return its error, if any."""
    db = os.environ.get("DSDOCTOR_DB", "").strip()
    if not db:
        return None
    return f"not appended to {db}: this recipe does not write the history yet (dsdoctor triage --db)"


def make_record(job: SlurmJob | None, job_id: str, written_by: str,
                analyze: Callable[[SlurmJob], tuple[dict[str, Any], list[str], str | None]]
                ) -> dict[str, Any]:
    """The record for one job: the analysis, or the error that kept it from being made."""
    record: dict[str, Any] = {
        "record": RECORD_KIND, "record_version": RECORD_VERSION, "written_by": written_by,
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "job": asdict(job) if job is not None else {"job_id": job_id},
        "inputs": None, "seconds": None, "verdict": None, "analysis": None, "error": None,
    }
    if job is None:
        return record
    started = time.monotonic()
    try:
        analysis, logs, config = analyze(job)
    except JobEndError as exc:
        record["error"] = str(exc)
    else:
        record["inputs"] = {"logs": logs, "config": config}
        record["analysis"] = analysis
        verdict = analysis.get("verdict")
        record["verdict"] = verdict.get("fate") if isinstance(verdict, dict) else None
    record["seconds"] = round(time.monotonic() - started, 3)
    history = append_history(record)
    if history:
        record["history"] = history
    return record


def analyze_job(job: SlurmJob) -> tuple[dict[str, Any], list[str], str | None]:
    logs, config = job.logs(), config_of(job)
    return run_analysis(logs, config, timeout_seconds()), logs, config


def write_record(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".dsdoctor-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=False)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def as_job_user(job: SlurmJob, work: Callable[[], int]) -> int:
    """Run ``work`` as the job's user when this process is root (the Epilog), else as is."""
    if os.geteuid() != 0 or not job.uid or job.gid is None:
        return work()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, then read, analyze and write as the user
        status = 1
        try:
            os.setgroups([])
            os.setgid(job.gid)
            os.setuid(job.uid)
            # dsdoctor keeps its caches under the user's home, not root's
            os.environ["HOME"] = _home_of(job.uid)
            os.environ.pop("XDG_CACHE_HOME", None)
            status = work()
        except BaseException as exc:  # noqa: BLE001 - the child must reach _exit
            print(f"dsdoctor_jobend: as uid {job.uid}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def _home_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir or "/"
    except KeyError:
        return "/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job_id", help="the finished job's id")
    parser.add_argument("--written-by", choices=("epilog", "dependency"), default="dependency")
    parser.add_argument("--node", default="",
                        help="this node's name (SLURMD_NODENAME): only the batch host writes")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"\d+(?:_\d+)?", args.job_id):
        print(f"dsdoctor_jobend: '{args.job_id}' is not a SLURM job id", file=sys.stderr)
        return 2
    try:
        job = read_job(args.job_id, os.environ.get("SCONTROL", "scontrol"))
    except JobEndError as exc:
        # nowhere beside the output to write to: the record goes to stdout (the dependency
        # job's own output; the Epilog logs it)
        record = make_record(None, args.job_id, args.written_by, analyze_job)
        record["error"] = str(exc)
        print(json.dumps(record))
        return 1
    if args.node and job.batch_host and args.node != job.batch_host:
        return 0  # one record per job: the batch host's Epilog writes it, the other nodes do not
    if job.name == AFTER_JOB_NAME:
        return 0  # dsdoctor-after.sbatch's own job: diagnosing the diagnosis says nothing
    if not job.stdout or job.stdout == "/dev/null":
        print(f"dsdoctor_jobend: job {job.job_id} has no output file (an interactive job?): "
              "nothing to analyze", file=sys.stderr)
        return 0
    target = job.stdout + RECORD_SUFFIX

    def work() -> int:
        record = make_record(job, args.job_id, args.written_by, analyze_job)
        try:
            write_record(target, record)
        except OSError as exc:
            print(f"dsdoctor_jobend: cannot write {target}: {exc}", file=sys.stderr)
            print(json.dumps(record))
            return 1
        print(target)
        return 0

    return as_job_user(job, work)


if __name__ == "__main__":
    sys.exit(main())
