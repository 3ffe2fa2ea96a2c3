"""NVML at 10-100 Hz in a thread: utilization, Hopper GPM (SM active, occupancy, DRAM bandwidth) where the driver
offers it, and per-process SM shares, each sample on CLOCK_MONOTONIC."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any

from gpuslo.probes.attribution.signals import GpuSample

log = logging.getLogger(__name__)


class GpuSampler:
    """Samples one GPU every 1/hz s until stop(); `window(a, b)` returns the samples between two monotonic times."""

    def __init__(self, gpu: int = 0, hz: float = 20.0, keep_s: float = 120.0, nvml: Any = None):
        self.gpu, self.period = gpu, 1.0 / hz
        self._nvml = nvml
        self._samples: deque[GpuSample] = deque(maxlen=int(keep_s * hz) + 1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.gpm = False
        self.unavailable: list[str] = []
        self._last_process_ts = 0

    def start(self) -> None:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        n = self._nvml
        n.nvmlInit()
        self._handle = n.nvmlDeviceGetHandleByIndex(self.gpu)
        try:
            self.gpm = bool(n.nvmlGpmQueryDeviceSupport(self._handle).isSupportedDevice)
        except Exception as exc:  # noqa: BLE001 - pre-Hopper GPUs or old drivers
            self.unavailable.append(f"GPM: {exc}")
        if self.gpm:
            self._gpm_prev = n.nvmlGpmSampleAlloc()
            self._gpm_next = n.nvmlGpmSampleAlloc()
            n.nvmlGpmSampleGet(self._handle, self._gpm_prev)
        self._thread = threading.Thread(target=self._run, name="gpuslo-nvml-sampler", daemon=True)
        self._thread.start()

    def _gpm_metrics(self) -> dict[int, float]:
        n = self._nvml
        n.nvmlGpmSampleGet(self._handle, self._gpm_next)
        ids = (n.NVML_GPM_METRIC_SM_UTIL, n.NVML_GPM_METRIC_SM_OCCUPANCY, n.NVML_GPM_METRIC_DRAM_BW_UTIL)
        m = n.c_nvmlGpmMetricsGet_t()
        m.version, m.numMetrics = n.NVML_GPM_METRICS_GET_VERSION, len(ids)
        m.sample1, m.sample2 = self._gpm_prev, self._gpm_next
        for i, mid in enumerate(ids):
            m.metrics[i].metricId = mid
        n.nvmlGpmMetricsGet(m)
        self._gpm_prev, self._gpm_next = self._gpm_next, self._gpm_prev
        return {ids[i]: m.metrics[i].value / 100.0 for i in range(len(ids))
                if m.metrics[i].nvmlReturn == 0 and math.isfinite(m.metrics[i].value)}

    def _processes(self) -> tuple[tuple[int, float], ...]:
        n = self._nvml
        try:
            found = n.nvmlDeviceGetProcessUtilization(self._handle, self._last_process_ts)
        except n.NVMLError:  # NOT_FOUND: no process had a sample in the period
            return ()
        if found:
            self._last_process_ts = max(s.timeStamp for s in found)
        return tuple((int(s.pid), float(s.smUtil)) for s in found)

    def sample(self) -> GpuSample:
        n = self._nvml
        t = time.monotonic_ns()
        util = float(n.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        gpm = self._gpm_metrics() if self.gpm else {}
        return GpuSample(t, self.gpu, util, gpm.get(getattr(n, "NVML_GPM_METRIC_SM_UTIL", -1)),
                         gpm.get(getattr(n, "NVML_GPM_METRIC_SM_OCCUPANCY", -1)),
                         gpm.get(getattr(n, "NVML_GPM_METRIC_DRAM_BW_UTIL", -1)), self._processes())

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._samples.append(self.sample())
            except Exception:  # noqa: BLE001 - one bad read must not end sampling
                log.exception("NVML sample failed")

    def add(self, sample: GpuSample) -> None:
        """Take a sample from elsewhere (replays, tests)."""
        self._samples.append(sample)

    def window(self, start_ns: int, end_ns: int) -> list[GpuSample]:
        return [s for s in list(self._samples) if start_ns <= s.t_ns <= end_ns]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
