"""Collect a snapshot of the training environment, and read one back.

The snapshot (``dsdoctor env --format json``) is what ``analyze --env FILE`` and ``report`` use.
Each probe runs on its own: a failing probe adds an entry to ``errors`` and the rest still runs.
Heavy packages are never imported here: torch and DeepSpeed are probed in a child Python process
(only when installed) so that a broken CUDA install, a segfault or a hang cannot take the report
down, and so that ``dsdoctor env`` stays fast on machines without them.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dsdoctor import __version__
from dsdoctor.errors import UsageError
from dsdoctor.facts import env_child, envdisks
from dsdoctor.facts.envsettings import NOT_SHOWN, is_setting
from dsdoctor.redact import REDACTED, Redactor
from dsdoctor.safeio import read_bounded

SCHEMA_VERSION = 1

#: Distribution names reported under ``packages`` (key = name shown, value = candidates to query).
PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "deepspeed": ("deepspeed",),
    "transformers": ("transformers",),
    "accelerate": ("accelerate",),
    "peft": ("peft",),
    "trl": ("trl",),
    "bitsandbytes": ("bitsandbytes",),
    "flash-attn": ("flash-attn", "flash_attn"),
    "apex": ("apex",),
    "nvidia-ml-py": ("nvidia-ml-py", "pynvml"),
    "triton": ("triton",),
    "datasets": ("datasets",),
    "numpy": ("numpy",),
    # The 1-bit optimizers' communication backends (deepspeed[1bit] / [1bit_mpi]); PyPI's
    # deepspeed does not bring them.
    "cupy": ("cupy", "cupy-cuda12x", "cupy-cuda11x", "cupy-cuda13x"),
    "mpi4py": ("mpi4py",),
}

#: Environment variables that matter to distributed training, by exact name ...
ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
        "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TOKENIZERS_PARALLELISM",
        "LD_LIBRARY_PATH", "LD_PRELOAD", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "WANDB_MODE",
        "WANDB_PROJECT", "SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_PROCID",
        "SLURM_LOCALID", "SLURM_GPUS_ON_NODE", "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE",
        "SLURM_JOB_NUM_NODES", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "TORCHELASTIC_RUN_ID",
        "TORCH_CUDA_ARCH_LIST", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
    }
)
# ... and by prefix.
ENV_PREFIXES = (
    "NCCL_", "TORCH_", "TORCHINDUCTOR_", "DS_", "DEEPSPEED_", "HF_", "ACCELERATE_", "TRANSFORMERS_",
    "PYTORCH_", "FI_", "UCX_", "GLOO_", "NVTE_", "CUDNN_", "NVIDIA_TF32", "MEGATRON_",
)

_ENV_PROBE_TIMEOUT = 60.0

def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --------------------------------------------------------------------------------------------
# individual probes (each returns plain JSON values; exceptions are caught by collect())
# --------------------------------------------------------------------------------------------

def probe_python() -> dict[str, Any]:
    """Interpreter version, implementation and whether it runs in a virtualenv/conda env."""
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "virtualenv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        "conda_env": os.environ.get("CONDA_DEFAULT_ENV"),
    }


def _os_release() -> str | None:
    for p in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = Path(p).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
        if m:
            return m.group(1)
    return None


def _container() -> str | None:
    # Why: a Docker/Kubernetes run has its own /dev/shm and memory limits, and DeepSpeed's
    # template asks for the "Docker context".
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if os.environ.get("SINGULARITY_CONTAINER") or os.environ.get("APPTAINER_CONTAINER"):
        return "apptainer"
    return None


def probe_os() -> dict[str, Any]:
    """Operating system, kernel, distribution and container runtime."""
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "distribution": _os_release() if platform.system() == "Linux" else platform.platform(),
        "libc": "-".join(x for x in platform.libc_ver() if x) or None,
        "container": _container(),
    }


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _cgroup_memory_limit() -> int | None:
    # A container or SLURM job may get far less than the host's RAM; CPU-offload rules need
    # the limit, not the host total.
    for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(p).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            return int(raw)
    return None


def probe_cpu() -> dict[str, Any]:
    """CPU count, model, RAM total/available, swap, /dev/shm size and cgroup memory limit."""
    import psutil  # a declared dependency; imported here so `import dsdoctor.facts.envinfo` stays light

    vm = psutil.virtual_memory()
    out: dict[str, Any] = {
        "count": os.cpu_count(),
        "physical_count": psutil.cpu_count(logical=False),
        "model": _cpu_model(),
        "ram_total_bytes": int(vm.total),
        "ram_available_bytes": int(vm.available),
        "swap_total_bytes": int(psutil.swap_memory().total),
        "cgroup_memory_limit_bytes": _cgroup_memory_limit(),
    }
    try:
        st = os.statvfs("/dev/shm")
        out["shm_total_bytes"] = st.f_frsize * st.f_blocks
    except (OSError, AttributeError):
        out["shm_total_bytes"] = None
    try:
        out["affinity_count"] = len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass
    return out


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def probe_gpus(notes: list[str], nvml: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """GPUs through NVML: name, memory, compute capability, bf16 support, driver.

    Returns (gpus, nvml_info). No NVML library / no driver / no GPU is not an error: it gives
    ``[]`` and a note. ``nvml`` lets tests pass a stand-in module.
    """
    info: dict[str, Any] = {"available": False, "driver": None, "cuda_driver_version": None}
    if nvml is None:
        if importlib.util.find_spec("pynvml") is None:
            notes.append("nvidia-ml-py (pynvml) is not installed: GPUs not probed")
            return [], info
        import pynvml  # lazily: only needed here

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        notes.append(f"no NVIDIA driver/GPU visible through NVML ({type(exc).__name__}: {exc})")
        return [], info
    gpus: list[dict[str, Any]] = []
    try:
        info["available"] = True
        info["driver"] = _s(nvml.nvmlSystemGetDriverVersion())
        try:
            v = int(nvml.nvmlSystemGetCudaDriverVersion())
            info["cuda_driver_version"] = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            g: dict[str, Any] = {"index": i, "name": _s(nvml.nvmlDeviceGetName(h)),
                                 "driver": info["driver"]}
            try:
                g["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
            except Exception as exc:
                g["memory_total_bytes"] = None
                notes.append(f"GPU {i}: memory not readable ({exc})")
            links = _nvlink_active(nvml, h)
            if links is not None:
                g["nvlink_active_links"] = links
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
                g["compute_capability"] = f"{major}.{minor}"
                g["bf16_supported"] = int(major) >= 8  # Ampere (8.0) and newer have bf16 units
            except Exception:
                g["compute_capability"] = None
                g["bf16_supported"] = None
            gpus.append(g)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    if not gpus:
        notes.append("NVML works but reports no GPU")
    return gpus, info


def _nvlink_active(nvml: Any, handle: Any) -> int | None:
    """Active NVLink links of a GPU (None when NVML cannot say: PCIe-only GPUs raise)."""
    if not hasattr(nvml, "nvmlDeviceGetNvLinkState"):
        return None
    count = 0
    try:
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
        for link in range(max_links):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) == enabled:
                    count += 1
            except Exception:  # NotSupported / InvalidArgument past the last link
                break
    except Exception:
        return None
    return count


def probe_interconnect(sys_root: str = "/sys/class") -> dict[str, Any]:
    """InfiniBand/RoCE ports from sysfs (device, port, state, rate) and network interfaces.

    Multi-node NCCL problems depend on them, and DeepSpeed's template asks for "interconnects".
    """
    ib: list[dict[str, Any]] = []
    root = Path(sys_root) / "infiniband"
    if root.is_dir():
        for dev in sorted(root.iterdir()):
            ports = dev / "ports"
            for port in sorted(ports.iterdir()) if ports.is_dir() else []:
                def read(name: str, port: Path = port) -> str | None:
                    try:
                        return (port / name).read_text().strip()
                    except OSError:
                        return None
                ib.append({"device": dev.name, "port": port.name, "state": read("state"),
                           "rate": read("rate"), "link_layer": read("link_layer")})
    net_root = Path(sys_root) / "net"
    nics = sorted(p.name for p in net_root.iterdir() if p.name != "lo") if net_root.is_dir() else []
    return {"infiniband": ib, "net_interfaces": nics}


def package_versions() -> dict[str, str | None]:
    """Installed versions from package metadata (nothing is imported); null when absent."""
    out: dict[str, str | None] = {}
    for shown, candidates in PACKAGES.items():
        out[shown] = None
        for dist in candidates:
            try:
                out[shown] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def _nvcc(cuda_home: str | None) -> tuple[str | None, str | None]:
    """(nvcc path, release version) from PATH or CUDA_HOME, or (None, None)."""
    cand = env_child.absolute_which("nvcc")
    if not cand and cuda_home and os.path.isabs(cuda_home) \
            and os.path.exists(os.path.join(cuda_home, "bin", "nvcc")):
        cand = os.path.join(cuda_home, "bin", "nvcc")
    if not cand:
        return None, None
    proc = subprocess.Popen([cand, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    raw, _, _ = env_child.communicate_bounded(proc, timeout=15, limit=64 << 10)
    m = re.search(r"release\s+([\d.]+)", raw.decode("utf-8", errors="replace"))
    return cand, m.group(1) if m else None


def _default_cuda_home() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


def _installed(name: str, python: str, packages: Mapping[str, str | None]) -> bool:
    """Whether the interpreter running the child probes has ``name`` (find_spec: no import)."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return importlib.util.find_spec(name) is not None
    return packages.get(name) is not None


