"""An NVML backend that replays a recording (the JSON `gpuslo.probes.nvml.recording()` writes)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from gpuslo.probes.nvml import DeviceMemory, GpuDevice, ProcessMemory, XidRecord

FIXTURES = Path(__file__).parent / "fixtures"


class RecordedNvml:
    """Answers every NVML question of the probe from recorded values; Xids come out once, in order."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.opened = self.closed = self.watching = False
        self._xids: deque[XidRecord] = deque()

    @classmethod
    def load(cls, name: str) -> RecordedNvml:
        return cls(json.loads((FIXTURES / name).read_text()))

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.closed = True

    def driver_version(self) -> str:
        return str(self.data["driver_version"])

    def device_count(self) -> int:
        return len(self.data["devices"])

    def device(self, index: int) -> GpuDevice:
        return GpuDevice(**self.data["devices"][index])

    def memory(self, index: int) -> DeviceMemory:
        raw = dict(self.data["memory"][index])
        processes = tuple(ProcessMemory(**p) for p in raw.pop("processes"))
        return DeviceMemory(**raw, processes=processes)

    def watch_xids(self) -> None:
        self.watching = True
        self._xids.extend(XidRecord(**x) for x in self.data["xids"])

    def wait_xid(self, timeout_ms: int) -> XidRecord | None:
        return self._xids.popleft() if self._xids else None
