"""The run's fate, decided once from the symptoms, the findings and the run model's progress.

A failed run must never come out clean: a CI job that gates on ``dsdoctor analyze``'s exit code
needs "this run crashed / hung / is not learning" even when no rule had advice to give, and a log
whose failure no pattern knows must not read healthy because it is silent (issue 19). The
verdict is that judgement; :attr:`dsdoctor.model.Report.exit_code` follows it.

Order of precedence (the first that holds decides):

1. ``hung``: a collective timed out (a watchdog usually kills the ranks afterwards; the hang is
   what happened, the exit is its consequence).
2. ``failed``: something ended a rank: out of memory (GPU or host, with evidence of it), an op
   that did not build, a fatal config check, a port in use, ...; ``killed``: a rank died of
   SIGKILL and nothing in the log says the host ran out of memory.
3. ``stopped``: a signal stopped the run (SIGTERM, Ctrl-C's SIGINT and its KeyboardInterrupt,
   SIGHUP, a scheduler's cancel) before any failure, or the scheduler preempted it (judged with
   the fatal causes of 2, in job-time-limit's place; a time limit is a failure); ``failed``: a
   Python exception that ended a rank or a launcher's non-zero exit.
4. ``not-learning``: the run goes on but does not train: the fp16 loss scale collapsed, NaN/inf
   loss, loss stuck at 0.0, most optimizer steps skipped (``step=2000, skipped=1995``), or a
   finite loss that climbed far above its minimum and stayed there (diagnose/divergence.py).
5. ``failed`` with the cause not recognized: an error-like line that no pattern knows (an
   exception behind a prefix, a fatal signal, a launcher tearing the ranks down, a non-zero
   exit) after the last progress line; suggestive lines only (an ERROR record, a WARN that
   something failed) make it ``unknown``. (``Verdict.decided_by`` is then "error-line".)
6. ``recovered``: fp16 overflows while the scaler searched, then steps went on.
7. ``healthy`` only with positive evidence: progress and no error-like line after it, or the
   launcher/trainer saying the run finished; ``ended-mid-run``: a whole log (the launcher's start
   is in it) that stops after progress with no exit line; ``unknown``: nothing to judge by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dsdoctor.diagnose.divergence import diverged
from dsdoctor.diagnose.fingerprint import fingerprint
from dsdoctor.diagnose.ranks import rank_ranges
from dsdoctor.logs.teardown import TEARDOWN_FACT
from dsdoctor.logs.tracebacks import is_interrupt, traceback_only
from dsdoctor.model import Evidence, Finding, Problem, Symptom, TimelinePoint, Verdict

if TYPE_CHECKING:
    from dsdoctor.diagnose.ranks import RankTable

#: Signal numbers a launcher reports as negative exit codes, by name.
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
           9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

#: Symptoms that end a run on their own, with how the verdict names them. Order = precedence.
FATAL_CAUSES: tuple[tuple[str, str], ...] = (
    ("gpu-oom", "ran out of GPU memory"),
    ("cpu-oom", "was killed for lack of host RAM (SIGKILL / OOM killer)"),
    ("shm-exhausted", "ran out of shared memory (/dev/shm)"),
    ("disk-full", "ran out of disk space (or quota)"),
    ("cuda-error", "hit a CUDA error"),
    ("nccl-error", "failed in NCCL"),
    ("checkpoint-error", "could not load or convert a checkpoint"),
    ("job-time-limit", "was ended by the scheduler (time limit, preemption or eviction)"),
    ("ssh-failure", "could not start: the launcher could not ssh to a node"),
    ("op-build-failure", "could not build a DeepSpeed op"),
    ("batch-size-mismatch", "stopped on DeepSpeed's batch-size assertion"),
    ("offload-client-optimizer", "was refused by ZeRO-Offload (client optimizer)"),
    ("port-in-use", "could not start: the rendezvous port was already in use"),
)

#: Signals that stop a run on purpose (a person, a scheduler's cancel, a launcher passing one on).
STOP_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 10: "SIGUSR1", 12: "SIGUSR2", 15: "SIGTERM"}

#: run-stopped patterns of a scheduler's cancel with no reason given (formats/scheduler.yaml)
SCHEDULER_CANCEL_PATTERNS = frozenset({"slurm-cancelled"})

#: job-time-limit patterns of a preemption (formats/scheduler.yaml): the scheduler or the cloud
#: took the machines back from a run that had not failed; it resumes from its checkpoint (issue 19
#: item 1). A time limit stays a failure: the same limit ends the same run again (the wild
#: corpus's one labelled time limit, cbio256, is no stop).
PREEMPTION_PATTERNS = frozenset({"submitit-preempted", "cloud-termination-imminent"})


def preempted(s: Symptom) -> bool:
    """True when a job-time-limit symptom is a preemption only (SLURM's ``DUE TO PREEMPTION``,
    submitit's ``this job is preempted``, a cloud's termination notice), no time limit."""
    reasons = set(s.values.get("reason") or ())
    by_slurm = set(s.patterns) == {"slurm-cancelled-due-to"} and reasons == {"PREEMPTION"}
    return by_slurm or (bool(s.patterns) and set(s.patterns) <= PREEMPTION_PATTERNS
                        and reasons <= {"preempted"})


#: cpu-oom patterns that only say a process got SIGKILL: the OOM killer's usual signature, but also
#: a scheduler's cancel, a preemption, a health checker or a person. Without a line that says the
#: host ran out of memory the fate is "killed", not an OOM (issue 19).
SIGKILL_ONLY_PATTERNS = frozenset({
    "ds-launcher-sigkill", "elastic-failed-sigkill", "elastic-report-sigkill", "shell-killed",
    "mpirun-rank-sigkill", "subprocess-killed-sigkill", "k8s-exit-code-137",
    "mp-spawn-sigkill"})

#: cpu-oom patterns that say the host (the kernel, a cgroup, the scheduler, Kubernetes, Colab, Ray's
#: memory monitor) killed a process because RAM ran out: the run did not fail, it was killed, so the
#: fate is "killed" with the OOM as its cause (issue 19). An exception raised for lack of RAM (an
#: allocation refused, Ray's OutOfMemoryError in the driver) stays "failed".
HOST_OOM_KILL_PATTERNS = frozenset({
    "kernel-oom-killed-process", "kernel-oom-kill-constraint", "kernel-oom-killer-invoked",
    "slurm-oom-kill-events", "slurm-task-out-of-memory", "lsf-memlimit",
    "k8s-evicted-memory-pressure", "k8s-oomkilled", "colab-session-crashed-ram"})
#: Ray's memory-monitor lines that say workers were killed (not the OutOfMemoryError a task raised)
_RAY_KILLED = re.compile(r"Workers \(tasks / actors\) killed due to memory pressure")

#: hang patterns that say a rank timed out connecting to the rendezvous store: the run failed to
#: start (formats/c10d-store.yaml), it did not hang in a collective
STORE_CONNECT_TIMEOUT_PATTERNS = frozenset({"c10d-client-connect-timeout"})

#: The finding that the run's CPU offload needs more RAM than the node has (DS203): with it, a
#: SIGKILL has the OOM evidence a bare -9 lacks.
RAM_SHORT_FINDING = "offload-exceeds-cpu-ram"

#: error-line patterns that only suggest an error (formats/generic-errors.yaml, strength 1): on
#: their own they make the fate unknown, never failed.
SUGGESTIVE_ERROR_PATTERNS = frozenset({"error-record", "error-warn-failed"})

#: The killed verdict's words for a SIGKILL no line explains (diagnose/retry.py tells it from a
#: host OOM kill by them: the OOM's own retry answer holds for the latter).
UNEXPLAINED_KILL = "nothing in the log says why"

#: How to tell what sent a SIGKILL, for the killed verdict.
SIGKILL_CAUSES = ("the kernel's OOM killer (dmesg -T | grep -i oom; journalctl -k)",
                  "the scheduler cancelling or preempting the job (sacct -j JOB -o State,ExitCode)",
                  "a cluster health checker, or a person (kill -9)")

#: Most steps skipped, and more skips than any start-up search of the fp16 scaler needs (halving
#: from 2^32 down to 1 takes 32 skips, plus hysteresis): the run is not learning.
MAX_WARMUP_SKIPS = 40
SKIPPED_SHARE_NOT_LEARNING = 0.5


@dataclass(frozen=True)
class Lifecycle:
    """What the log says of the run's start and end (facts of formats/run-lifecycle.yaml)."""

    started: Evidence | None = None  # the launcher's first line: the log is whole, not an excerpt
    finished: Evidence | None = None  # every process exited 0 / the trainer's final metrics
    age_s: float | None = None  # seconds since the newest log file was written (local files)


