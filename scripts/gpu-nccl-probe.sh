#!/usr/bin/env bash
# Issue 20 on one H200: the NCCL eBPF probe on a real PyTorch job's libnccl and the overhead of its hooks.
# On the GPU machine as root, from the project root, with the BCC debs and wheels carried in $GPU (default .gpu,
# prepared as in scripts/gpu-e2e.sh):  bash scripts/gpu-nccl-probe.sh OUT_DIR
set -uo pipefail
out=${1:-/tmp/gpuslo-nccl}
gpu=${GPU:-.gpu}
mkdir -p "$out"
exec > >(tee "$out/h200-nccl.log") 2>&1
# shellcheck disable=SC1091
source "$gpu/setup-bcc.sh" "$gpu"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpuslo-site \
    $(ls "$gpu"/wheels/*.whl) || exit 10
export PYTHONPATH="/tmp/gpuslo-site${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 12
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
PYTHONUNBUFFERED=1 python3 scripts/gpu_nccl_probe.py "$out"
