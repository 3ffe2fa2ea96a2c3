"""h14f: long ioctls on the real NVIDIA driver's files are named by the file and are the driver's share.

    python3 scripts/gpu_itl_ioctl.py --out DIR

A child (thread name gs-engine) is watched by the attribution Collector (real libcuda hooked), then told to
start CUDA and allocate: cuInit and context creation, 2 GiB of pinned host memory (cudaHostAlloc pins the pages
inside an ioctl), 32 GiB on the device, then frees. Every long ioctl (≥ the 2 ms syscall threshold) of the child
is listed with its kind and detail. Passes iff at least one is kind "ioctl" with detail "ioctl on /dev/nvidia…"
and none on a /dev/nvidia file is the kernel's ("syscall"). Writes DIR/ioctl-real-driver.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from gpuslo.probes.attribution.collector import NVIDIA_DEVICES, Collector
from gpuslo.probes.ebpf.libraries import LibrarySet

CHILD = r"""
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
import torch
print("ready", flush=True); sys.stdin.readline()
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
pinned = torch.empty(2 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(32 << 30, dtype=torch.uint8, device="cuda")
dev[:1 << 20].copy_(pinned[:1 << 20], non_blocking=True); torch.cuda.synchronize()
del pinned, dev; torch.cuda.empty_cache(); torch.cuda.synchronize()
print("done", flush=True)
time.sleep(0.8)                                 # the driver's fds still open while the ring buffer is read
"""


def libcuda_path() -> str:
    ctypes.CDLL("libcuda.so.1")
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libcuda.so" in line and "/" in line:
            return line[line.index("/"):]
    raise SystemExit("libcuda.so.1 not mapped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lib = libcuda_path()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline() == "ready\n"
    collector = Collector(LibrarySet(cuda=lib), comm="gs-engine")
    collector.start()
    found: list = []
    try:
        collector.watch(child.pid)
        done = threading.Event()
        poller = threading.Thread(target=lambda: [found.extend(collector.poll(100)) for _ in iter(done.is_set, True)])
        poller.start()
        t0 = time.monotonic()
        child.stdin.write("go\n")
        child.stdin.flush()
        reply = child.stdout.readline()
        step_s = time.monotonic() - t0
        time.sleep(0.4)
        done.set()
        poller.join(5)
    finally:
        collector.close()
        child.wait(30)
    ioctls = [{"kind": i.kind, "detail": i.detail, "ms": round((i.end_ns - i.start_ns) / 1e6, 3), "tid": i.tid}
              for i in found if i.pid == child.pid and "ioctl" in i.detail]
    driver = [i for i in ioctls if i["kind"] == "ioctl" and i["detail"].startswith("ioctl on " + NVIDIA_DEVICES)]
    wrong = [i for i in ioctls if i["kind"] != "ioctl" and NVIDIA_DEVICES in i["detail"]]
    result = {"libcuda": lib, "reply": reply.strip(), "step_s": round(step_s, 2), "long_ioctls": len(ioctls),
              "by_detail": Counter(f'{i["kind"]}: {i["detail"]}' for i in ioctls),
              "longest": sorted(ioctls, key=lambda i: -i["ms"])[:15],
              "kinds_seen": Counter(i.kind for i in found if i.pid == child.pid),
              "driver_named": len(driver), "nvidia_named_as_kernel": len(wrong),
              "pass": reply == "done\n" and bool(driver) and not wrong}
    (args.out / "ioctl-real-driver.json").write_text(json.dumps(result, indent=1))
    print("IOCTL " + json.dumps(result, indent=1), flush=True)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
