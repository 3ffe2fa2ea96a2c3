"""Cost the eBPF probe adds per hooked call on the REAL libcuda (GPU machine): unprobed vs probed, in one run.

A small C program (built here with gcc, libcuda opened with dlopen, so no CUDA headers are needed) times
cuMemAlloc_v2 in a tight loop: 4 KiB allocations that succeed (each followed by cuMemFree_v2, which is not
hooked, so the difference is the probe's cost on cuMemAlloc_v2 alone), and 2 TiB requests that fail with
CUDA_ERROR_OUT_OF_MEMORY (one ring-buffer record each). As in bench/ebpf_overhead.py, an empty uprobe+uretprobe
pair gives the kernel's own trap cost, and kernel.bpf_stats_enabled gives the probe programs' exact run time.
With --torch-step, a small PyTorch training step is timed unprobed and probed (libcuda + libcudart hooked).
Needs root, BPF and a GPU. Run: python3 bench/ebpf_overhead_libcuda.py --libcuda PATH [--cudart PATH]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuslo.probes.ebpf import CudaProbe, LibrarySet
from gpuslo.probes.ebpf.gpu_resolve import GpuResolver

TARGET_NS = 3000
WARMUP = 100  # calls each loop makes before its clock starts (the C program's warm-up)
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
LOOP_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int CUresult; typedef unsigned long long CUdeviceptr; typedef int CUdevice; typedef void *CUcontext;
int main(int argc, char **argv) {
    long calls = atol(argv[1]); unsigned long long size = strtoull(argv[2], 0, 10);
    void *h = dlopen(argv[3], RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    CUresult (*init)(unsigned) = dlsym(h, "cuInit");
    CUresult (*dev_get)(CUdevice *, int) = dlsym(h, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = dlsym(h, "cuMemFree_v2");
    CUdevice dev; CUcontext ctx; CUdeviceptr p = 0; struct timespec a, b; int failures = 0;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx)) { fprintf(stderr, "init\n"); return 3; }
    for (int i = 0; i < 100; i++) if (!alloc(&p, size)) release(p);  /* warm-up */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < calls; i++) { if (alloc(&p, size) == 0) release(p); else failures++; }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d %.1f\n", failures, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / calls);
    return 0;
}
"""
TORCH_STEP = r"""
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
def step():
    x = torch.randn(512, 2048, device="cuda")  # fresh tensors every step: the allocator's hot path
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range(30): step()
torch.cuda.synchronize(); best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for _ in range(int(sys.argv[1])): step()
    torch.cuda.synchronize(); best = min(best, (time.perf_counter() - t) / int(sys.argv[1]))
print(f"{best * 1e6:.1f}")
"""


def ns_per_call(app: Path, lib: str, calls: int, size: int, repeats: int) -> float:
    """Best of repeats: the loop's own clock, so process and context start-up are not counted."""
    best = float("inf")
    for _ in range(repeats):
        failures, per_call = subprocess.run([str(app), str(calls), str(size), lib], capture_output=True, text=True,
                                            check=True).stdout.split()
        best = min(best, float(per_call))
    return best


def bare_uprobe_ns(app: Path, lib: str, calls: int, size: int, repeats: int) -> float:
    from bcc import BPF

    bpf = BPF(text=b"int gs_empty(void *ctx) { return 0; }")
    try:
        bpf.attach_uprobe(name=lib.encode(), sym=b"cuMemAlloc_v2", fn_name=b"gs_empty")
        bpf.attach_uretprobe(name=lib.encode(), sym=b"cuMemAlloc_v2", fn_name=b"gs_empty")
        return ns_per_call(app, lib, calls, size, repeats)
    finally:
        bpf.cleanup()


def program_totals(probe: CudaProbe, func_id: int = 0) -> tuple[tuple[int, int], tuple[int, int]]:
    """(runs, run time ns) of cuMemAlloc_v2's entry and return programs so far."""
    stats = probe.program_stats()
    enter, leave = stats[f"gs_enter_{func_id}"], stats[f"gs_leave_{func_id}"]
    return (enter.runs, enter.run_time_ns), (leave.runs, leave.run_time_ns)


