"""Which GPU a process uses: NVML's process list when NVML works, else its CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

log = logging.getLogger(__name__)

NvmlLookup = Callable[[], Mapping[int, int]]


def nvml_process_gpus() -> Mapping[int, int]:
    """pid → GPU index for every compute process NVML lists; raises when NVML is unavailable."""
    import pynvml  # imported here: hosts without the NVIDIA driver still load this module

    pynvml.nvmlInit()
    try:
        found: dict[int, int] = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                found.setdefault(int(proc.pid), index)
        return found
    finally:
        pynvml.nvmlShutdown()


def visible_device(pid: int, proc_root: str = "/proc") -> int | None:
    """The GPU index a process's CUDA_VISIBLE_DEVICES pins it to; None when unset, a UUID, or several."""
    try:
        environ = Path(proc_root, str(pid), "environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
            devices = [d.strip() for d in entry.split(b"=", 1)[1].decode(errors="replace").split(",")]
            # With several visible devices the process may use any of them: say unknown rather than guess.
            if len(devices) == 1 and devices[0].isdigit():
                return int(devices[0])
            return None
    return None


class GpuResolver:
    """Resolves pid → GPU index, asking NVML first; NVML failures fall back to the environment, once logged."""

    def __init__(self, nvml: NvmlLookup | None = nvml_process_gpus, proc_root: str = "/proc"):
        self._nvml = nvml
        self._proc_root = proc_root

    def gpu_of(self, pid: int) -> int | None:
        """The GPU index of pid, or None when unknown."""
        if self._nvml is not None:
            try:
                gpus = self._nvml()
            except Exception as exc:  # any NVML failure (no driver, no library) means: use the fallback
                log.info("NVML process list unavailable (%s); using CUDA_VISIBLE_DEVICES", exc)
                self._nvml = None
            else:
                if pid in gpus:
                    return gpus[pid]
        return visible_device(pid, self._proc_root)
