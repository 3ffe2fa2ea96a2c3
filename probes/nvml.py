"""NVML probe: Xid critical errors as `gpu_xid` events, device and per-process memory, and GPU inventory.

All NVML calls live in `PynvmlBackend`; `NvmlProbe` holds the logic and runs on any backend with the same
answers (tests replay recorded values). Device memory is kept as samples, not events: NVML reports used and
free bytes but not the largest contiguous free block, so no honest fragmentation ratio exists for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Protocol

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, canonical_pci_bus, parse_event
from gpuslo.probes.probe_api import ProbeJob, new_event_id, now_text

# What the common Xids mean, from NVIDIA's Xid catalogue; the number is always sent, this only helps a reader.
XID_MEANINGS: Mapping[int, str] = MappingProxyType({
    13: "graphics engine exception", 31: "GPU memory page fault", 32: "invalid or corrupted push buffer",
    43: "GPU stopped processing", 45: "preemptive cleanup after a previous error",
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure", 74: "NVLink error",
    79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
})


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML names it; fills the `gpu`/`gpu_uuid` envelope of events about it."""

    index: int
    name: str
    uuid: str
    pci_bus: str


@dataclass(frozen=True)
class GpuInventory:
    driver_version: str
    devices: tuple[GpuDevice, ...]

    def device(self, index: int) -> GpuDevice | None:
        return next((d for d in self.devices if d.index == index), None)


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_bytes: int


@dataclass(frozen=True)
class DeviceMemory:
    """A device memory sample with the compute processes holding memory on it."""

    index: int
    used_bytes: int
    free_bytes: int
    total_bytes: int
    processes: tuple[ProcessMemory, ...] = ()


@dataclass(frozen=True)
class XidRecord:
    """One Xid critical error event as NVML's event set delivered it."""

    device_index: int
    xid: int