@dataclass(frozen=True)
class Progress:
    """How far the run got, as the run model knows it (``ctx.run.steps_done`` / ``steps_skipped``)."""

    steps_done: int | None = None
    steps_skipped: int | None = None
    skipped_where: str | None = None  # file:line of the line that states steps_skipped

    def phrase(self) -> str:
        """`` after step 40 (3 skipped)`` or ``""`` when no step was printed."""
        if not self.steps_done:  # none printed, or only the engine's step=0 start-up line
            return ""
        skipped = f" ({self.steps_skipped} skipped)" if self.steps_skipped else ""
        return f" after step {self.steps_done}{skipped}"

    @property
    def mostly_skipped(self) -> bool:
        done, skipped = self.steps_done, self.steps_skipped
        return (done is not None and skipped is not None and skipped > MAX_WARMUP_SKIPS
                and skipped >= SKIPPED_SHARE_NOT_LEARNING * done)


def _num(values: dict, name: str, which: str) -> float | None:
    v = values.get(name)
    if isinstance(v, dict) and isinstance(v.get(which), (int, float)):
        return v[which]
    return None


def exit_phrase(s: Symptom) -> str:
    """``exit -11, SIGSEGV`` from a launcher-nonzero-exit (or cpu-oom) symptom's values."""
    code = _num(s.values, "exit_code", "min")
    highest = _num(s.values, "exit_code", "max")
    sig = _signal_of(s)
    if code is not None and code > 0:
        code = _num(s.values, "exit_code", "first")
    elif (code == -15 and highest is not None and highest > 0
          and _num(s.values, "signal_num", "max") in (None, 15)):
        # SIGTERM is what the launcher sends the other ranks once one has failed (torch elastic's
        # failures table lists them with -15 next to the failed rank's own code): the run ended
        # on the failed rank's code, not on the SIGTERM it caused
        code, sig = highest, None
    parts = []
    if code is not None:
        parts.append(f"exit {int(code)}")
    if sig is not None:
        parts.append(SIGNALS.get(sig, f"signal {sig}"))
    return ", ".join(parts)


