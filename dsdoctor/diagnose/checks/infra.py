"""Checks of the run-ending infrastructure failures (DS114-DS119): NCCL, CUDA, /dev/shm, disk, scheduler, checkpoints.

Each hook reads what the failure message itself says (the NCCL reason and version, the CUDA error
string, the size NCCL wanted in /dev/shm, the path that could not be written, the job id, the
checkpoint's world size) and names the likely causes for this run and the input that would settle
the rest (an env snapshot, NCCL_DEBUG=INFO output). Nothing is prescribed that the run already has.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, gib, log_facts, param_count, trainer_arg, vals
from dsdoctor.facts.context import Context
from dsdoctor.model import Evidence, Finding, Symptom

# --------------------------------------------------------------------------------- helpers


def _texts(values: Any) -> list[str]:
    """A text field's distinct values (aggregated as a list) as strings."""
    if isinstance(values, list):
        return [str(v) for v in values]
    return [str(values)] if values is not None else []


def _evidence(*symptoms: Symptom | None, limit: int = 8) -> tuple[Evidence, ...]:
    out: list[Evidence] = []
    for s in symptoms:
        if s is not None:
            out.extend(e for e in s.evidence if e not in out)
    return tuple(out[:limit])


def _mib(b: float | int | None) -> str:
    return "?" if b is None else f"{b / 2**20:.1f} MiB"


def _fact_paths(ctx: Context, name: str) -> list[tuple[str, Evidence]]:
    """(directory, evidence) of the checkpoint-save / checkpoint-load facts, in log order.

    DeepSpeed logs the first file it writes or reads; the user knows the directory.
    """
    out = []
    for f in ctx.facts_named(name):
        p = f.values.get("path")
        if isinstance(p, str) and p:
            if p.endswith((".pt", ".bin", ".safetensors", ".pth")) and "/" in p:
                p = p.rsplit("/", 1)[0]
            out.append((p, f.evidence))
    return out


def _versions(ctx: Context) -> list[str]:
    """torch / CUDA / NCCL / driver versions known from the env snapshot or the log."""
    lf = log_facts(ctx)
    out = []
    for label, v in (("torch", ctx.env_get("packages.torch") or lf.version("torch")),
                     ("torch CUDA", ctx.env_get("cuda.torch_cuda") or lf.cuda.get("torch cuda")),
                     ("torch's NCCL", ctx.env_get("cuda.torch_nccl")),
                     ("NVIDIA driver", ctx.env_get("nvml.driver")),
                     ("driver CUDA", ctx.env_get("cuda.driver_cuda_version"))):
        if v:
            out.append(f"{label} {v}")
    return out


# --------------------------------------------------------------------------------- DS114 NCCL

# NVIDIA's troubleshooting guide: system/cuda errors are a failed external call, invalid
# argument/usage a programming error of the application; NCCL returns a system error when it
# cannot extend its /dev/shm segment (misc/shmutils.cc@v2.21.5-1) and invalid usage for two
# ranks on one GPU (init.cc@v2.21.5-1).
_NCCL_CAUSES = {
    "unhandled system error": (
        "a system call or library NCCL called failed: for instance /dev/shm too small or not "
        "writable in a container, or a socket between nodes (NCCL_SOCKET_IFNAME)"),
    "unhandled cuda error": (
        "a CUDA call inside NCCL failed: often an earlier CUDA error on this rank (look above) "
        "or a driver/CUDA mismatch"),
    "internal error": (
        "NCCL hit an internal error (its message asks to report it to the NCCL developers); the "
        "NCCL WARN lines before it name the part that failed"),
    "invalid usage": (
        "NCCL was called wrongly by the application: for instance two ranks on the same GPU "
        "('Duplicate GPU detected' in the NCCL WARN lines)"),
    "invalid argument": (
        "NCCL rejected an argument of the call: the NCCL WARN line names it"),
    "remote process exited or there was a network error": (
        "another rank died first (its own error is the cause: find it in that rank's log) or the "
        "network between nodes dropped (InfiniBand/Ethernet errors, a node going away)"),
}