def program_ns(before: tuple[tuple[int, int], ...], after: tuple[tuple[int, int], ...]) -> float:
    """Entry plus return program time per call between two readings (warm-up calls included, as they ran)."""
    return sum((a[1] - b[1]) / max(a[0] - b[0], 1) for b, a in zip(before, after, strict=True))


def torch_step_us(steps: int) -> float:
    out = subprocess.run([sys.executable, "-c", TORCH_STEP, str(steps)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libcuda", required=True)
    parser.add_argument("--cudart", default=None)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--fail-calls", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch-step", type=int, default=0, help="steps per timing of a PyTorch step (0: skip)")
    args = parser.parse_args()
    ok_size, fail_size, lib = 4096, 2 << 40, args.libcuda
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "libcuda_loop"
        (Path(tmp) / "loop.c").write_text(LOOP_C)
        subprocess.run(["gcc", "-O2", "-o", str(app), str(Path(tmp) / "loop.c"), "-ldl"], check=True)
        base_ok = ns_per_call(app, lib, args.calls, ok_size, args.repeats)
        base_fail = ns_per_call(app, lib, args.fail_calls, fail_size, args.repeats)
        step_base = torch_step_us(args.torch_step) if args.torch_step else None
        floor = bare_uprobe_ns(app, lib, args.calls, ok_size, args.repeats)
        probe = CudaProbe(LibrarySet(cuda=lib, cudart=args.cudart), socket.gethostname(), ringbuf_pages=1024,
                          gpu_resolver=GpuResolver(nvml=None))
        probe.start()
        stats_before = STATS_SYSCTL.read_text()
        STATS_SYSCTL.write_text("1")
        try:
            start = program_totals(probe)
            probed_ok = ns_per_call(app, lib, args.calls, ok_size, args.repeats)
            probe.poll(0)
            after_ok = program_totals(probe)
            probed_fail = ns_per_call(app, lib, args.fail_calls, fail_size, args.repeats)
            events = probe.poll(0.2)
            prog_ok, prog_fail = program_ns(start, after_ok), program_ns(after_ok, program_totals(probe))
            step_probed = torch_step_us(args.torch_step) if args.torch_step else None
            events += probe.poll(0)
            dropped = probe.dropped()
        finally:
            STATS_SYSCTL.write_text(stats_before)
            probe.close()
    fail_runs = (args.fail_calls + WARMUP) * args.repeats
    print(f"real libcuda: {lib}")
    print(f"empty uprobe+uretprobe (kernel floor): {floor:.1f} ns/call, {floor - base_ok:.1f} added")
    print(f"{'path':<34}{'unprobed':>10}{'probed':>10}{'added':>10}{'ratio':>8}  (ns/call, wall clock)")
    worst = 0.0
    for name, base, probed in (("4 KiB alloc+free (counted only)", base_ok, probed_ok),
                               ("2 TiB alloc, OOM (ring record)", base_fail, probed_fail)):
        worst = max(worst, probed - base)
        print(f"{name:<34}{base:>10.1f}{probed:>10.1f}{probed - base:>10.1f}{probed / base:>8.2f}")
    print(f"probe programs (kernel bpf_stats, entry+return): success {prog_ok:.0f} ns/call, "
          f"failure {prog_fail:.0f} ns/call")
    print(f"cuda_oom events read back: {sum(e.kind == 'cuda_oom' for e in events)} "
          f"(expected {fail_runs}); records dropped: {dropped}")
    if step_base is not None and step_probed is not None:
        print(f"PyTorch training step: unprobed {step_base:.1f} us, probed {step_probed:.1f} us, "
              f"ratio {step_probed / step_base:.4f}")
    # A real driver call costs tens of µs with a run-to-run spread larger than the probe, so the wall-clock
    # difference cannot decide the target here: the kernel's own program statistics do (the trap cost of a
    # uprobe is the platform's, measured on the fake library by bench/ebpf_overhead.py).
    programs = max(prog_ok, prog_fail)
    verdict = "met" if programs <= TARGET_NS else "NOT met"
    print(f"target {TARGET_NS} ns per hooked call for the probe programs: {verdict} ({programs:.0f} ns)"
          f"; wall-clock added worst {worst:.0f} ns (within the driver's run-to-run spread), "
          f"kernel uprobe floor {floor - base_ok:.0f} ns")
    return 0 if programs <= TARGET_NS else 1

if __name__ == "__main__":
    sys.exit(main())
