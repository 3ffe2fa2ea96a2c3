#!/usr/bin/env bash
# The token-stream GPU proof, on the GPU machine, from the project root:  bash scripts/gpu-tokens.sh OUT_DIR
# Carry .gpu (the wheels; see scripts/gpu-e2e.sh for how they are prepared). No BCC, no root needed.
# A random-weight Llama behind a streaming OpenAI-style endpoint, another process crowding the GPU, the server's
# own allocator fragmented and forced to flush and retry mid-stream; `gpuslo probe tokens --gpu 0` measures the
# stalls, the allocator reporter the fragmentation, `gpuslo serve` correlates them (fragmentation-then-stall).
# Then copy OUT_DIR/h200-token-stalls.jsonl to examples/incidents/ (tests/test_gpu_recordings.py replays it).
# Locally, without a GPU (plumbing only):  python3 scripts/gpu_tokens.py --out /tmp/tokens-dry --dry-run
set -uo pipefail
out=${1:-${OUT:-/tmp/gpuslo-tokens-out}}
mkdir -p "$out"
exec > >(tee "$out/h200-tokens.log") 2>&1
t0=$(date +%s)
step() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

# shellcheck source=scripts/gpu-setup.sh
source scripts/gpu-setup.sh
step "Python dependencies from the carried wheels, durable-rules built, gpuslo (editable)"
gpu_python_setup || exit $?
python3 -c "import transformers; print('transformers', transformers.__version__)" || exit 14
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv

step "token stalls: gpuslo serve + LLM server + squeezer + gpuslo probe tokens"
PYTHONUNBUFFERED=1 python3 scripts/gpu_tokens.py --out "$out"
rc=$?
step "done: exit status $rc"
exit $rc
