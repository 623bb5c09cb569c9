"""Which collected environment variables are settings whose value `env` may print.

`env` collects every variable with a prefix that matters to a run (``HF_*``, ``DS_*``,
``NCCL_*``, ...), but a prefix says nothing about what a variable holds: ``HF_MIRROR_KEY`` or
``DS_NOTE`` may hold a token that no format knows. So a value is shown only for a variable this
list knows to be a setting (documented by NCCL, PyTorch, Hugging Face, DeepSpeed, Accelerate,
libfabric, UCX, Transformer Engine, cuDNN); any other collected variable is shown by name only.
"""

from __future__ import annotations

import re

NOT_SHOWN = "<not shown>"

# Per collected prefix, the names (without the prefix) of the settings whose value is shown.
SETTINGS_BY_PREFIX: dict[str, frozenset[str]] = {
    "NCCL_": frozenset({
        "DEBUG", "DEBUG_SUBSYS", "DEBUG_FILE", "SOCKET_IFNAME", "SOCKET_FAMILY", "SOCKET_NTHREADS",
        "NSOCKS_PERTHREAD", "SOCKET_RETRY_CNT", "IB_DISABLE", "IB_HCA", "IB_GID_INDEX",
        "IB_TIMEOUT", "IB_RETRY_CNT", "IB_SL", "IB_TC", "IB_QPS_PER_CONNECTION",
        "IB_CUDA_SUPPORT", "IB_PCI_RELAXED_ORDERING", "IB_ADAPTIVE_ROUTING", "IB_MERGE_NICS",
        "IB_ROCE_VERSION_NUM", "NET", "NET_GDR_LEVEL", "NET_GDR_READ", "NET_PLUGIN",
        "NET_SHARED_BUFFERS", "P2P_DISABLE", "P2P_LEVEL", "P2P_NET_CHUNKSIZE",
        "P2P_USE_CUDA_MEMCPY", "SHM_DISABLE", "SHM_USE_CUDA_MEMCPY", "CUMEM_ENABLE",
        "NVLS_ENABLE", "NVLS_NCHANNELS", "COLLNET_ENABLE", "ALGO", "PROTO", "MIN_NCHANNELS",
        "MAX_NCHANNELS", "NCHANNELS_PER_NET_PEER", "BUFFSIZE", "LAUNCH_MODE", "BLOCKING_WAIT",
        "ASYNC_ERROR_HANDLING", "TIMEOUT", "HOSTID", "TOPO_FILE", "TOPO_DUMP_FILE",
        "GRAPH_DUMP_FILE", "CROSS_NIC", "IGNORE_CPU_AFFINITY", "NVB_DISABLE", "PXN_DISABLE",
        "CHECKS_DISABLE", "CHECK_POINTERS", "LL_THRESHOLD", "TREE_THRESHOLD", "SET_STACK_SIZE",
        "RAS_ENABLE", "MNNVL_ENABLE", "DMABUF_ENABLE", "WORK_FIFO_DEPTH", "GDRCOPY_ENABLE",
        "RUNTIME_CONNECT", "COMM_BLOCKING", "NUM_PROTOCOLS", "CONNECT_TIMEOUT",
    }),
    "TORCH_": frozenset({
        "DISTRIBUTED_DEBUG", "CPP_LOG_LEVEL", "SHOW_CPP_STACKTRACES", "LOGS",
        "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_ENABLE_MONITORING",
        "NCCL_HEARTBEAT_TIMEOUT_SEC", "NCCL_TRACE_BUFFER_SIZE", "NCCL_DUMP_ON_TIMEOUT",
        "NCCL_DEBUG_INFO_TEMP_FILE", "NCCL_DESYNC_DEBUG", "NCCL_USE_COMM_NONBLOCKING",
        "NCCL_AVOID_RECORD_STREAMS", "NCCL_HIGH_PRIORITY", "NCCL_ENABLE_TIMING",
        "NCCL_PROPAGATE_ERROR", "NCCL_TIMEOUT", "FR_BUFFER_SIZE", "FR_DUMP_TEMP_FILE",
        "CUDA_ARCH_LIST", "EXTENSIONS_DIR", "USE_CUDA_DSA", "USE_HIP_DSA",
        "FORCE_NO_WEIGHTS_ONLY_LOAD", "FORCE_WEIGHTS_ONLY_LOAD", "COMPILE_DEBUG", "HOME",
        "DISTRIBUTED_DEFAULT_PORT", "CUDNN_V8_API_DISABLED", "BLAS_PREFER_CUBLASLT",
        "ALLOW_TF32_CUBLAS_OVERRIDE", "USE_RTLD_GLOBAL",
    }),
    "TORCHINDUCTOR_": frozenset({
        "CACHE_DIR", "COMPILE_THREADS", "FX_GRAPH_CACHE", "AUTOGRAD_CACHE", "MAX_AUTOTUNE",
        "FORCE_DISABLE_CACHES",
    }),
    "DS_": frozenset({"BUILD_OPS", "SKIP_CUDA_CHECK", "ACCELERATOR", "ENV_FILE", "CONFIG"}),
    "DEEPSPEED_": frozenset(),
    "HF_": frozenset({
        "HOME", "HUB_CACHE", "DATASETS_CACHE", "ASSETS_CACHE", "MODULES_CACHE", "TOKEN_PATH",
        "HUB_OFFLINE", "DATASETS_OFFLINE", "HUB_ENABLE_HF_TRANSFER", "HUB_DISABLE_TELEMETRY",
        "HUB_DISABLE_PROGRESS_BARS", "HUB_DOWNLOAD_TIMEOUT", "HUB_ETAG_TIMEOUT", "ENDPOINT",
        "HUB_VERBOSITY", "HUB_DISABLE_SYMLINKS_WARNING", "HUB_DISABLE_IMPLICIT_TOKEN",
        "HUB_DISABLE_EXPERIMENTAL_WARNING", "HUB_DISABLE_XET", "XET_HIGH_PERFORMANCE", "DEBUG",
    }),
    "ACCELERATE_": frozenset({
        "USE_FSDP", "USE_DEEPSPEED", "USE_CPU", "MIXED_PRECISION", "DEEPSPEED_ZERO3_INIT",
        "DEEPSPEED_CONFIG_FILE", "DEEPSPEED_ZERO_STAGE", "DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
        "DEEPSPEED_OFFLOAD_PARAM_DEVICE", "DEEPSPEED_MOE_LAYER_CLS_NAMES",
        "GRADIENT_ACCUMULATION_STEPS", "DYNAMO_BACKEND", "DEBUG_MODE", "LOG_LEVEL",
        "TORCH_DEVICE", "TP_DATALOADER",
    }),
    "TRANSFORMERS_": frozenset({"CACHE", "OFFLINE", "VERBOSITY", "NO_ADVISORY_WARNINGS"}),
    "PYTORCH_": frozenset({
        "CUDA_ALLOC_CONF", "ALLOC_CONF", "HIP_ALLOC_CONF", "NO_CUDA_MEMORY_CACHING",
        "MPS_HIGH_WATERMARK_RATIO", "KERNEL_CACHE_PATH", "NVML_BASED_CUDA_CHECK", "JIT",
        "TUNABLEOP_ENABLED",
    }),
    "FI_": frozenset({"PROVIDER", "EFA_USE_DEVICE_RDMA", "EFA_FORK_SAFE", "LOG_LEVEL",
                      "EFA_ENABLE_SHM_TRANSFER", "HMEM"}),
    "UCX_": frozenset({"TLS", "NET_DEVICES", "LOG_LEVEL", "IB_GPU_DIRECT_RDMA", "RNDV_THRESH",
                       "MEMTYPE_CACHE"}),
    "GLOO_": frozenset({"SOCKET_IFNAME", "DEVICE_TRANSPORT"}),
    "NVTE_": frozenset({"FLASH_ATTN", "FUSED_ATTN", "DEBUG", "BIAS_GELU_NVFUSION",
                        "ALLOW_NONDETERMINISTIC_ALGO", "TORCH_COMPILE"}),
    "CUDNN_": frozenset({"LOGINFO_DBG", "LOGDEST_DBG", "LOGERR_DBG", "LOGLEVEL_DBG",
                         "FRONTEND_LOG_INFO"}),
    "NVIDIA_TF32": frozenset({"_OVERRIDE"}),
    "MEGATRON_": frozenset(),
}
# Build switches (DS_BUILD_FUSED_ADAM=1): a family of names, shown only while the value is a flag.
_FLAG_FAMILIES = ("DS_BUILD_",)
_FLAG_VALUE = re.compile(r"[0-9]{1,2}")


def is_setting(name: str, value: str, exact_names: frozenset[str]) -> bool:
    """True when ``name`` is a known setting, so its value may be shown."""
    if name in exact_names:
        return True
    if name.startswith(_FLAG_FAMILIES) and _FLAG_VALUE.fullmatch(value.strip()):
        return True
    return any(name.startswith(prefix) and name[len(prefix):] in names
               for prefix, names in SETTINGS_BY_PREFIX.items())