def _gib(n: float) -> str:
    """Bytes as the OOM message prints them: ``3.39 GiB``, ``978.00 MiB``."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def oom_numbers(s: Symptom) -> str:
    """``GPU 1: tried to allocate 3.39 GiB, 2.40 GiB free of 79.32 GiB`` from a gpu-oom symptom."""
    tried = _num(s.values, "tried_bytes", "max")
    free = _num(s.values, "free_bytes", "min")
    total = _num(s.values, "total_bytes", "max")
    gpu = _num(s.values, "gpu", "first")
    parts = []
    if tried is not None:
        parts.append(f"tried to allocate {_gib(tried)}")
    if free is not None and total is not None:
        parts.append(f"{_gib(free)} free of {_gib(total)}")
    elif total is not None:
        parts.append(f"{_gib(total)} total")
    head = f"GPU {int(gpu)}: " if gpu is not None and parts else ""
    return head + ", ".join(parts)


def hang_phrase(s: Symptom) -> str:
    """``an ALLREDUCE (SeqNum 808) timed out after 600 s`` from a hang symptom's values."""
    ops = s.values.get("op") or []
    what = f"an {ops[0]}" if ops and ops[0][:1] in "AEIOU_" else f"a {ops[0]}" if ops else (
        "a collective")
    seq = _num(s.values, "seq", "first")
    if ops and seq is not None:
        what += f" (SeqNum {int(seq)})"
    timeout = _num(s.values, "timeout_ms", "max")
    stuck = _num(s.values, "stuck_s", "max")
    if timeout is not None:
        return f"{what} timed out after {_fmt(timeout / 1000)} s"
    if stuck is not None:
        return f"{what} was stuck for {_fmt(stuck)} s"
    return f"{what} timed out"


def exception_phrase(s: Symptom) -> str:
    """``Exception: Current loss scale already at minimum ...`` (cut to stay one line)."""
    types = s.values.get("exc_type") or []
    messages = s.values.get("message") or []
    exc = types[0] if types else "an exception"
    msg = messages[0] if messages else ""
    text = f"{exc}: {msg}" if msg else exc
    return text if len(text) <= 90 else text[:87] + "..."