def relevant_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that matter to distributed training: the values of known
    settings (secrets redacted), the names only of the rest (``envsettings``)."""
    environ = os.environ if environ is None else environ
    picked = {k: v for k, v in environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}
    shown = Redactor().env(dict(sorted(picked.items())))
    # a secret-named variable stays "<redacted>": that says more than "<not shown>"
    return {k: v if v == REDACTED or is_setting(k, picked[k], ENV_NAMES) else NOT_SHOWN
            for k, v in shown.items()}


#: The size of one rank's buffer of DeepSpeed's shm allreduce: 2 x 1 MiB + 2 x 32 MiB
#: (csrc/cpu/comm/shm.cpp, struct allreduce_workspace), "66 MB" as df shows it.
DEEPSPEED_SHM_BUFFER_BYTES = 2 * 1048576 + 2 * 1048576 * 32
#: /dev/shm counts as full from this share on (or with less room than one more buffer).
SHM_FULL_SHARE = 0.9


def shm_filled_by_deepspeed(shm: Any) -> str | None:
    """One sentence when DeepSpeed's leftover buffers fill /dev/shm, else None."""
    if not isinstance(shm, dict):
        return None
    total, used = shm.get("total_bytes"), shm.get("used_bytes")
    count, ds_bytes = shm.get("deepspeed_buffers"), shm.get("deepspeed_bytes")
    if not (isinstance(total, int) and isinstance(used, int) and total > 0
            and isinstance(count, int) and count > 0 and isinstance(ds_bytes, int)):
        return None
    if used < SHM_FULL_SHARE * total and total - used >= DEEPSPEED_SHM_BUFFER_BYTES:
        return None
    return (f"/dev/shm is {100 * used // total}% full ({used / 2**20:.0f} of {total / 2**20:.0f} MiB); "
            f"{count} DeepSpeed buffer(s) (/dev/shm/deepspeed_*, {ds_bytes / 2**20:.0f} MiB) take "
            f"{100 * ds_bytes // total}% of it")


