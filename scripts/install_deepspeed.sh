#!/usr/bin/env bash
# Install DeepSpeed (+ Transformers, Accelerate) beside the CPU build of torch, for the sample-log
# scenarios and the live tests (tests/test_live_deepspeed.py).
#
#   scripts/install_deepspeed.sh VENV [DS_VERSION]
#
# VENV is created when missing (or reused). DS_VERSION defaults to the release the committed
# sample_logs were made with. TRANSFORMERS_VERSION / ACCELERATE_VERSION override the defaults below.
#
# torch is pinned to exactly 2.13.0 in every pip command: the CPU wheel is found through pip's
# find-links configuration, and an unpinned or ranged torch requirement would pull a CUDA build (GBs)
# from PyPI. DeepSpeed is published as an sdist whose setup.py imports torch, so it is built without
# build isolation (an isolated build would install its own, CUDA, torch). No DeepSpeed op is built at
# install time (DS_BUILD_OPS=0); the few CPU ops the scenarios use are JIT-built on first use and
# cached in ~/.cache/torch_extensions.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 VENV [DS_VERSION]" >&2
    exit 2
fi
VENV=$1
DS_VERSION=${2:-0.19.8}
TORCH_VERSION=2.13.0
TRANSFORMERS_VERSION=${TRANSFORMERS_VERSION:-5.23.0}
ACCELERATE_VERSION=${ACCELERATE_VERSION:-1.15.0}
PYTHON=${PYTHON:-python3}

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# 1. torch (CPU) and what DeepSpeed's setup.py needs at build time.
"${PIP[@]}" "torch==$TORCH_VERSION" setuptools wheel packaging ninja numpy psutil py-cpuinfo

# 2. DeepSpeed built against that torch, plus the Hugging Face side; torch pinned again so that no
#    dependency can upgrade it.
DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation "torch==$TORCH_VERSION" "deepspeed==$DS_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" "accelerate==$ACCELERATE_VERSION"

# 3. Check: the CPU torch is the one installed, and DeepSpeed imports with it.
"$VENV/bin/python" - "$TORCH_VERSION" <<'EOF'
import sys
import torch, deepspeed, transformers, accelerate
want = sys.argv[1]
if not torch.__version__.startswith(want) or torch.version.cuda is not None:
    sys.exit(f"install_deepspeed: expected CPU torch {want}, got {torch.__version__} "
             f"(cuda {torch.version.cuda})")
print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
      f"transformers {transformers.__version__}, accelerate {accelerate.__version__}")
EOF
echo "install_deepspeed: $VENV ready in $(( $(date +%s) - start )) s"
