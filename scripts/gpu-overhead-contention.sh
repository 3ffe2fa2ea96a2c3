#!/usr/bin/env bash
# Issue 14's last device run (scripts/gpu_overhead_contention.py), on the GPU machine as root, from the project
# root:  RUN_S=400 bash scripts/gpu-overhead-contention.sh OUT_DIR
# Carry .gpu: the BCC debs (../shared/gpu/fetch-debs.sh .gpu) and, in .gpu/wheels, only what the attribution
# and token probes import beyond the image (torch, pynvml, httpx, PyYAML, transformers are there):
#   .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#       -d .gpu/wheels attrs click jsonschema jsonschema-specifications orjson prometheus_client Pygments \
#       referencing rpds-py typing_extensions        # (pinned to the venv's versions: .venv/bin/pip freeze)
# No gpuslo serve, no durable-rules: the run keeps its events as JSONL.
set -uo pipefail
out=${1:-${OUT:-/tmp/gpuslo-oc-out}}
shift || true   # the rest goes to the Python script
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
t0=$(date +%s)
run_s=${RUN_S:-400}
step() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
uptime
step "BCC from the carried Debian packages"
# shellcheck disable=SC1091
source .gpu/setup-bcc.sh .gpu
step "wheels into /tmp/gpuslo-site, gpuslo (editable)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpuslo-site \
    .gpu/wheels/*.whl || exit 10
export PYTHONPATH="/tmp/gpuslo-site${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 12
python3 -c "import bcc, pynvml, gpuslo.probes.tokens, gpuslo.probes.attribution.agent_probe; print('imports ok')" \
    || exit 13
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
lscpu -e=CPU,CORE,SOCKET,NODE | head -20
step "GPU contention from other processes, then the overhead A/B"
PYTHONUNBUFFERED=1 python3 scripts/gpu_overhead_contention.py --out "$out" --until $(( t0 + run_s - 15 )) "$@"
rc=$?
uptime
step "done: exit status $rc"
exit $rc