def collect(*, ops: bool = False, python: str | None = None, timeout: float = _ENV_PROBE_TIMEOUT,
            environ: Mapping[str, str] | None = None, nvml: Any = None) -> dict[str, Any]:
    """Collect the whole snapshot. Never raises for a failing probe: see ``errors``.

    ``ops=True`` adds DeepSpeed's op report (the slowest probe, ~2 s; ``dsdoctor env`` turns it
    on, ``--env local`` leaves it off). ``python`` is the interpreter
    used for the torch/DeepSpeed child probes (default: this one, whose packages we report).
    """
    python = python or sys.executable
    errors: list[dict[str, str]] = []
    notes: list[str] = []
    snap: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "dsdoctor_version": __version__,
                            "collected_at": _now()}

    def guarded(key: str, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # one failing probe must not break the report
            errors.append({"probe": key, "error": f"{type(exc).__name__}: {exc}"[:500]})
            return default

    other: dict[str, Any] = {}
    # Compared unresolved: every venv's python links to the same base interpreter binary.
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        # Another interpreter trains: report its version and packages, not dsdoctor's own.
        other = guarded("python", lambda: env_child.probe_interpreter(python, timeout, PACKAGES), {})
        packages = other.get("packages") or {k: None for k in PACKAGES}
    else:
        packages = guarded("packages", package_versions, {k: None for k in PACKAGES})
    has_torch = _installed("torch", python, packages)
    has_ds = _installed("deepspeed", python, packages)
    # Start the slow child probes first and let them run while the fast probes do their work.
    torch_proc = guarded("torch", lambda: env_child.run_probe(python, env_child.TORCH_PROBE), None) \
        if has_torch else None
    ds_proc = guarded("deepspeed_ops", lambda: env_child.run_probe(python, env_child.DEEPSPEED_PROBE), None) \
        if (has_ds and ops) else None

    snap["python"] = other.get("python") or guarded("python", probe_python, {})
    if not (packages.get("torch") or packages.get("deepspeed")):
        notes.append(f"neither torch nor DeepSpeed is installed for {python}: if the training "
                     "uses another environment, run `dsdoctor env --python /path/to/its/python` "
                     "(or activate that environment first)")
    snap["os"] = guarded("os", probe_os, {})
    snap["cpu"] = guarded("cpu", probe_cpu, {"count": os.cpu_count()})
    gpus, nvml_info = guarded("gpus", lambda: probe_gpus(notes, nvml), ([], {"available": False}))
    snap["gpus"] = gpus
    snap["nvml"] = nvml_info
    snap["interconnect"] = guarded("interconnect", probe_interconnect, {})
    snap["disks"] = guarded("disks", envdisks.probe_disks, [])
    snap["shm"] = guarded("shm", envdisks.probe_shm, None)
    full = shm_filled_by_deepspeed(snap["shm"])
    if full:
        notes.append(full)
    snap["packages"] = packages

    cuda: dict[str, Any] = {"cuda_home": _default_cuda_home(), "nvcc": None, "nvcc_version": None,
                            "torch_cuda": None, "torch_cudnn": None, "torch_nccl": None,
                            "torch_hip": None, "torch_cuda_available": None,
                            "driver_cuda_version": nvml_info.get("cuda_driver_version")}
    nv = guarded("nvcc", lambda: _nvcc(cuda["cuda_home"]), (None, None))
    cuda["nvcc"], cuda["nvcc_version"] = nv
    if cuda["nvcc"] is None:
        notes.append("nvcc not found (PATH, CUDA_HOME): DeepSpeed cannot JIT-build CUDA ops here")
    if torch_proc is not None:
        t = guarded("torch", lambda: env_child.finish_probe(torch_proc, "torch", timeout), None)
        if t:
            cuda.update({"torch_cuda": t.get("cuda"), "torch_cudnn": t.get("cudnn"),
                         "torch_nccl": t.get("nccl"), "torch_hip": t.get("hip"),
                         "torch_cuda_available": t.get("cuda_available"),
                         "torch_device_count": t.get("device_count"),
                         "torch_cpp_extension_cuda_home": t.get("cpp_extension_cuda_home")})
    else:
        notes.append("torch is not installed: torch CUDA/cuDNN/NCCL versions not probed")
    snap["cuda"] = cuda
    snap["deepspeed_ops"] = None
    if ds_proc is not None:
        snap["deepspeed_ops"] = guarded("deepspeed_ops",
                                        lambda: env_child.finish_probe(ds_proc, "DeepSpeed op report", timeout),
                                        None)
    elif has_ds and not ops:
        notes.append("DeepSpeed op report not collected (`dsdoctor env` collects it unless --no-ops)")
    snap["env_vars"] = guarded("env_vars", lambda: relevant_env(environ), {})
    snap["notes"] = notes
    snap["errors"] = errors
    return snap


# --------------------------------------------------------------------------------------------
# reading a snapshot back
# --------------------------------------------------------------------------------------------

_MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024


def validate_snapshot(data: Any, where: str = "snapshot") -> dict[str, Any]:
    """Check the keys ``analyze`` relies on; raise UsageError naming the first bad one."""
    fix = "make it with 'dsdoctor env --format json --output FILE' on the training node"
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not an environment snapshot (expected a JSON object); {fix}")
    sv = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(sv, int) or isinstance(sv, bool) or sv > SCHEMA_VERSION:
        raise UsageError(f"{where}: unsupported schema_version {sv!r} (this dsdoctor reads "
                         f"{SCHEMA_VERSION}); upgrade dsdoctor or {fix}")
    known = {"cpu", "gpus", "packages"}
    if not known & data.keys():
        raise UsageError(f"{where}: no 'cpu', 'gpus' or 'packages' key: not an environment "
                         f"snapshot; {fix}")
    cpu = data.get("cpu", {})
    if not isinstance(cpu, dict):
        raise UsageError(f"{where}: 'cpu' must be an object; {fix}")
    for key in ("count", "ram_total_bytes", "ram_available_bytes"):
        v = cpu.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise UsageError(f"{where}: cpu.{key} must be a non-negative integer, got {v!r}")
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list):
        raise UsageError(f"{where}: 'gpus' must be a list; {fix}")
    for i, g in enumerate(gpus):
        if not isinstance(g, dict):
            raise UsageError(f"{where}: gpus[{i}] must be an object")
        if "name" in g and not isinstance(g["name"], str):
            raise UsageError(f"{where}: gpus[{i}].name must be a string")
        mem = g.get("memory_total_bytes")
        if mem is not None and (not isinstance(mem, int) or isinstance(mem, bool) or mem < 0):
            raise UsageError(f"{where}: gpus[{i}].memory_total_bytes must be a non-negative integer")
        cc = g.get("compute_capability")
        if cc is not None and not (isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc)):
            raise UsageError(f"{where}: gpus[{i}].compute_capability must look like \"8.0\", got {cc!r}")
    # Optional sections: absent or null is fine, the wrong shape is not (renderers rely on it).
    for key, typ, what in (("python", dict, "an object"), ("os", dict, "an object"),
                           ("cuda", dict, "an object"), ("nvml", dict, "an object"),
                           ("interconnect", dict, "an object"), ("deepspeed_ops", dict, "an object"),
                           ("env_vars", dict, "an object"), ("notes", list, "a list"),
                           ("disks", list, "a list"), ("shm", dict, "an object"),
                           ("errors", list, "a list")):
        if data.get(key) is not None and not isinstance(data[key], typ):
            raise UsageError(f"{where}: '{key}' must be {what}; {fix}")
    if any(not isinstance(v, (str, int, float)) for v in (data.get("env_vars") or {}).values()):
        raise UsageError(f"{where}: env_vars values must be strings; {fix}")
    if any(not isinstance(d, dict) for d in data.get("disks") or []):
        raise UsageError(f"{where}: disks must be a list of objects; {fix}")
    if any(not isinstance(e, dict) for e in data.get("errors") or []):
        raise UsageError(f"{where}: errors must be a list of objects; {fix}")
    ops = data.get("deepspeed_ops") or {}
    if ops.get("ops") is not None and not (isinstance(ops["ops"], dict)
                                           and all(isinstance(o, dict) for o in ops["ops"].values())):
        raise UsageError(f"{where}: deepspeed_ops.ops must map op names to objects; {fix}")
    pk = data.get("packages", {})
    if not isinstance(pk, dict):
        raise UsageError(f"{where}: 'packages' must be an object of name -> version or null")
    for name, ver in pk.items():
        if ver is not None and not isinstance(ver, str):
            raise UsageError(f"{where}: packages.{name} must be a version string or null, got {ver!r}")
    return data