def _rank_list(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


def _ranks(s: Symptom) -> str:
    if not s.ranks:
        return ""
    if len(s.ranks) == 1:
        return f"rank {s.ranks[0]} "
    return f"{len(s.ranks)} ranks "


#: An allocator's own failure message: memory was refused, the process was not killed.
_ALLOCATION_FAILED = re.compile(r"DefaultCPUAllocator|std::bad_alloc|Cannot allocate memory|\bMemoryError\b")


def _allocation_failed(s: Symptom) -> bool:
    """True when every line of a cpu-oom symptom is an allocation failure, none a kill."""
    return bool(s.evidence) and all(_ALLOCATION_FAILED.search(e.text) for e in s.evidence)


def _evidence(*symptoms: Symptom | None) -> tuple[Evidence, ...]:
    out: list[Evidence] = []
    for s in symptoms:
        if s is not None and s.evidence and s.evidence[0] not in out:
            out.append(s.evidence[0])
    return tuple(out[:3])


def _last_line(s: Symptom) -> tuple[str, int]:
    return (s.last.file, s.last.line)


def _steps_after(points: Sequence[TimelinePoint], where: tuple[str, int]) -> bool:
    """True when the run printed progress after ``where`` (file, line) in the same file."""
    return any(p.file == where[0] and p.line > where[1] and (p.step is not None or p.loss is not None)
               for p in points)


#: The Trainer's ``'grad_norm': inf`` pattern (formats/hf-trainer.yaml).
_GRAD_NORM_PATTERN = "hf-grad-norm-nonfinite"


def skipped_step_norms(nan: Symptom | None, overflow: Symptom | None) -> bool:
    """The only non-finite values are the Trainer's ``'grad_norm': inf`` beside a finite loss, in
    a log whose fp16 loss scaler skipped steps: the norm of a skipped step, not a NaN loss.
    DeepSpeed's ZeRO-1/2 and ZeRO-3 set the norm to inf on an overflow (stage_1_and_2.py:3050-3052
    and stage3.py:2828-2829 at 0.19.8; earlier releases keep the last step's norm) and the
    Trainer logs the engine's get_global_grad_norm()."""
    return (nan is not None and overflow is not None and set(nan.patterns) == {_GRAD_NORM_PATTERN}
            and nan.values.get("value") == ["inf"])


def _signal_of(s: Symptom | None) -> int | None:
    """The signal a launcher-nonzero-exit (or cpu-oom) symptom reports, if any."""
    if s is None:
        return None
    sig = _num(s.values, "signal_num", "first")
    code = _num(s.values, "exit_code", "min")
    if sig is None and code is not None and code < 0:
        sig = -code
    return int(sig) if sig is not None else None


def _interrupt_only(exc: Symptom | None) -> bool:
    """True when every exception the log shows is an interrupt (Ctrl-C, sys.exit)."""
    types = (exc.values.get("exc_type") or []) if exc is not None else []
    return bool(types) and all(is_interrupt(t) for t in types)


def _ray_wrapped_host_kill(gpu: Symptom, cpu: Symptom | None) -> bool:
    """True when the only GPU OOM line is a RayTaskError(OutOfMemoryError) and Ray's memory monitor
    says it killed a task for the host's RAM: a nested task re-raised the monitor's own
    OutOfMemoryError, which is no GPU's (formats/ray.yaml)."""
    return (set(gpu.patterns) == {"ray-task-error-oom"} and cpu is not None
            and "ray-memory-monitor-killed" in cpu.patterns)


def host_oom_killed(s: Symptom) -> bool:
    """True when a cpu-oom symptom's lines say the host killed a process for its RAM."""
    if HOST_OOM_KILL_PATTERNS & set(s.patterns):
        return True
    return "ray-memory-monitor-killed" in s.patterns and any(
        _RAY_KILLED.search(e.text) for e in s.evidence)


def sigkill_only(s: Symptom) -> bool:
    """True when a cpu-oom symptom rests on SIGKILL lines alone (no word of memory)."""
    return bool(s.patterns) and set(s.patterns) <= SIGKILL_ONLY_PATTERNS


def _before(a: Evidence, b: Evidence) -> bool:
    """``a`` comes before ``b`` (in one file; lines of different files are not ordered)."""
    return a.file == b.file and a.line < b.line


def _last_progress(points: Sequence[TimelinePoint]) -> dict[str, int]:
    """The last line with progress (a step past 0, or a loss) in each file (DeepSpeed prints
    ``step=0`` while the engine starts: no progress yet)."""
    last: dict[str, int] = {}
    for p in points:
        if p.step or p.loss is not None:
            last[p.file] = max(last.get(p.file, 0), p.line)
    return last


def _age_phrase(age_s: float | None) -> str:
    if age_s is None:
        return ""
    if age_s < 120:
        return f"; the file was written {int(age_s)} s ago"
    if age_s < 7200:
        return f"; the file was last written {int(age_s // 60)} min ago"
    if age_s < 172800:
        return f"; the file was last written {int(age_s // 3600)} h ago"
    return f"; the file was last written {int(age_s // 86400)} days ago"


def preflight(v: Verdict, items: Iterable[Finding] | Iterable[Problem]) -> Verdict:
    """A pre-flight's verdict, as a linter's summary: its errors and warnings counted (over the
    problems once they are grouped, so that the headline and the summary line agree); the fate
    stays unknown, and ``preflight_errors`` makes the JSON's ``error`` true when there are any."""
    severities = [i.severity for i in items]
    counts = {sev: severities.count(sev) for sev in ("error", "warning")}
    told = ", ".join(f"{n} {sev}{'s' if n != 1 else ''}" for sev, n in counts.items() if n)
    what = (f"{told} in the inputs; fix {'it' if counts['error'] == 1 else 'them'} before "
            "launching" if counts["error"]
            else f"no error in the inputs{f' ({told})' if told else ''}")
    return replace(v, sentence=f"unknown: pre-flight check (no log): {what}",
                   preflight_errors=counts["error"])


def decide(symptoms: Mapping[str, Symptom], timeline: Sequence[TimelinePoint],
           findings: Iterable[Finding], progress: Progress, has_log: bool,
           lifecycle: Lifecycle | None = None, ranks: RankTable | None = None) -> Verdict:
    """The verdict of one analysis (see the module docstring for the order of precedence).

    ``ranks`` (diagnose/ranks.py): a hang's culprit, when one rank stands out, leads the hung
    sentence: the rank that made the others wait, not the ranks whose timeouts were printed."""
    findings = list(findings)
    life = lifecycle or Lifecycle()
    names = {f.name for f in findings}
    get = symptoms.get
    exit_sym, exc_sym = get("launcher-nonzero-exit"), get("python-exception")
    stop_sym = get("run-stopped")
    ending = ""
    torn_down = exit_sym is not None and set(exit_sym.patterns) == {TEARDOWN_FACT}
    if exit_sym is not None and not torn_down:
        ending = f"({exit_phrase(exit_sym)})" if exit_phrase(exit_sym) else "(non-zero exit)"
    elif exit_sym is not None:
        ending = f"(the launcher ended the ranks, line {exit_sym.first.line})"
    steps = progress.phrase()

    def verdict(fate: str, text: str, *ev: Symptom | None, cause: Evidence | None = None
                ) -> Verdict:
        evidence = _evidence(*ev)
        if cause is not None and cause not in evidence:
            evidence = (cause, *evidence)[:3]
        return Verdict(fate, f"{fate}: {text}", evidence, progress.steps_done,
                       progress.steps_skipped,
                       fingerprint=fingerprint(cause.text) if cause is not None else None)

    if not has_log:
        return preflight(verdict("unknown", "pre-flight check (no log)"), findings)

    hang = get("hang")
    if hang is not None and set(hang.patterns) <= STORE_CONNECT_TIMEOUT_PATTERNS:
        # a rank that never reached the store failed to start: no collective hung
        if exc_sym is not None and not _interrupt_only(exc_sym):
            hang = None  # the exception it raised (RendezvousConnectionError, ...) decides below
        else:
            timeout = _num(hang.values, "timeout_ms", "max")
            after = f" in {_fmt(timeout / 1000)} s" if timeout is not None else ""
            return verdict("failed", f"a rank could not connect to the rendezvous store "
                           f"(TCPStore){after} (line {hang.first.line}): the store's host "
                           "(MASTER_ADDR:MASTER_PORT) did not come up or cannot be reached",
                           hang, exit_sym, cause=hang.first)
    if hang is not None:
        tail = f", then the ranks were stopped {ending}" if ending else ""
        where = f" on {_ranks(hang).strip()}" if hang.ranks else ""
        what = (f"{hang_phrase(hang)}{where} ({hang.count} watchdog/timeout line(s), first at "
                f"line {hang.first.line}){steps}{tail}")
        culprit = ranks.culprit if ranks is not None else None
        if culprit is not None:
            return verdict("hung", f"{culprit.sentence}. {what[:1].upper()}{what[1:]}", hang,
                           exit_sym)
        return verdict("hung", what, hang, exit_sym)

    killed: Symptom | None = None
    for kind, what in FATAL_CAUSES:
        s = get(kind)
        if s is None:
            continue
        if kind == "gpu-oom" and _ray_wrapped_host_kill(s, get("cpu-oom")):
            continue  # Ray's memory monitor killed the task: the host's kill decides below
        if kind == "job-time-limit" and preempted(s):
            tail = f" {ending}" if ending else ""
            return verdict("stopped", f"the scheduler preempted the run (line {s.first.line})"
                           f"{steps}{tail}; nothing in it failed: a requeue or a resume from the "
                           "last checkpoint carries on", s, exit_sym, cause=s.first)
        if kind == "cpu-oom" and sigkill_only(s):
            if RAM_SHORT_FINDING not in names:
                killed = s  # SIGKILL, and no line says why: judged below, after real causes
                continue
            what = ("was killed (SIGKILL) and its offload needs more host RAM than the node has "
                    "(DS203): the OOM killer's signature")
        code = exit_phrase(s) if kind == "cpu-oom" else oom_numbers(s) if kind == "gpu-oom" else ""
        if kind == "cpu-oom" and not code and _allocation_failed(s):
            what = "ran out of host RAM (an allocation failed; nothing was killed)"
        detail = f" ({code})" if code else ""
        tail = f" {ending}" if ending and kind != "cpu-oom" else ""
        who = _ranks(s) or "the run "
        # steps counted in a training log say nothing about a failure in another file that made
        # no step of its own (a zero_to_fp32.py conversion, a resume that failed to load)
        where = steps if any(p.file == s.first.file and p.step for p in timeline) else ""
        if kind == "cpu-oom" and host_oom_killed(s):
            return verdict("killed", f"{who}{what}{detail}{where}{tail}".strip(), s, exit_sym)
        return verdict("failed", f"{who}{what}{detail}{where}{tail}".strip(), s, exit_sym)

    collapse = get("loss-scale-collapse")
    collapsed = collapse is not None or "loss-scale-collapse" in names
    exit_signal = _signal_of(exit_sym)
    last_progress = _last_progress(timeline)
    failing_exc = exc_sym if exc_sym is not None and not _interrupt_only(exc_sym) else None
    if failing_exc is not None and traceback_only(failing_exc) and (
            failing_exc.last.line <= last_progress.get(failing_exc.last.file, 0)):
        failing_exc = None  # a traceback (cut) that training went on after: logged, not fatal
    stop_line: Evidence | None = None
    if stop_sym is not None:
        stop_line = stop_sym.first
    elif exc_sym is not None and _interrupt_only(exc_sym):
        stop_line = exc_sym.first
    elif exit_sym is not None and exit_signal in STOP_SIGNALS and failing_exc is None:
        stop_line = exit_sym.first
    # A stop signal that came before any failure is the cause: the exceptions after it (a peer
    # that closed its connection, a KeyboardInterrupt in every rank) are its consequences.
    # A traceback that no line names (traceback headers only) before the stop is the interrupt's
    # own (a KeyboardInterrupt ends it), not a failure.
    if stop_line is not None and not collapsed and (
            failing_exc is None or traceback_only(failing_exc)
            or not _before(failing_exc.first, stop_line)):
        signals = stop_sym.values.get("signal") if stop_sym is not None else None
        # "^C": the terminal's echo of Ctrl-C (formats/run-lifecycle.yaml)
        interrupted = (signals and (is_interrupt(signals[0]) or signals[0] == "^C")) or (
            stop_sym is None and exc_sym is not None and _interrupt_only(exc_sym))
        named = str(signals[0]) if signals else ""
        if named.isdigit():  # torchrun's "Received 15 death signal"
            named = SIGNALS.get(int(named), f"signal {named}")
        how = ("was interrupted (KeyboardInterrupt: Ctrl-C or SIGINT)" if interrupted
               else "was cancelled by the scheduler (scancel, by the user or an admin)"
               if stop_sym is not None and SCHEDULER_CANCEL_PATTERNS & set(stop_sym.patterns)
               else f"received {named}" if named
               else f"received {STOP_SIGNALS[exit_signal]}" if exit_signal in STOP_SIGNALS
               else "was stopped by a signal")
        tail = f" {ending}" if ending else ""
        return verdict("stopped", f"the run {how} (line {stop_line.line}){steps}{tail}; a "
                       "retry or a resume from the last checkpoint carries on",
                       stop_sym or exc_sym or exit_sym, exit_sym, cause=stop_line)

    if killed is not None or (exit_signal == 9 and failing_exc is None and not collapsed):
        sym = killed or exit_sym
        assert sym is not None  # one of the two holds here
        who = _ranks(sym) or "a rank "
        exit_num = _num(sym.values, "exit_code", "min")
        exit_text = f" (exit {int(exit_num)})" if exit_num is not None and exit_num < 0 else ""
        return verdict("killed", f"{who}was killed by SIGKILL{steps}{exit_text}; {UNEXPLAINED_KILL}. "
                       "Usual causes: "
                       + "; ".join(SIGKILL_CAUSES), sym, exit_sym, cause=sym.first)

    ended = exit_sym or failing_exc
    if ended is not None:
        if collapsed:
            cause = "the fp16 loss scale collapsed and the run stopped"
        elif get("config-mismatch") is not None:
            cause = "the config was rejected (Trainer/Accelerate vs DeepSpeed) and the run stopped"
        elif failing_exc is not None and traceback_only(failing_exc):
            cause = (f"{_ranks(failing_exc) or 'a rank '}raised an exception whose traceback is "
                     f"cut before the line that names it (traceback at line "
                     f"{failing_exc.last.line})")
        elif failing_exc is not None:
            first = ranks.culprit if ranks is not None else None
            if first is not None and first.kind == "failed-first" and first.waited:
                # several ranks raised, but only one failed on its own: the others' exceptions
                # are the lost peer or timeout that followed (diagnose/ranks.py)
                cause = f"{_rank_list(first.ranks)} died first on {exception_phrase(failing_exc)}"
                ending = (f"{ending}; {_rank_list(first.waited)} only waited for it (a lost peer "
                          "or timeout is the consequence)").lstrip()
            else:
                cause = f"{_ranks(failing_exc) or 'a rank '}died on {exception_phrase(failing_exc)}"
        else:
            exit_code = _num(exit_sym.values, "exit_code", "min") if exit_sym is not None else None
            cause = (f"a rank was killed by {SIGNALS.get(exit_signal, f'signal {exit_signal}')}"
                     if exit_signal is not None
                     else "a rank ended and the launcher stopped the others; the log holds no exit "
                     "code or error of it" if torn_down else "a rank exited non-zero")
            if exit_signal is not None and exit_code is not None:
                ending = f"(exit {int(exit_code)})"  # the signal is named already
        tail = f" {ending}" if ending else ""
        return verdict("failed", f"{cause}{steps}{tail}", collapse or get("config-mismatch")
                       or failing_exc, exit_sym)

    reasons: list[str] = []
    ev: list[Symptom | None] = []
    if collapsed:
        scale = _scale_phrase(get("fp16-overflow"))
        reasons.append(f"the fp16 loss scale collapsed{scale}")
        ev += [collapse, get("fp16-overflow")]
    if progress.mostly_skipped:
        where = f" ({progress.skipped_where})" if progress.skipped_where else ""
        reasons.append(f"{progress.steps_skipped} of {progress.steps_done} steps were "
                       f"skipped{where}")
    nan = get("nan-loss")
    if skipped_step_norms(nan, get("fp16-overflow")):
        nan = None  # a skipped step's grad norm: judged with the overflows below
    if nan is not None:
        reasons.append(f"the loss or grad norm became NaN/inf ({nan.count} time(s), first at line "
                       f"{nan.first.line})")
        ev.append(nan)
    zero = get("loss-zero")
    if zero is not None:
        reasons.append(f"the loss is exactly 0.0 ({zero.count} logged step(s) from line "
                       f"{zero.first.line})")
        ev.append(zero)
    rise = diverged(timeline) if not reasons else None
    if rise is not None:  # finite but climbing far above its minimum (diagnose/divergence.py)
        return replace(verdict("not-learning", rise.phrase() + steps, cause=rise.last_at),
                       evidence=(rise.low_at, rise.last_at), fingerprint=None)
    if reasons:
        where = steps if not progress.mostly_skipped else ""
        return verdict("not-learning", "; ".join(reasons) + where, *ev)

    error = get("error-line")
    late = error is not None and error.last.line > last_progress.get(error.last.file, 0)
    if error is not None and late:
        decisive = bool(set(error.patterns) - SUGGESTIVE_ERROR_PATTERNS)
        where = f"{error.last.location}" + (f", rank {error.last.rank}"
                                           if error.last.rank is not None else "")
        after = " after the last progress line" if last_progress else ""
        if decisive and not (life.finished is not None and _before(error.last, life.finished)):
            return replace(verdict(
                "failed", f"the cause is not recognized; the last error-like line{after} "
                f"({where}): {_quote(error.last.text)}{steps}", error, cause=error.last),
                decided_by="error-line")
        if life.finished is None:
            return replace(verdict(
                "unknown", f"{error.count} error-like line(s){after}, none that says the run "
                f"failed; the last ({where}): {_quote(error.last.text)}{steps}", error,
                cause=error.last), decided_by="error-line")
    overflow = get("fp16-overflow")
    if overflow is not None:
        scale = _scale_phrase(overflow)
        if _steps_after(timeline, _last_line(overflow)):
            return verdict("recovered", f"{overflow.count} fp16 overflow(s) while the loss scaler "
                           f"searched{scale}, then training went on{steps}", overflow)
        return verdict("unknown", f"{overflow.count} fp16 overflow(s){scale} and no step printed "
                       f"after the last one (line {overflow.last.line}): the log does not show "
                       "yet whether the scaler settled", overflow)
    judged = {k for k, _w in FATAL_CAUSES} | {
        "hang", "launcher-nonzero-exit", "python-exception", "loss-scale-collapse", "nan-loss",
        "loss-zero", "fp16-overflow", "config-mismatch", "run-stopped", "error-line"}
    unjudged = sorted(k for k in symptoms if k not in judged)
    if unjudged:  # a kind added to the formats after this module: never call that run healthy
        return verdict("unknown", f"the log shows {', '.join(unjudged)}, which the verdict does "
                       "not judge yet", *(symptoms[k] for k in unjudged))

    cut = next((f for f in findings if f.name == "traceback-cut"), None)
    if cut is not None:  # a traceback without its end: an exception was raised, which is unknown
        where = f" (line {cut.evidence[0].line})" if cut.evidence else ""
        return Verdict("unknown", "unknown: a traceback is cut before its exception line"
                       f"{where}: the log does not show what the rank died on{steps}",
                       cut.evidence[:3], progress.steps_done, progress.steps_skipped)
    trend = _loss_trend(timeline)
    if life.finished is not None:
        return verdict("healthy", f"the run finished (line {life.finished.line} says so){steps}"
                       f"{trend}")
    if steps or trend or last_progress:
        if life.started is not None:
            return verdict("ended-mid-run", f"the log stops after progress{steps}{trend}, with no "
                           "exit line and no error: the run may still be going, or it hung or was "
                           f"killed without a word{_age_phrase(life.age_s)} (to see a live run: "
                           "dsdoctor watch --pid PID)")
        return verdict("healthy", f"no failure symptom in the log{steps}{trend}")
    if life.started is not None:
        return verdict("ended-mid-run", "the log stops after the launch with no progress, no exit "
                       f"line and no error{_age_phrase(life.age_s)}: still starting, or stuck "
                       "(to see a live run: dsdoctor watch --pid PID)")
    return verdict("unknown", "no progress line and no failure in the log: it cannot tell how the "
                   "run went")


def _quote(text: str, width: int = 110) -> str:
    """A log line quoted on one line, cut to ``width`` from its start: a long line's start is its
    logger prefix (time, host, pid), its end the message."""
    text = " ".join(text.split())
    return f"`{text}`" if len(text) <= width else f"`...{text[-(width - 3):]}`"


def _loss_trend(points: Sequence[TimelinePoint]) -> str:
    """``; loss 4.642 → 1.172 over 30 logged points`` (finite losses only), or ``""``."""
    losses = [p.loss for p in points if p.loss is not None and p.loss == p.loss
              and abs(p.loss) != float("inf")]
    if len(losses) < 2:
        return ""
    return f"; loss {losses[0]:g} → {losses[-1]:g} over {len(losses)} logged points"


def _scale_phrase(overflow: Symptom | None) -> str:
    """`` (scale 65536 → 1)`` from the overflow symptom's attempted/next scales."""
    if overflow is None:
        return ""
    hi = _num(overflow.values, "attempted_scale", "max")
    lo = _num(overflow.values, "next_scale", "min")
    if lo is None:
        lo = _num(overflow.values, "attempted_scale", "min")
    if hi is None or lo is None or hi == lo:
        return ""
    return f" (scale {_fmt(hi)} → {_fmt(lo)})"


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


__all__ = ["FATAL_CAUSES", "SIGNALS", "Lifecycle", "Progress", "decide", "exception_phrase",
           "exit_phrase", "sigkill_only"]
