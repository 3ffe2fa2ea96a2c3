#!/usr/bin/env bash
# The GPU end-to-end proof, on the GPU machine as root, from the project root:  bash scripts/gpu-e2e.sh OUT_DIR
#
# Prepare on the CPU machine (the GPU machine reaches no registry), then carry .gpu along:
#   ../shared/gpu/fetch-debs.sh .gpu                       # BCC and kernel headers as .deb files
#   .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#       -d .gpu/wheels alembic Mako SQLAlchemy greenlet Flask itsdangerous blinker Werkzeug APScheduler tzlocal \
#       jsonschema jsonschema-specifications referencing rpds-py waitress click Jinja2 MarkupSafe prometheus_client \
#       orjson ahocorasick-rs
#   .venv/bin/pip download --no-deps --no-binary=:all: -d .gpu/wheels durable-rules==2.0.28   # built there (gcc)
# (pin each to the version in the project's venv: `.venv/bin/pip freeze`). The image already has torch, pynvml,
# httpx and PyYAML.
#
# Then: scripts/gpu_e2e.py (server + agent + workloads + assertions), bench/ebpf_overhead_libcuda.py (real
# libcuda) and bench/ebpf_overhead.py (the fake library, as on the CPU machine). Exit status: the e2e checks'.
set -uo pipefail
out=${1:-${OUT:-/tmp/gpuslo-e2e-out}}
mkdir -p "$out"
exec > >(tee "$out/h200-e2e.log") 2>&1
t0=$(date +%s)
step() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

step "BCC from the carried Debian packages"
# shellcheck disable=SC1091
source .gpu/setup-bcc.sh .gpu
# shellcheck source=scripts/gpu-setup.sh
source scripts/gpu-setup.sh
step "Python dependencies from the carried wheels into $GPUSLO_SITE, durable-rules built there, gpuslo (editable)"
gpu_python_setup || exit $?
python3 -c "import bcc; print('bcc', bcc.__file__)" || exit 13
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
uname -r

step "end-to-end: gpuslo serve + agent (ebpf, nvml) + allocator reporter + workloads"
PYTHONUNBUFFERED=1 python3 scripts/gpu_e2e.py --out "$out"
rc=$?

libs() { python3 -c "import json,sys; print(json.load(open('$out/h200-summary.json'))['libraries'].get(sys.argv[1]) or '')" "$1"; }
libcuda=$(libs cuda)
cudart=$(libs cudart)
step "bench: eBPF overhead on the real libcuda ($libcuda)"
if [ -n "$libcuda" ]; then
    PYTHONUNBUFFERED=1 python3 bench/ebpf_overhead_libcuda.py --libcuda "$libcuda" ${cudart:+--cudart "$cudart"} \
        --torch-step 50 2>&1 | tee "$out/h200-bench.txt"
fi
step "bench: eBPF overhead on the fake library (as on the CPU machine)"
PYTHONUNBUFFERED=1 python3 bench/ebpf_overhead.py 2>&1 | tee -a "$out/h200-bench.txt"
step "done: e2e exit status $rc"
exit $rc
