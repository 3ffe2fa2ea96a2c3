"""The real PyTorch workloads of the GPU end-to-end run (scripts/gpu_e2e.py starts each in its own process).

    python3 scripts/gpu_workloads.py libs            # the CUDA libraries a torch process maps, as JSON
    python3 scripts/gpu_workloads.py oom             # torch.empty of 2 TiB -> torch.OutOfMemoryError
    python3 scripts/gpu_workloads.py graph           # torch.cuda.synchronize() inside a CUDA graph capture
    python3 scripts/gpu_workloads.py frag --server URL   # fills the GPU with mixed sizes, frees every other one,
                                                     # asks for more than the device has free (allocator retry)

Each prints one line `RESULT {json}` with its pid and what it observed, then lingers a moment so the eBPF
probe's GPU lookup (NVML's process list) still finds the process when the agent drains the ring buffer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

MIB, GIB, TIB = 1 << 20, 1 << 30, 1 << 40
OOM_BYTES = 2 * TIB
# Mixed sizes, five of them so that "every other one" mixes them too; all > 10 MiB and multiples of 2 MiB, so
# the caching allocator gives each its own cudaMalloc'd segment of exactly this size.
FRAG_SIZES_MIB = (1024, 512, 1536, 768, 1280)
FRAG_MARGIN = 1 * GIB       # left free on the device after the fill
FRAG_BIG_REQUEST = 6 * GIB  # > device free after the fill and > any cached block: cudaMalloc fails, then a retry
LINGER_S = 2.0


def _result(**fields: Any) -> None:
    print("RESULT " + json.dumps({"pid": os.getpid(), **fields}), flush=True)


def libs() -> None:
    """The libcuda/libcudart/libnccl paths this process maps once torch has a CUDA context."""
    import torch

    from gpuslo.probes.ebpf.libraries import from_process

    torch.zeros(1, device="cuda")
    found = from_process(os.getpid())
    _result(cuda=found.cuda, cudart=found.cudart, nccl=found.nccl, torch=torch.__version__,
            cuda_runtime=torch.version.cuda, device=torch.cuda.get_device_name(0))


def oom() -> None:
    import torch

    torch.zeros(1, device="cuda")
    started = time.time()
    try:
        torch.empty(OOM_BYTES, dtype=torch.uint8, device="cuda")
        error = None
    except torch.OutOfMemoryError as exc:
        error = str(exc).splitlines()[0][:300]
    stats = torch.cuda.memory_stats()
    time.sleep(LINGER_S)
    _result(requested_bytes=OOM_BYTES, raised=error, started=started, num_ooms=stats.get("num_ooms", 0))


def graph() -> None:
    import torch

    x = torch.ones(1 << 20, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on a side stream, as the PyTorch docs ask before capture
        (x * 2).sum()
    torch.cuda.current_stream().wait_stream(stream)
    good = torch.cuda.CUDAGraph()
    with torch.cuda.graph(good):
        y = x * 3
    good.replay()  # a successful capture and launch first: counted by the probe, not sent
    torch.cuda.synchronize()
    ok = float(y[0].item()) == 3.0
    bad = torch.cuda.CUDAGraph()
    errors: list[str] = []
    try:
        with torch.cuda.graph(bad):
            _ = x * 4
            torch.cuda.synchronize()  # forbidden during capture: invalidates it, EndCapture then fails
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError or its AcceleratorError
        for err in (exc.__context__, exc):  # the synchronize error, then the failed end of capture
            if err is not None:
                errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")
    time.sleep(LINGER_S)
    _result(good_graph_ok=ok, errors=errors)


def fill_blocks(torch: Any, target: int, sizes_mib: tuple[int, ...] = FRAG_SIZES_MIB) -> list[Any]:
    """Allocate blocks cycling through the sizes until the next one would pass `target` bytes."""
    tensors, used, i = [], 0, 0
    while True:
        size = sizes_mib[i % len(sizes_mib)] * MIB
        if used + size > target:
            return tensors
        tensors.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        used += size
        i += 1


def expected_fr(freed: list[int]) -> float:
    """FR the allocator probe should report when exactly these blocks are cached free (own segments each)."""
    return (sum(freed) - max(freed)) / sum(freed) if freed else 0.0


def _snapshot_cost(torch: Any, repeats: int = 5) -> dict[str, float]:
    snap, stats = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        segments = torch.cuda.memory_snapshot()
        snap.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.cuda.memory_stats()
        stats.append(time.perf_counter() - t0)
    return {"segments": len(segments), "snapshot_ms_median": statistics.median(snap) * 1e3,
            "snapshot_ms_max": max(snap) * 1e3, "memory_stats_ms_median": statistics.median(stats) * 1e3}


def frag(server: str) -> None:
    import torch

    from gpuslo.probes import torch_allocator

    torch.zeros(1, device="cuda")
    # A long interval: the thread samples once at start, then the workload samples at the moments that matter.
    reporter = torch_allocator.start(server=server, interval=3600, snapshot_min_interval=0)
    while reporter.stats.ticks < 1:
        time.sleep(0.05)
    free, total = torch.cuda.mem_get_info()
    tensors = fill_blocks(torch, free - FRAG_MARGIN)
    filled = sum(t.numel() for t in tensors)
    freed1 = [t.numel() for t in tensors[0::2]]
    kept = tensors[1::2]
    del tensors
    cost = _snapshot_cost(torch)
    tick1 = reporter.tick()
    big = torch.empty(FRAG_BIG_REQUEST, dtype=torch.uint8, device="cuda")  # cudaMalloc fails, flush, retry
    stats = torch.cuda.memory_stats()
    freed2 = [t.numel() for t in kept[0::2]]
    kept = kept[1::2]
    tick2 = reporter.tick()
    reporter.stop()
    _result(device_total=total, device_free_before=free, filled_bytes=filled, chunks=len(freed1) + len(kept) * 2,
            big_request_bytes=big.numel(), num_alloc_retries=stats.get("num_alloc_retries", 0),
            num_ooms=stats.get("num_ooms", 0),
            expected_fr_1=expected_fr(freed1), freed_bytes_1=sum(freed1), largest_free_1=max(freed1),
            expected_fr_2=expected_fr(freed2), freed_bytes_2=sum(freed2), largest_free_2=max(freed2),
            reported=[e.to_dict() for e in tick1 + tick2], snapshot_cost=cost,
            reporter_stats=dataclasses.asdict(reporter.stats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=("libs", "oom", "graph", "frag"))
    parser.add_argument("--server", default="http://127.0.0.1:8765")
    args = parser.parse_args()
    if args.workload == "frag":
        frag(args.server)
    else:
        {"libs": libs, "oom": oom, "graph": graph}[args.workload]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