class NvmlBackend(Protocol):
    """The NVML answers the probe needs; `open` raises ProbeError when NVML cannot be used here."""

    def open(self) -> None: ...
    def close(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def device(self, index: int) -> GpuDevice: ...
    def memory(self, index: int) -> DeviceMemory: ...
    def watch_xids(self) -> None: ...
    def wait_xid(self, timeout_ms: int) -> XidRecord | None: ...


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """The thin adapter over nvidia-ml-py (pynvml): every NVML call of the probe, nothing else."""

    def __init__(self) -> None:
        self._event_set: Any = None
        self._handles: list[Any] = []

    def open(self) -> None:
        import pynvml

        try:
            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise ProbeError(
                "nvml: the NVML library (libnvidia-ml.so.1) was not found: this host has no NVIDIA driver. "
                "Install the NVIDIA driver, or leave the nvml probe out") from exc
        except pynvml.NVMLError as exc:
            raise ProbeError(f"nvml: NVML failed to start: {exc}; check the driver with nvidia-smi") from exc

    def close(self) -> None:
        import pynvml

        if self._event_set is not None:
            pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        pynvml.nvmlShutdown()

    def driver_version(self) -> str:
        import pynvml

        return _text(pynvml.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return len(self._handles)

    def device(self, index: int) -> GpuDevice:
        import pynvml

        handle = self._handles[index]
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        return GpuDevice(index, _text(pynvml.nvmlDeviceGetName(handle)),
                         _text(pynvml.nvmlDeviceGetUUID(handle)), _text(pci.busId))

    def memory(self, index: int) -> DeviceMemory:
        import pynvml

        handle = self._handles[index]
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        procs = tuple(ProcessMemory(int(p.pid), int(p.usedGpuMemory or 0))
                      for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return DeviceMemory(index, int(info.used), int(info.free), int(info.total), procs)

    def watch_xids(self) -> None:
        import pynvml

        self._event_set = pynvml.nvmlEventSetCreate()
        for handle in self._handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set)
            except pynvml.NVMLError_NotSupported as exc:
                raise ProbeError(f"nvml: this GPU does not report Xid events through NVML: {exc}") from exc

    def wait_xid(self, timeout_ms: int) -> XidRecord | None:
        import pynvml

        try:
            data = pynvml.nvmlEventSetWait(self._event_set, timeout_ms)
        except pynvml.NVMLError_Timeout:
            return None
        if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
            return None
        return XidRecord(int(pynvml.nvmlDeviceGetIndex(data.device)), int(data.eventData))


def _pci_of(device: GpuDevice | None) -> str:
    """The canonical bus id (engine.events.canonical_pci_bus) that log-probe Xids carry too."""
    return "" if device is None else canonical_pci_bus(device.pci_bus) or device.pci_bus


class NvmlProbe:
    """Turns NVML answers into `gpu_xid` events, memory samples and the inventory of this host's GPUs."""

    name = "nvml"

    def __init__(self, backend: NvmlBackend, host: str, *, xid_interval_s: float = 1.0,
                 memory_interval_s: float = 15.0):
        self.backend = backend
        self.host = host
        self.xid_interval_s = xid_interval_s
        self.memory_interval_s = memory_interval_s
        self._inventory: GpuInventory | None = None
        self._memory: tuple[DeviceMemory, ...] = ()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Open NVML, read the inventory and subscribe to Xid events; raises ProbeError when it cannot."""
        self.backend.open()
        devices = tuple(self.backend.device(i) for i in range(self.backend.device_count()))
        self._inventory = GpuInventory(self.backend.driver_version(), devices)
        self.backend.watch_xids()

    def stop(self) -> None:
        if self._inventory is not None:
            self.backend.close()
            self._inventory = None

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("nvml-xid", self.xid_interval_s, self.poll_xids),
                ProbeJob("nvml-memory", self.memory_interval_s, self._sample_no_events))

    @property
    def inventory(self) -> GpuInventory:
        if self._inventory is None:
            raise ProbeError("nvml: the probe has not been started")
        return self._inventory

    @property
    def memory(self) -> tuple[DeviceMemory, ...]:
        """The latest memory sample of every device (empty before the first)."""
        with self._lock:
            return self._memory

    def envelope(self, index: int) -> dict[str, object]:
        """The `gpu` and `gpu_uuid` fields for events about the GPU with this NVML index."""
        device = self.inventory.device(index)
        return {"gpu": index, "gpu_uuid": device.uuid if device else None}

    def gpu_of_pid(self, pid: int) -> int | None:
        """The GPU a process holds memory on, from the latest sample (None when unknown)."""
        for sample in self.memory:
            if any(p.pid == pid for p in sample.processes):
                return sample.index
        return None

    def sample_memory(self) -> tuple[DeviceMemory, ...]:
        samples = tuple(self.backend.memory(d.index) for d in self.inventory.devices)
        with self._lock:
            self._memory = samples
        return samples

    def _sample_no_events(self) -> Sequence[Event]:
        self.sample_memory()
        return ()

    def poll_xids(self, timeout_ms: int = 0, limit: int = 100) -> list[Event]:
        """Every Xid waiting in the event set (at most `limit`), as `gpu_xid` events."""
        events = []
        for _ in range(limit):
            record = self.backend.wait_xid(timeout_ms)
            if record is None:
                break
            events.append(self.xid_event(record))
        return events

    def xid_event(self, record: XidRecord) -> Event:
        device = self.inventory.device(record.device_index)
        meaning = XID_MEANINGS.get(record.xid, "see NVIDIA's Xid catalogue")
        name = device.name if device else f"GPU {record.device_index}"
        return parse_event({
            "id": new_event_id("xid"), "kind": "gpu_xid", "time": now_text(), "host": self.host,
            "source": self.name, **{k: v for k, v in self.envelope(record.device_index).items() if v is not None},
            "attrs": {"xid": record.xid, "pci_bus": _pci_of(device),
                      "detail": f"Xid {record.xid} on {name}: {meaning}"},
        })


def build_probe(arg: str | None, host: str) -> NvmlProbe:
    """The agent's entry point: `--probe nvml` takes no argument."""
    if arg:
        raise ProbeError(f"nvml: the probe takes no argument (got {arg!r})")
    return NvmlProbe(PynvmlBackend(), host)


def recording(backend: NvmlBackend) -> dict[str, Any]:
    """The backend's answers as JSON-ready data, in the form tests replay (run on a GPU host to record)."""
    backend.open()
    try:
        count = backend.device_count()
        return {"driver_version": backend.driver_version(),
                "devices": [asdict(backend.device(i)) for i in range(count)],
                "memory": [asdict(backend.memory(i)) for i in range(count)], "xids": []}
    finally:
        backend.close()


if __name__ == "__main__":
    print(json.dumps(recording(PynvmlBackend()), indent=2))
