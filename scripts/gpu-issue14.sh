#!/usr/bin/env bash
# Issue 14's h14d device run, on the GPU machine as root, from the project root:  RUN_S=530 bash scripts/gpu-issue14.sh OUT
# (a) scripts/gpu_e2e.py's 19 checks (gpuslo serve + agent + workloads), (b)+(c) scripts/gpu_issue14.py: the
# cause of the engine thread's CPU time, GPU contention by many other processes, the training and ITL A/Bs.
# Carry .gpu (the BCC debs and the wheels of scripts/gpu-e2e.sh's header) and, in EXTRA_WHEELS (default
# .gpu/wheels-extra), the token probe's attrs, Pygments and typing_extensions if the image lacks them.
# h14e's run:  BCC_PACK=DIR E2E_S=0 RUN_S=420 bash scripts/gpu-issue14.sh OUT --parts costs,train,itl --train-rounds 40
# OUT gets run.log, e2e.tgz (the e2e's files) and issue14.tgz (the run's JSON and JSONL): 3 files.
# h14f's run (ITL_AB=1: instead of gpu_issue14.py, the real-BPF ioctl test and scripts/gpu_itl_ioctl.py on the
# real driver, then the cycle A/B scripts/gpu_itl_ab.py; the rest of the arguments go to it):
#   BCC_PACK=DIR ITL_AB=1 E2E_S=0 RUN_S=480 bash scripts/gpu-issue14.sh OUT
set -uo pipefail
out=${1:-${OUT:-/tmp/gpuslo-i14-out}}
shift || true   # the rest goes to gpu_issue14.py
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
t0=$(date +%s)
run_s=${RUN_S:-530}
e2e_s=${E2E_S:-200}
step() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
uptime
step "BCC from the carried Debian packages"
if [ -n "${BCC_PACK:-}" ]; then  # h14e: scripts/gpu-bcc-pack.sh's tar.xz (a carry under 64 MB)
    # shellcheck source=scripts/gpu-bcc-pack.sh
    source scripts/gpu-bcc-pack.sh unpack "$BCC_PACK"
else
    # shellcheck disable=SC1091
    source .gpu/setup-bcc.sh .gpu
fi
# shellcheck source=scripts/gpu-setup.sh
source scripts/gpu-setup.sh
step "wheels, durable-rules, gpuslo (editable)"
extra=${EXTRA_WHEELS:-.gpu/wheels-extra}
if compgen -G "$extra/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$GPUSLO_SITE" "$extra"/*.whl \
        || exit 10
fi
gpu_python_setup || exit $?
python3 -c "import bcc, pynvml, gpuslo.probes.tokens, gpuslo.probes.attribution.agent_probe; print('imports ok')" \
    || exit 13
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
uname -r; nproc

e2e_rc=0
if [ "$e2e_s" -gt 0 ]; then  # E2E_S=0 (h14e): no e2e
step "(a) end-to-end checks (gpu_e2e.py), at most ${e2e_s}s"
mkdir -p /tmp/gpuslo-e2e
# In its own process group (setsid), so that what a timed-out e2e leaves behind (gpuslo serve, the agent and its
# BPF programs, a workload) is ended by that group's id before the measurements.
PYTHONUNBUFFERED=1 setsid timeout -k 10 "$e2e_s" python3 scripts/gpu_e2e.py --out /tmp/gpuslo-e2e &
e2e_pid=$!
wait "$e2e_pid"
e2e_rc=$?
kill -- -"$e2e_pid" 2>/dev/null && echo "ended what was left in the e2e's process group $e2e_pid"
sleep 1
grep -c '^PASS' "$out/run.log" | sed 's/^/e2e PASS lines: /'
grep -c '^FAIL' "$out/run.log" | sed 's/^/e2e FAIL lines: /'
tar czf "$out/e2e.tgz" -C /tmp gpuslo-e2e
fi

mkdir -p /tmp/gpuslo-i14
if [ -n "${ITL_AB:-}" ]; then
    step "ioctls by device: the real-BPF test (a loop device under an NVIDIA name), then the real driver"
    ioctl_rc=0
    # filterwarnings: the carried BCC (Debian's python3-bpfcc) has a '\.' escape that Python 3.12 warns about, and the
    # project's filterwarnings=error made that a SyntaxError at collection (h14f's run); -W does not override it
    PYTHONUNBUFFERED=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -o addopts="" -o filterwarnings=ignore::SyntaxWarning \
        tests/probes/ebpf/test_attribution_ioctl.py || ioctl_rc=1
    PYTHONUNBUFFERED=1 timeout 90 python3 scripts/gpu_itl_ioctl.py --out /tmp/gpuslo-i14 || ioctl_rc=$(( ioctl_rc + 2 ))
    echo "ioctl checks exit status $ioctl_rc (1: the test failed, 2: the real-driver check failed)"
    step "(c) the ITL cycle A/B (gpu_itl_ab.py)"
    PYTHONUNBUFFERED=1 python3 scripts/gpu_itl_ab.py --out /tmp/gpuslo-i14 --until $(( t0 + run_s - 10 )) "$@"
    rc=$(( $? != 0 || ioctl_rc != 0 ))
else
step "(b)+(c) cause, contention, A/Bs (gpu_issue14.py)"
PYTHONUNBUFFERED=1 python3 scripts/gpu_issue14.py --out /tmp/gpuslo-i14 --until $(( t0 + run_s - 20 )) "$@"
rc=$?
fi
tar czf "$out/issue14.tgz" -C /tmp gpuslo-i14
uptime
step "done: e2e exit status $e2e_rc, issue14 exit status $rc"
exit $(( e2e_rc != 0 || rc != 0 ))