def nccl_error(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS114: an NCCL call failed (not a timeout): the reason, the versions, what to compare."""
    s = ctx.symptom("nccl-error")
    if s is None:
        return
    reasons = _texts(s.values.get("reason"))
    results = _texts(s.values.get("nccl_result"))
    version = vals(s, "nccl_version", "first")
    if reasons or results:
        said = f"NCCL failed with '{reasons[0] if reasons else results[0]}'"
    elif isinstance(vals(s, "ib_status", "first"), int):
        said = "NCCL reported an InfiniBand/RoCE completion error"
    elif _texts(s.values.get("cuda_failure")):
        said = "NCCL reported a failed CUDA call"
    elif _texts(s.values.get("mismatch")):
        said = "NCCL found that the ranks disagree"
    else:
        said = "NCCL reported a failed connection to a peer"
    msg = [f"{said} (line {s.first.line})" + (f", NCCL {version}" if version else "") + "."]
    causes = [_NCCL_CAUSES[r] for r in reasons if r in _NCCL_CAUSES]
    ib = vals(s, "ib_status", "first")
    if isinstance(ib, int):
        causes.append(f"an InfiniBand/RoCE completion error (status {ib}"
                      + (", retry count exceeded: a link, switch or peer that stopped answering"
                         if ib == 12 else "") + "): check the fabric (ibstat, port counters) and "
                      "whether a peer rank died first")
    os_errs = _texts(s.values.get("os_error"))
    if os_errs or (s.patterns.get("nccl-warn-failure") and not ib
                   and not _texts(s.values.get("cuda_failure"))):
        causes.append("a peer's connection " + (f"failed ({os_errs[0]})" if os_errs else "closed")
                      + ": the rank on the other side died (its log has the first error) or the "
                      "network between the nodes dropped; NCCL_SOCKET_IFNAME must name an "
                      "interface every node can reach")
    mismatch = next(iter(_texts(s.values.get("mismatch"))), None)
    if mismatch:
        local, remote = vals(s, "local_size", "first"), vals(s, "remote_size", "first")
        sizes = f" (this rank {local} bytes, the peer {remote})" if local and remote else ""
        causes.append(f"the ranks disagree ({mismatch}{sizes}): different NCCL versions or NCCL_* "
                      "settings on the nodes (compare 'NCCL version' and the NCCL_ variables in "
                      "each node's log), or ranks that call collectives in a different order or "
                      "with different sizes")
    for cf in _texts(s.values.get("cuda_failure"))[:1]:
        causes.append(f"a CUDA call inside NCCL failed ('{cf}'): look for an earlier CUDA error, "
                      "or a driver/CUDA mismatch in the container")
    if ctx.has_symptom("shm-exhausted"):
        causes.insert(0, "the log also shows /dev/shm running out (see DS116): that is the cause")
    if ctx.has_symptom("cuda-error"):
        causes.insert(0, "the log also shows a CUDA error (see DS115): NCCL only reports it")
    if ctx.has_symptom("gpu-oom"):
        causes.insert(0, "the GPU was out of memory (see DS105): NCCL could not allocate its buffers")
    if causes:
        msg.append("Likely: " + "; ".join(causes) + ".")
    vers = _versions(ctx)
    if vers:
        msg.append("Versions: " + ", ".join(vers) + ".")
    warn = next((e for e in s.evidence if "NCCL WARN" in e.text), None)
    if warn is not None:
        # NCCL_DEBUG is already on: point at what its WARN lines say instead of asking for them.
        w = warn
        fix = [f"start from the first NCCL WARN (line {w.line}): it names the failing call"]
    else:
        fix = ["rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) and read the first "
               "'NCCL WARN' line of the failing rank: it names the call that failed"]
    if not ctx.env:
        fix.append("compare torch's NCCL (python -c 'import torch; print(torch.cuda.nccl."
                   "version())') and the NVIDIA driver on every node; `dsdoctor env` records both")
    if "remote process exited or there was a network error" in reasons:
        fix.append("find the first rank that failed (per-rank logs) and fix its error")
    yield finding(" ".join(msg), fix="; ".join(fix) + ".", evidence=_evidence(
        s, ctx.symptom("shm-exhausted"), ctx.symptom("cuda-error")))


# --------------------------------------------------------------------------------- DS115 CUDA

def _cuda_cause(err: str, assertion: str | None) -> tuple[str, str]:
    e = err.lower()
    if "srcindex < srcselectdimsize" in (assertion or "").lower():
        return ("an embedding lookup got an index past the end of the table: a token id >= the "
                "embedding size (tokens added to the tokenizer without model.resize_token_"
                "embeddings(len(tokenizer)), or a tokenizer of another model)",
                "check max(input_ids) against model.get_input_embeddings().num_embeddings and call "
                "resize_token_embeddings after adding tokens")
    if "device-side assert" in e or assertion:
        return ("a kernel's assertion failed: usually an index out of range (labels outside "
                "[0, num_classes), token ids past the vocabulary)",
                "rerun on CPU or with CUDA_LAUNCH_BLOCKING=1 to see the failing operation and its "
                "inputs")
    if "no kernel image" in e:
        return ("torch or an extension was built without kernels for this GPU's architecture "
                "(compute capability)",
                "install a torch build whose CUDA supports this GPU, and rebuild DeepSpeed ops / "
                "extensions with TORCH_CUDA_ARCH_LIST set to this GPU's capability")
    if "illegal memory access" in e or "misaligned address" in e or "illegal instruction" in e:
        return ("a kernel read or wrote outside its memory: a bug in a custom kernel (DeepSpeed "
                "fused/transformer kernels, flash-attention, a quantization library) or inputs it "
                "does not support (sequence length, dtype); the failing kernel is often not the "
                "one in the traceback",
                "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel, then disable it (the fused "
                "optimizer or attention implementation) or upgrade the library that owns it")
    if "driver" in e and ("insufficient" in e or "too old" in e):
        return ("the NVIDIA driver is too old for the CUDA runtime torch was built with, "
                "usually a newer CUDA major version (within one major version, CUDA's "
                "minor-version compatibility lets a newer runtime run on an older driver)",
                "update the driver, or install a torch build for the CUDA major version the "
                "driver supports")
    if e.startswith("cublas_status") or e.startswith("cudnn_status"):
        return ("a cuBLAS/cuDNN call failed; possible reasons: the GPU is nearly full (the "
                "library could not get a workspace), a dtype the GPU does not support, or a CUDA "
                "context broken by an earlier error",
                "look for an earlier error or OOM; check the dtype against the GPU; rerun with "
                "CUDA_LAUNCH_BLOCKING=1")
    if "ecc" in e or "uncorrectable" in e:
        return ("the GPU reported a hardware memory error", "drain the node and check "
                "nvidia-smi -q -d ECC; restart from the last checkpoint on healthy GPUs")
    return ("a CUDA call failed; CUDA reports errors asynchronously, so the traceback may point "
            "at a later, innocent call", "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing "
            "operation")


def cuda_error(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS115: a CUDA runtime/library error other than out of memory: what it means and how to find it."""
    s = ctx.symptom("cuda-error")
    if s is None:
        return
    errs = _texts(s.values.get("cuda_error"))
    statuses = [f"{lib}_STATUS_{st}" for lib, st in zip(_texts(s.values.get("library")),
                                                         _texts(s.values.get("status")))]
    assertion = next(iter(_texts(s.values.get("assertion"))), None)
    if (statuses and not errs and assertion is None and ctx.symptom("gpu-oom") is not None
            and all(st.endswith("_STATUS_ALLOC_FAILED") for st in statuses)):
        return  # a cuBLAS/cuDNN workspace the full GPU refused: DS105 (gpu-oom) explains it
    driver_cuda = vals(s, "driver_cuda", "first")
    xid = vals(s, "xid", "first")
    if isinstance(xid, (int, float)) or s.patterns.get("gpu-fallen-off-bus"):
        err, cause = _xid_cause(int(xid) if isinstance(xid, (int, float)) else 79,
                                next(iter(_texts(s.values.get("pci"))), None))
        if not isinstance(xid, (int, float)):  # the driver's multi-line message, no Xid number
            err = "the GPU fell off the bus (the driver lost it)"
    elif isinstance(driver_cuda, (int, float)):
        err = "The NVIDIA driver is too old"
        ver = f"{int(driver_cuda) // 1000}.{(int(driver_cuda) % 1000) // 10}"
        major = int(driver_cuda) // 1000
        # CUDA minor-version compatibility: any 11.x (12.x) runtime runs on an 11.x (12.x)
        # driver, e.g. cu118 wheels on an R470 (CUDA 11.4) driver, so "too old" means a newer
        # major version (or a feature beyond compatibility), not any newer minor version.
        cause = (f"the driver supports CUDA {ver}, too old for the CUDA runtime torch was built "
                 f"with: usually a CUDA {major + 1}.x or later build (builds for CUDA {major}.x "
                 "run on it through minor-version compatibility)",
                 f"update the NVIDIA driver, or install a torch build for CUDA {major}.x")
    else:
        err = errs[0] if errs else (statuses[0] if statuses else
                                    (f"assertion `{assertion}` failed" if assertion else "CUDA error"))
        cause = _cuda_cause(errs[0] if errs else (statuses[0] if statuses else ""), assertion)
    msg = f"CUDA error: {err} (line {s.first.line}). Likely cause: {cause[0]}."
    if assertion and errs:
        msg += f" The kernel assertion `{assertion}` failed first."
    gpu = ctx.env_get("gpus")
    if isinstance(gpu, list) and gpu and isinstance(gpu[0], dict) and gpu[0].get("compute_capability"):
        msg += f" GPU: {gpu[0].get('name')} (compute capability {gpu[0]['compute_capability']})."
    vers = _versions(ctx)
    if vers:
        msg += " Versions: " + ", ".join(vers) + "."
    yield finding(msg, fix=cause[1] + ".", evidence=_evidence(s))


#: NVIDIA's Xid codes (the kernel driver's error reports) by what they point at.
_XID_HARDWARE = {48: "a double-bit ECC error", 63: "an ECC page retirement", 64: "an ECC page "
                 "retirement failure", 74: "an NVLink error", 79: "the GPU fell off the bus",
                 92: "a high single-bit ECC error rate", 94: "a contained ECC error",
                 95: "an uncontained ECC error", 119: "a GSP firmware timeout",
                 120: "a GSP firmware error"}
_XID_PROGRAM = {13: "a graphics engine exception", 31: "a GPU memory page fault (MMU fault)",
                43: "the GPU stopped processing (a kernel was killed)"}


def _xid_cause(xid: int, pci: str | None) -> tuple[str, tuple[str, str]]:
    """What an Xid in the kernel log means: the hardware (drain the node) or the program."""
    where = f" on {pci}" if pci else ""
    if xid in _XID_HARDWARE:
        return (f"NVIDIA Xid {xid}{where}: {_XID_HARDWARE[xid]}",
                (f"a GPU hardware or driver fault ({_XID_HARDWARE[xid]}), not the training code",
                 "take the node out of the pool and have the GPU checked (nvidia-smi -q -d ECC, "
                 "a GPU reset or a reboot; replace it if it recurs), then resume from the last "
                 "checkpoint on healthy GPUs"))
    what = _XID_PROGRAM.get(xid, "a GPU error reported by the driver")
    return (f"NVIDIA Xid {xid}{where}: {what}",
            (f"{what}: usually the program (an out-of-bounds access in a kernel, like an illegal "
             "memory access), sometimes the driver",
             "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; if it recurs on one GPU only "
             "or with different programs, check the GPU and the driver (nvidia-smi -q)"))


# --------------------------------------------------------------------------------- DS116 /dev/shm

def shm_exhausted(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS116: /dev/shm too small or not writable: the size NCCL wanted, the container flag to set."""
    s = ctx.symptom("shm-exhausted")
    if s is None:
        return
    pats = s.patterns
    wanted = vals(s, "wanted_bytes", "max")
    os_err = next(iter(_texts(s.values.get("os_error"))), None)
    shm = ctx.env_get("cpu.shm_total_bytes")
    parts = []
    if pats.get("nccl-shm-segment"):
        if os_err and "permission" in os_err.lower():
            parts.append(f"NCCL could not open its shared-memory segment ({os_err}): /dev/shm is "
                         "not writable for this user")
        else:
            parts.append("NCCL could not create its shared-memory segment in /dev/shm"
                         + (f" ({_mib(wanted)} for this segment; its shared-memory transport opens "
                            "one per connection between local ranks)" if wanted else ""))
    if pats.get("torch-shm-write") or pats.get("semlock-enospc"):
        parts.append("a shared tensor or semaphore could not be created in /dev/shm: 'No space "
                     "left on device' there means shared memory, not the disk")
    if pats.get("dataloader-bus-error"):
        parts.append("DataLoader workers died with a bus error: they pass batches through /dev/shm "
                     "and it filled up")
    if pats.get("launcher-sigbus"):
        parts.append("a rank was killed by SIGBUS (exit -7): in a container this is often a write "
                     "to a full /dev/shm")
    msg = "; ".join(parts) + f" (line {s.first.line})."
    msg = msg[:1].upper() + msg[1:]
    if isinstance(shm, (int, float)) and shm:
        msg += f" The env snapshot shows /dev/shm of {_mib(shm)}"
        msg += (" (Docker's default 64 MiB)." if abs(shm - 64 * 2**20) < 2**20 else ".")
    else:
        msg += " The size of /dev/shm is unknown: `df -h /dev/shm` inside the container (or " \
               "--env from `dsdoctor env`) settles it."
    if os_err and "permission" in os_err.lower():
        fix = "make /dev/shm writable (chmod 1777 /dev/shm, or mount a fresh tmpfs there)"
    else:
        fix = ("give the container more shared memory: docker run --ipc=host, or --shm-size=8g "
               "(NVIDIA's NCCL guide uses --shm-size=1g; DataLoader workers need room for "
               "num_workers x prefetch_factor batches more); Kubernetes: mount an emptyDir with "
               "medium: Memory at /dev/shm")
        if pats.get("dataloader-bus-error") or pats.get("torch-shm-write"):
            fix += "; or lower dataloader_num_workers"
        fix += ("; NCCL_SHM_DISABLE=1 only as a last resort (it turns off NCCL's shared-memory "
                "transport, whose traffic then goes through the network)"
                if pats.get("nccl-shm-segment") else "")
    yield finding(msg, fix=fix + ".", evidence=_evidence(s, ctx.symptom("nccl-error")))


# --------------------------------------------------------------------------------- DS117 disk

# Bytes per parameter of a full DeepSpeed/Trainer checkpoint with Adam in mixed precision: 2 (16-bit
# weights) + 4 (fp32 master) + 8 (two fp32 moments) = 14, as the ZeRO paper's 16 bytes minus grads.
_CKPT_BYTES_PER_PARAM = 14


def disk_full(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS117: the disk (or quota) is full: which write failed, where checkpoints go, their size."""
    s = ctx.symptom("disk-full")
    if s is None:
        return
    shm = ctx.symptom("shm-exhausted")
    if (shm is not None and set(s.patterns) == {"enospc"}
            and (shm.patterns.get("semlock-enospc") or shm.patterns.get("torch-shm-write"))):
        return  # the ENOSPC is /dev/shm's (semaphores, shared tensors): DS116 explains it
    paths = _texts(s.values.get("path"))
    errnos = s.values.get("errno")
    quota = isinstance(errnos, dict) and 122 in (errnos.get("min"), errnos.get("max"))
    if quota:
        what = "A write failed because the disk quota was exceeded"
    elif s.patterns.get("enospc"):
        what = "A write failed because the disk is full (No space left on device)"
    else:
        what = "A checkpoint write came up short, which is what a full disk or quota looks like"
    msg = [f"{what} (line {s.first.line})" + (f": {paths[0]}" if paths else "") + "."]
    if s.patterns.get("torch-save-write-failed") or s.patterns.get("torch-save-short-write"):
        msg.append("torch.save's 'file write failed' / 'unexpected pos' is a short write: the "
                   "checkpoint being saved did not fit (or the filesystem failed the write).")
    shm_path = any(p.startswith("/dev/shm") for p in paths)
    saves = _fact_paths(ctx, "checkpoint-save")
    out_dir = trainer_arg(ctx, "output_dir")
    where = saves[-1][0] if saves else (out_dir if isinstance(out_dir, str) else None)
    if shm_path:
        msg.append("The path is in /dev/shm: shared memory ran out, not the disk (see DS116).")
    elif where:
        msg.append(f"Checkpoints go to {where}" + (f" (line {saves[-1][1].line})" if saves else
                                                    " (--output_dir)") + ".")
    total, _, src = param_count(ctx)
    if total:
        size = total * _CKPT_BYTES_PER_PARAM
        count = f"{total / 1e9:.2f}B" if total >= 1e9 else f"{total / 1e6:.2f}M"
        msg.append(f"With {count} parameters ({src}) one full checkpoint with Adam states is "
                   f"about {gib(size) if size >= 2**30 else _mib(size)} "
                   f"({_CKPT_BYTES_PER_PARAM} bytes per parameter).")
    limit = trainer_arg(ctx, "save_total_limit")
    fix = ["free space where the checkpoint is written (df -h on that path shows what is left)"]
    if not (isinstance(limit, int) and limit > 0):
        fix.append("keep fewer checkpoints (--save_total_limit 2)")
    if trainer_arg(ctx, "save_only_model") is not True:
        fix.append("or skip optimizer states when resuming is not needed (--save_only_model)")
    if quota:
        fix.insert(0, "the quota is per user or project: write to a scratch/project filesystem")
    yield finding(" ".join(msg), fix="; ".join(fix) + ".",
                  evidence=_evidence(s) + tuple(e for _, e in saves[-1:]))


# --------------------------------------------------------------------------------- DS118 scheduler

def job_time_limit(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS118: the scheduler ended the job: time limit or preemption, and how to resume."""
    s = ctx.symptom("job-time-limit")
    if s is None:
        return
    if s.patterns.get("k8s-pod-evicted") and not s.patterns.get("slurm-cancelled-due-to"):
        yield _k8s_evicted(ctx, s)
        return
    if ((s.patterns.get("pbs-walltime-exceeded") or s.patterns.get("lsf-runlimit"))
            and not s.patterns.get("slurm-cancelled-due-to")):
        yield _pbs_walltime(ctx, s)
        return
    reasons = _texts(s.values.get("reason"))
    job = (_texts(s.values.get("job_id")) or ["?"])[0]
    at = next(iter(_texts(s.values.get("at"))), None)
    # submitit's handler says "this job is preempted" (its own word) for SLURM's preemption signal
    reason = ("PREEMPTION" if (reasons and reasons[0] == "preempted")
              or s.patterns.get("cloud-termination-imminent")
              else reasons[0] if reasons else "TIME LIMIT")
    spot = bool(s.patterns.get("cloud-termination-imminent")) and job == "?"
    who = ("The cloud preempted the spot VM" if spot
           else (f"SLURM cancelled job {job}" if job != "?" else "SLURM ended the job")
           + (f" at {at}" if at else "") + f" due to {reason.lower()}")
    msg = f"{who} (line {s.first.line}): the training did not fail, the scheduler stopped it."
    saves = _fact_paths(ctx, "checkpoint-save")
    if saves:
        msg += f" The last checkpoint in the log is {saves[-1][0]} (line {saves[-1][1].line})."
    else:
        msg += " The log shows no checkpoint save: progress since the start may be lost."
    if spot:
        fix = ("resume from the last checkpoint on a new VM and save often (GCP's preemption notice is "
               "up to 30 s), or run on on-demand VMs")
    elif reason == "PREEMPTION":
        fix = ("submit with --requeue and resume from the last checkpoint on restart "
               "(--resume_from_checkpoint / engine.load_checkpoint)")
    else:
        fix = ("resume from the last checkpoint in a new job, and ask for more time (--time) or "
               "save more often (--save_steps). A warning signal before the limit "
               "(sbatch --signal=B:USR1@300) helps only with a handler of your own that saves: "
               "the Trainer, Accelerate, DeepSpeed and torchrun (by default) do not handle SIGUSR1, whose "
               "default action ends the process, so without one it kills the ranks 5 minutes "
               "early without saving")
    yield finding(msg, fix=fix + ".", evidence=_evidence(s) + tuple(e for _, e in saves[-1:]))


def _pbs_walltime(ctx: Context, s: Symptom) -> Finding:
    """PBS/Torque, Moab or LSF killed the job at its run-time limit: the limit, the last checkpoint."""
    used, limit = vals(s, "walltime_s", "first"), vals(s, "limit_s", "first")
    told = (f" (it ran {used} s, the limit is {limit} s = {limit / 3600:.1f} h)"
            if isinstance(used, int) and isinstance(limit, int) else "")
    msg = (f"The batch scheduler killed the job at its walltime limit{told} (line "
           f"{s.first.line}): the training did not fail, it ran out of time.")
    saves = _fact_paths(ctx, "checkpoint-save")
    msg += (f" The last checkpoint in the log is {saves[-1][0]} (line {saves[-1][1].line})."
            if saves else " The log shows no checkpoint save: progress since the start may be lost.")
    ask = "bsub -W" if s.patterns.get("lsf-runlimit") else "#PBS -l walltime="
    fix = (f"resume from the last checkpoint in a new job and ask for more time ({ask}) "
           "or save more often (--save_steps)")
    return finding(msg, fix=fix + ".", evidence=_evidence(s) + tuple(e for _, e in saves[-1:]))


def _k8s_evicted(ctx: Context, s: Symptom) -> Finding:
    """Kubernetes evicted the pod under node pressure: which resource, and how to keep it placed."""
    res = (_texts(s.values.get("resource")) or _texts(s.values.get("condition")) or ["?"])[0]
    msg = (f"Kubernetes evicted the pod: the node was low on {res} (line {s.first.line}); the "
           "training did not fail by itself.")
    if res in ("ephemeral-storage", "DiskPressure"):
        fix = ("write checkpoints and caches to a persistent volume, not the container's disk, and "
               "request ephemeral-storage for the pod; then resume from the last checkpoint")
    elif res in ("memory", "MemoryPressure"):
        fix = ("set the pod's memory request to what the run uses (requests = limits) so it is "
               "placed on a node with room; then resume from the last checkpoint")
    else:
        fix = "set resource requests for the pod; then resume from the last checkpoint"
    return finding(msg, fix=fix + ".", evidence=_evidence(s))


# --------------------------------------------------------------------------------- DS119 checkpoint

def checkpoint_error(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS119: a checkpoint could not be loaded or converted: which kind, and the way out."""
    s = ctx.symptom("checkpoint-error")
    if s is None:
        return
    p = s.patterns
    loads = _fact_paths(ctx, "checkpoint-load")
    where = f" Checkpoint: {loads[-1][0]} (line {loads[-1][1].line})." if loads else ""
    if p.get("zero-checkpoint-world-size"):
        was, now = vals(s, "ckpt_world", "first"), vals(s, "world", "first")
        msg = (f"The ZeRO checkpoint was saved with {was} data-parallel ranks and is loaded with "
               f"{now} (line {s.first.line}): ZeRO optimizer states are partitioned per rank and "
               "DeepSpeed cannot re-partition them on load.")
        fix = (f"resume on {was} ranks; or convert it once with DeepSpeed's ds_to_universal.py "
               "and load with \"checkpoint\": {\"load_universal\": true}; or extract the weights "
               "with zero_to_fp32.py and start a new run without the optimizer states")
    elif p.get("zero-to-fp32-failed"):
        exp, found = vals(s, "expected", "first"), vals(s, "found", "first")
        d = next(iter(_texts(s.values.get("ckpt_dir"))), None)
        if exp is not None and found is not None:
            msg = (f"zero_to_fp32 expected {exp} optimizer shard(s) but found {found}"
                   + (f" in {d}" if d else "") + f" (line {s.first.line}): the directory mixes "
                   "checkpoints of different world sizes, or some ranks did not finish saving.")
            fix = ("point zero_to_fp32.py at one complete global_stepN directory saved by all "
                   "ranks (or the parent holding the 'latest' file), and delete stale shards")
        elif vals(s, "consumed", "first") is not None:
            msg = (f"zero_to_fp32 could not map the flat optimizer states back to the parameters "
                   f"(line {s.first.line}): the model in the checkpoint differs from what the "
                   "script reconstructs (frozen or shared parameters, a DeepSpeed version change).")
            fix = ("run the zero_to_fp32.py that was saved inside the checkpoint directory (same "
                   "DeepSpeed version), with --exclude_frozen_parameters if some were frozen")
        else:
            d = d[: -len("/latest")] if d and d.endswith("/latest") else d
            parent, _, tag = (d or "").rstrip("/").rpartition("/")
            if tag.startswith("global_step") and parent:
                msg = (f"zero_to_fp32 was run on the tag folder {d} (line {s.first.line}): it "
                       "expects the directory above it, which holds the 'latest' file.")
                fix = (f"run it on {parent}: python zero_to_fp32.py {parent} OUTPUT (add --tag "
                       f"{tag} to convert that step rather than the latest one)")
            else:
                msg = ("zero_to_fp32 found no DeepSpeed checkpoint where it was pointed"
                       + (f" ({d})" if d else "") + f" (line {s.first.line}).")
                fix = ("pass the checkpoint directory that holds the 'latest' file and the "
                       "global_stepN folder (e.g. output_dir/checkpoint-500), or --tag global_stepN")
    elif p.get("state-dict-size-mismatch"):
        params = _texts(s.values.get("param"))
        shapes = list(zip(_texts(s.values.get("ckpt_shape")), _texts(s.values.get("model_shape"))))
        empty = any(m.strip() == "0" for _, m in shapes)
        first = f"{params[0]}: [{shapes[0][0]}] in the checkpoint vs [{shapes[0][1]}]" if params and shapes else ""
        if empty:
            msg = (f"The checkpoint's tensors are loaded into a ZeRO-3 partitioned model whose "
                   f"parameters are empty placeholders ({first}, line {s.first.line}).")
            fix = ("load the weights before deepspeed.initialize, inside deepspeed.zero."
                   "GatheredParameters, or with engine.load_checkpoint; from_pretrained handles "
                   "ZeRO-3 itself")
        else:
            msg = (f"The checkpoint holds tensors of other shapes than the model ({first}, line "
                   f"{s.first.line}): it was saved from a different model configuration (hidden "
                   "size, vocabulary, number of heads) or a different tensor-parallel split.")
            fix = ("load it into the model configuration it was saved from (compare config.json), "
                   "or resize the vocabulary before loading")
    elif p.get("safetensors-header"):
        detail = (_texts(s.values.get("detail")) or ["?"])[0]
        msg = (f"A safetensors file is damaged ({detail}, line {s.first.line}): for instance cut "
               "short by an interrupted download or save, or a Git LFS pointer file.")
        fix = ("delete the file (or the model's Hugging Face cache folder) and download it again; "
               "compare its size with the size on the hub")
    elif p.get("safetensors-shared-tensors"):
        # a save, not a load: safetensors refuses tensors that alias one storage (tied weights)
        tensor = next(iter(_texts(s.values.get("first_tensor"))), None)
        msg = ("Saving failed: safetensors refuses tensors that share memory"
               + (f" ({tensor} and the weights tied to it)" if tensor else " (tied weights)")
               + f" (line {s.first.line}); nothing was written for this checkpoint.")
        fix = ("save through Trainer.save_model / model.save_pretrained, which drop the tied "
               "copies before writing (or safetensors.torch.save_model for a plain module); or "
               "untie the weights (clone one of them) before saving")
    elif p.get("ds-checkpoint-no-zero-files"):
        d = next(iter(_texts(s.values.get("ckpt_dir"))), None)
        msg = ("DeepSpeed's checkpoint reader found no ZeRO shard files (zero_pp_rank_*)"
               + (f" in {d}" if d else "") + f" (line {s.first.line}): the folder is not a "
               "global_stepN folder of a DeepSpeed save, or the save wrote no optimizer shards.")
        fix = ("point the conversion at the global_stepN folder that holds the zero_pp_rank_* "
               "files (list it first); a checkpoint saved without them (model weights only) "
               "cannot be converted this way")
    elif p.get("torch-storage-write-failed"):
        # a save: torch's storage writer (torch.save's legacy format, distributed checkpoint)
        reason = next(iter(_texts(s.values.get("reason"))), None)
        msg = ("Saving failed: torch could not write a tensor to the checkpoint file"
               + (f" ({reason})" if reason else "") + f" (line {s.first.line}); that "
               "checkpoint is incomplete.")
        fix = ("check the file system the checkpoint goes to (free space: df -h; its errors: "
               "dmesg -T), then resume from the last complete checkpoint; delete the partial file")
    elif p.get("torch-load-damaged-archive"):
        msg = (f"The checkpoint file is not a readable zip archive (line {s.first.line}): torch.load "
               "found no central directory, the index a zip writer puts at the end of the file; "
               "a file that did not arrive whole (a cut download or copy, a save interrupted or "
               "stopped by a full disk) looks like this, and loading it again fails the same way.")
        fix = ("delete that file (or the whole checkpoint folder) and resume from the previous "
               "checkpoint, or download it again if it was downloaded; check free disk space "
               "before the next save")
    elif p.get("ray-tune-checkpoint-handling"):
        path = next(iter(_texts(s.values.get("path"))), None)
        msg = ("Ray Tune failed while handling a trial's checkpoint"
               + (f" ({path})" if path else "") + f" (line {s.first.line}): saving it or a "
               "callback on it (such as syncing it) raised; the exception at the end of the "
               "traceback that follows says which and why.")
        fix = ("read the traceback's last line and act on it (for a save or sync that could not "
               "write: free space and write access where the trial saves and syncs its "
               "checkpoints), then rerun from the last complete checkpoint")
    else:
        which = (_texts(s.values.get("which")) or [""])[0]
        keys = _texts(s.values.get("first_key"))
        prefixed = any(k.startswith("module.") for k in keys)
        msg = (f"load_state_dict failed (line {s.first.line})"
               + (f": {which.lower()} keys such as {keys[0]!r}" if keys else "") + ".")
        if prefixed:
            msg += " The 'module.' prefix means it was saved from a wrapped model (DDP/DeepSpeed engine)."
            fix = "strip the 'module.' prefix from the keys, or save engine.module.state_dict()"
        else:
            fix = ("load into the same model class and configuration that saved it (PEFT adapters "
                   "through PeftModel.from_pretrained, not load_state_dict on the base model)")
    yield finding(msg + where, fix=fix + ".",
                  evidence=_evidence(s) + tuple(e for _, e in loads[-1:]))
