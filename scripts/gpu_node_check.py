"""What a GPU node offers the probes, as one JSON report (run on the GPU machine as root, BCC set up).

    python3 scripts/gpu_node_check.py --out DIR

1. libcuda's exports of the hooked driver functions, and for each the address `cuGetProcAddress` hands the
   CUDA runtime, compared with the exported symbol's (CUDA 12+ runtimes take driver entry points from
   cuGetProcAddress, not from the dynamic symbol table: a uprobe on the export misses calls through another
   entry point).
2. Every record the eBPF probe sees (successes and nested calls included) while a torch process allocates, fails
   a 2 TiB allocation and exits: which symbols fire, at which depth.
3. Which tracepoints the attribution probe needs exist and attach (sched, tcp, raw_syscalls, page faults, block).
4. NVML: GPM support and metrics, per-process utilization, how fast utilization can be sampled.
5. Tools the labelled experiment needs: tc netem on loopback, CPU count.
Writes DIR/h200-node-check.json and prints it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DRIVER_SYMBOLS = ("cuMemAlloc", "cuMemAllocAsync", "cuMemFree", "cuMemAllocManaged", "cuMemCreate",
                  "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH",
                  "cuMemcpyDtoHAsync", "cuGraphLaunch", "cuStreamEndCapture", "cuLaunchKernel")


def _maps_base(path: str) -> int | None:
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5] == path and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16)
    return None


def entry_points(libcuda: str) -> dict[str, Any]:
    """Exported vs cuGetProcAddress addresses (as offsets into the library) of the driver functions."""
    lib = ctypes.CDLL(libcuda)
    real = os.path.realpath(libcuda)
    base = _maps_base(real)
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    out: dict[str, Any] = {"driver_api_version": version.value, "base": hex(base or 0), "symbols": {}}
    readelf = subprocess.run(["readelf", "-Ws", "--dyn-syms", real], capture_output=True, text=True).stdout
    exported: dict[str, int] = {}
    for line in readelf.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "FUNC":
            exported[parts[7].split("@")[0]] = int(parts[1], 16)
    getter = getattr(lib, "cuGetProcAddress_v2", None)
    for name in DRIVER_SYMBOLS:
        pfn = ctypes.c_void_p(0)
        status = ctypes.c_int(-1)
        rc = getter(name.encode(), ctypes.byref(pfn), version.value, ctypes.c_uint64(0), ctypes.byref(status)) \
            if getter else -1
        offset = (pfn.value - base) if (pfn.value and base) else None
        aliases = sorted(s for s, v in exported.items() if offset is not None and v == offset)
        out["symbols"][name] = {
            "exports": {s: hex(v) for s, v in exported.items() if re.fullmatch(rf"{name}(_v\d+)?(_ptsz|_ptds)?", s)},
            "proc_address_rc": rc, "proc_status": status.value,
            "proc_offset": hex(offset) if offset is not None else None, "proc_offset_is_export_of": aliases}
    return out


CHILD = r"""
import os, sys, time, torch
print("ready", os.getpid(), flush=True); sys.stdin.readline()
x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
try:
    torch.empty(2 << 40, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    print("oom", str(e)[:80], flush=True)
del x; torch.cuda.empty_cache(); torch.cuda.synchronize(); time.sleep(0.3); print("done", flush=True)
"""


def probe_records(libs: dict[str, str], offsets: dict[str, int]) -> dict[str, Any]:
    """All records of the eBPF probe, successes and nested ones, over one torch process's OOM."""
    from gpuslo.probes.ebpf.functions import FUNCTIONS
    from gpuslo.probes.ebpf.libraries import LibrarySet
    from gpuslo.probes.ebpf.probe import CudaProbe

    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    pid = int(child.stdout.readline().split()[1])
    probe = CudaProbe(LibrarySet(libs.get("cuda"), libs.get("cudart")), "node-check", pids=[pid],
                      send_success=True, report_nested=True)
    probe.start()
    extra = []
    for name, offset in offsets.items():  # the cuGetProcAddress entry point, where it is not the export
        func_id = next((i for i, f in enumerate(FUNCTIONS) if f.symbol.startswith(name)), None)
        if func_id is None or not libs.get("cuda"):
            continue
        try:
            probe._bpf.attach_uprobe(name=libs["cuda"].encode(), addr=offset, fn_name=f"gs_enter_{func_id}".encode())
            probe._bpf.attach_uretprobe(name=libs["cuda"].encode(), addr=offset,
                                        fn_name=f"gs_leave_{func_id}".encode())
            extra.append({"symbol": name, "offset": hex(offset), "ok": True})
        except Exception as exc:  # noqa: BLE001 - reported
            extra.append({"symbol": name, "offset": hex(offset), "ok": False, "error": str(exc)[:200]})
    child.stdin.write("go\n")  # type: ignore[union-attr]
    child.stdin.flush()  # type: ignore[union-attr]
    lines = child.communicate(timeout=120)[0].splitlines()
    records = []
    for _ in range(5):
        records += probe.poll_records(0.2)
    counts = probe.success_counts()
    probe.close()
    return {"child": lines, "extra_attach": extra, "ok_counts": {k: v for k, v in counts.items() if v},
            "records": [{"sym": FUNCTIONS[r.func_id].symbol, "depth": r.depth, "ret": r.ret, "size": r.size,
                         "dur_us": round(r.duration_ns / 1e3, 1)} for r in records][:200]}


TRACEPOINTS = ("sched:sched_switch", "sched:sched_wakeup", "sched:sched_wakeup_new", "tcp:tcp_retransmit_skb",
               "raw_syscalls:sys_enter", "raw_syscalls:sys_exit", "exceptions:page_fault_user",
               "block:block_rq_issue", "block:block_rq_complete", "tcp:tcp_probe", "sock:inet_sock_set_state")


def tracepoints() -> dict[str, Any]:
    from bcc import BPF

    found = {}
    for tp in TRACEPOINTS:
        cat, name = tp.split(":")
        exists = Path(f"/sys/kernel/tracing/events/{cat}/{name}").exists()
        ok, err = False, ""
        if exists:
            try:
                b = BPF(text=b"int f(void *ctx) { return 0; }")
                b.attach_tracepoint(tp=tp.encode(), fn_name=b"f")
                ok = True
                b.cleanup()
            except Exception as exc:  # noqa: BLE001
                err = str(exc)[:200]
        found[tp] = {"exists": exists, "attached": ok, "error": err}
    try:
        from gpuslo.probes.attribution.bpf import build_text  # the real program, when present
        b = BPF(text=build_text().encode())
        b.cleanup()
        found["attribution_program"] = "loaded"
    except Exception as exc:  # noqa: BLE001
        found["attribution_program"] = f"failed: {str(exc)[:600]}"
    return found


def nvml() -> dict[str, Any]:
    import pynvml as n

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    out: dict[str, Any] = {"driver": n.nvmlSystemGetDriverVersion()}
    try:
        out["gpm_supported"] = bool(n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    except Exception as exc:  # noqa: BLE001
        out["gpm_supported"] = f"error: {exc}"
    if out["gpm_supported"] is True:
        try:
            a, b = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
            n.nvmlGpmSampleGet(h, a)
            time.sleep(0.1)
            n.nvmlGpmSampleGet(h, b)
            ids = (n.NVML_GPM_METRIC_SM_UTIL, n.NVML_GPM_METRIC_SM_OCCUPANCY, n.NVML_GPM_METRIC_DRAM_BW_UTIL,
                   n.NVML_GPM_METRIC_GRAPHICS_UTIL)
            m = n.c_nvmlGpmMetricsGet_t()
            m.version = n.NVML_GPM_METRICS_GET_VERSION
            m.numMetrics = len(ids)
            m.sample1, m.sample2 = a, b
            for i, mid in enumerate(ids):
                m.metrics[i].metricId = mid
            n.nvmlGpmMetricsGet(m)
            out["gpm"] = {str(ids[i]): [m.metrics[i].value, m.metrics[i].nvmlReturn] for i in range(len(ids))}
        except Exception as exc:  # noqa: BLE001
            out["gpm"] = f"error: {exc}"
    try:
        out["process_utilization"] = [
            {"pid": s.pid, "sm": s.smUtil, "mem": s.memUtil} for s in n.nvmlDeviceGetProcessUtilization(h, 0)]
    except Exception as exc:  # noqa: BLE001
        out["process_utilization"] = f"error: {exc}"
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.5:
        n.nvmlDeviceGetUtilizationRates(h)
        k += 1
    out["utilization_reads_per_s"] = round(k / 0.5)
    return out


def tools() -> dict[str, Any]:
    def sh(cmd: str) -> str:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        return f"rc={p.returncode} {(p.stdout + p.stderr).strip()[:300]}"

    return {"netem_add": sh("tc qdisc add dev lo root netem delay 1ms"), "netem_show": sh("tc qdisc show dev lo"),
            "netem_del": sh("tc qdisc del dev lo root"), "nproc": os.cpu_count(),
            "stress-ng": sh("command -v stress-ng"), "taskset": sh("command -v taskset"),
            "uname": os.uname().release, "clock_res_ns": time.clock_getres(time.CLOCK_MONOTONIC) * 1e9}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    libs = json.loads(subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_workloads.py"), "libs"],
                                     capture_output=True, text=True).stdout.split("RESULT ", 1)[1].splitlines()[0])
    report: dict[str, Any] = {"libraries": libs}
    for name, step in (("entry_points", lambda: entry_points(libs["cuda"])), ("tracepoints", tracepoints),
                       ("nvml", nvml), ("tools", tools)):
        try:
            report[name] = step()
        except Exception as exc:  # noqa: BLE001 - each part reported on its own
            report[name] = f"failed: {type(exc).__name__}: {exc}"
    symbols = report["entry_points"].get("symbols", {}) if isinstance(report["entry_points"], dict) else {}
    offsets = {n: int(s["proc_offset"], 16) for n, s in symbols.items() if s.get("proc_offset")
               and not s.get("proc_offset_is_export_of") and n in ("cuMemAlloc", "cuGraphLaunch")}
    try:
        report["probe_records"] = probe_records(libs, offsets)
    except Exception as exc:  # noqa: BLE001
        report["probe_records"] = f"failed: {type(exc).__name__}: {exc}"
    text = json.dumps(report, indent=1, default=str)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "h200-node-check.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
