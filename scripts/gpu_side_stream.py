"""GPU contention from another stream of the serving process, for the labelled stall-attribution run: the LLM
server of scripts/gpu_token_workloads.py starts a GpuHold on POST /control/gpu."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

SPIN = r"""
extern "C" __global__ void hold(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


class GpuHold(threading.Thread):
    """GPU contention from another stream of this process (a thread named gs-side): every `every_s`, kernels that
    fill every SM for about `hold_ms`, on a non-blocking side stream; the decode's kernels queue behind them and
    the engine thread's next device-to-host copy waits. `mode` matmul: bf16 16384-square products back to back
    (cuBLAS's persistent Hopper kernels hold every SM while they run); spin: one kernel of two 1024-thread blocks
    per SM spinning on %globaltimer (CuPy, NVRTC). Each hold is timed in wall-clock nanoseconds."""

    def __init__(self, mode: str = "matmul", hold_ms: float = 300.0, every_s: float = 1.0):
        super().__init__(name="gs-side", daemon=True)
        self.mode, self.hold_ms, self.every_s = mode, hold_ms, every_s
        self.stop_event = threading.Event()
        self.holds: list[dict[str, Any]] = []
        self.error: str | None = None
        self.setup: dict[str, Any] = {}

    def _launcher(self, torch: Any) -> Any:
        if self.mode == "spin":
            import cupy

            kernel = cupy.RawKernel(SPIN, "hold")
            stream = cupy.cuda.Stream(non_blocking=True)
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            ns = cupy.uint64(int(self.hold_ms * 1e6))
            self.setup = {"sms": sms, "grid": 2 * sms, "block": 1024}

            def spin() -> Any:
                with stream:
                    kernel((2 * sms,), (1024,), (ns,))
                event = cupy.cuda.Event(block=False, disable_timing=True)
                event.record(stream)
                return lambda: event.done
            return spin
        side = torch.cuda.Stream()
        a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
        with torch.cuda.stream(side):
            a @ b
        side.synchronize()
        t = time.monotonic()
        with torch.cuda.stream(side):
            for _ in range(4):
                a @ b
        side.synchronize()
        gemm_ms = (time.monotonic() - t) * 1e3 / 4
        count = max(1, round(self.hold_ms / gemm_ms))
        self.setup = {"gemm_ms": round(gemm_ms, 3), "gemms_per_hold": count}

        def matmul() -> Any:
            with torch.cuda.stream(side):
                for _ in range(count):
                    a @ b
                event = torch.cuda.Event()
                event.record(side)
            return event.query
        return matmul

    def run(self) -> None:
        import torch

        ctypes.CDLL(None).prctl(15, b"gs-side", 0, 0, 0)  # PR_SET_NAME: not a serving thread (comm=)
        try:
            launch = self._launcher(torch)
            while not self.stop_event.wait(self.every_s):
                start = time.time_ns()
                done = launch()
                while not done():  # polled, the GIL free between polls: only the GPU is contended
                    time.sleep(0.002)
                self.holds.append({"start_ns": start, "end_ns": time.time_ns()})
        except Exception as exc:  # noqa: BLE001 - reported on /control/gpu, never kills the server
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"GPU HOLD FAILED {self.error}", flush=True)