#: This machine's snapshots, by whether they hold DeepSpeed's op report.
_LOCAL: dict[bool, dict[str, Any]] = {}


def _local_snapshot(ops: bool = False) -> dict[str, Any]:
    # Once per process: `report` loads the env and its analysis loads it again, and `watch`
    # re-runs the rules on every refresh; the machine does not change in between. One with the
    # op report serves a caller that does not need it.
    if True in _LOCAL:
        return _LOCAL[True]
    if ops not in _LOCAL:
        _LOCAL[ops] = collect(ops=ops)
    return _LOCAL[ops]


def load_snapshot(path: str, ops: bool = False) -> dict[str, Any]:
    """Read an environment snapshot: ``local`` collects one (once per process; DeepSpeed's op
    report, as ``ds_report`` prints it, only with ``ops``: ``report`` pastes it, the rules do not
    need it), anything else is a JSON file from ``dsdoctor env --format json``. Bad input raises
    UsageError. The result is shared: do not modify it."""
    if path == "local":
        return _local_snapshot(ops)
    # a FIFO or device is refused before reading; the read is capped (issue 14, item 4)
    raw = read_bounded(path, _MAX_SNAPSHOT_BYTES, "--env", "pass the JSON file written by "
                       "'dsdoctor env --format json --output FILE'")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text; pass the JSON file written by "
                         "'dsdoctor env --format json'") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg}); regenerate it "
                         "with 'dsdoctor env --format json --output FILE'") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply; not an environment snapshot") from None
    except ValueError as exc:  # an integer over 4,300 digits
        raise UsageError(f"{path}: invalid JSON ({str(exc)[:80]}); regenerate it with "
                         "'dsdoctor env --format json --output FILE'") from None
    return validate_snapshot(data, path)
