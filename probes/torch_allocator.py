"""PyTorch caching-allocator probe: an in-process reporter of fragmentation as `mem_fragmentation` events.

A serving process starts it with one call, `start(server=URL)`; `build_probe` gives the same sampling the
agent's face (`--probe torch_allocator`, for an agent embedded in the process that owns the GPUs). The maths are
pure functions over the structure `torch.cuda.memory_snapshot()` returns (segments, each with blocks of a size
and a state), so they are tested without torch; torch is imported only when sampling starts.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.probe_api import ProbeJob, new_event_id, now_text
from gpuslo.probes.shipper import Shipper, ShipperConfig
from gpuslo.probes.spool import Spool

log = logging.getLogger(__name__)

SOURCE = "torch_allocator"
# A rise in retries or OOMs asks for a fresh snapshot sooner, but never more often than this.
SNAPSHOT_FLOOR_S = 1.0


@dataclass(frozen=True)
class AllocatorState:
    """One device's caching allocator at one moment. `free_bytes` is reserved memory in inactive blocks."""

    device: int
    reserved_bytes: int
    allocated_bytes: int
    free_bytes: int
    largest_free_bytes: int
    fragmentation_ratio: float
    segments: int
    alloc_retries: int = 0
    num_ooms: int = 0


def fragmentation_ratio(free_bytes: int, largest_free_bytes: int) -> float:
    """FR = (free − largest free block) / free; 0 when nothing is free (nothing to fragment)."""
    if free_bytes <= 0:
        return 0.0
    return (free_bytes - largest_free_bytes) / free_bytes


def device_states(segments: Sequence[Mapping[str, Any]],
                  stats: Mapping[int, Mapping[str, Any]] | None = None) -> dict[int, AllocatorState]:
    """Per device: reserved, allocated, free and largest free block from snapshot segments, plus counters.

    The largest usable block is the largest single "inactive" block: the allocator merges adjacent free
    blocks itself, and two it left apart cannot serve one request together.
    """
    totals: dict[int, list[int]] = {}
    for segment in segments:
        device = int(segment.get("device", 0))
        reserved, allocated, free, largest, count = totals.setdefault(device, [0, 0, 0, 0, 0])
        reserved += int(segment.get("total_size", 0))
        count += 1
        for block in segment.get("blocks", ()):
            size, state = int(block.get("size", 0)), block.get("state")
            if state == "active_allocated":
                allocated += size
            elif state == "inactive":
                free += size
                largest = max(largest, size)
        totals[device] = [reserved, allocated, free, largest, count]
    stats = stats or {}
    for device in stats:
        totals.setdefault(device, [0, 0, 0, 0, 0])
    return {
        device: AllocatorState(
            device, reserved, allocated, free, largest, fragmentation_ratio(free, largest), count,
            int(stats.get(device, {}).get("num_alloc_retries", 0)), int(stats.get(device, {}).get("num_ooms", 0)))
        for device, (reserved, allocated, free, largest, count) in sorted(totals.items())
    }


def physical_gpu(torch_index: int, cuda_visible_devices: str | None) -> int | None:
    """The host's GPU index behind torch's device index (None when CUDA_VISIBLE_DEVICES names UUIDs)."""
    if cuda_visible_devices is None or not cuda_visible_devices.strip():
        return torch_index
    entries = [e.strip() for e in cuda_visible_devices.split(",")]
    if torch_index >= len(entries) or not entries[torch_index].isdigit():
        return None
    return int(entries[torch_index])


def snapshot_due(now: float, last: float | None, min_interval_s: float, counters_rose: bool) -> bool:
    """Whether to pay for a snapshot: on the first tick, after `min_interval_s`, or sooner after trouble."""
    if last is None:
        return True
    elapsed = now - last
    return elapsed >= min_interval_s or (counters_rose and elapsed >= SNAPSHOT_FLOOR_S)


def state_event(state: AllocatorState, host: str, gpu: int | None, gpu_uuid: str | None) -> Event:
    """The `mem_fragmentation` event (scope "allocator") of one device's state."""
    body: dict[str, Any] = {
        "id": new_event_id("alloc"), "kind": "mem_fragmentation", "time": now_text(), "host": host,
        "pid": os.getpid(), "source": SOURCE,
        "attrs": {"scope": "allocator", "free_bytes": state.free_bytes,
                  "largest_free_bytes": state.largest_free_bytes,
                  "fragmentation_ratio": round(state.fragmentation_ratio, 6),
                  "reserved_bytes": state.reserved_bytes, "allocated_bytes": state.allocated_bytes,
                  "alloc_retries": state.alloc_retries, "segments": state.segments, "num_ooms": state.num_ooms},
    }
    if gpu is not None:
        body["gpu"] = gpu
    if gpu_uuid:
        body["gpu_uuid"] = gpu_uuid
    return parse_event(body)


class AllocatorSource(Protocol):
    """What the reporter reads from the allocator (torch in production, recorded data in tests)."""

    def devices(self) -> Sequence[int]: ...
    def stats(self, device: int) -> Mapping[str, Any]: ...
    def snapshot(self) -> Sequence[Mapping[str, Any]]: ...
    def gpu_uuid(self, device: int) -> str | None: ...


class TorchCudaSource:
    """The thin adapter over torch.cuda; torch is imported here and nowhere else."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError as exc:
            raise ProbeError("torch_allocator: PyTorch is not installed in this process") from exc
        if not torch.cuda.is_available():
            raise ProbeError("torch_allocator: torch.cuda is not available (no GPU, or a CPU build of PyTorch)")
        self._cuda = torch.cuda

    def devices(self) -> Sequence[int]:
        return range(self._cuda.device_count())

    def stats(self, device: int) -> Mapping[str, Any]:
        return dict(self._cuda.memory_stats(device))

    def snapshot(self) -> Sequence[Mapping[str, Any]]:
        try:
            # Trace entries are the costly part of a snapshot and the maths do not use them.
            return list(self._cuda.memory_snapshot(include_traces=False))
        except TypeError:  # PyTorch before include_traces
            return list(self._cuda.memory_snapshot())

    def gpu_uuid(self, device: int) -> str | None:
        uuid = getattr(self._cuda.get_device_properties(device), "uuid", None)
        return f"GPU-{uuid}" if uuid is not None else None


@dataclass(frozen=True)
class ReporterStats:
    """What the reporter has done, with the measured cost of its snapshots."""

    ticks: int
    snapshots: int
    events: int
    last_snapshot_s: float
    max_snapshot_s: float
    total_snapshot_s: float


class AllocatorSampler:
    """Reads the counters on every call; when a snapshot is due, takes it, times it, and returns one event per
    device (the probe's one job, and the reporter's tick)."""

    def __init__(self, source: AllocatorSource, host: str, *, snapshot_min_interval: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, cuda_visible_devices: str | None = None):
        self.source, self.host, self.snapshot_min_interval = source, host, snapshot_min_interval
        self._clock = clock
        self._visible = cuda_visible_devices
        self._last_snapshot: float | None = None
        self._counters: dict[int, tuple[int, int]] = {}
        self._stats = ReporterStats(0, 0, 0, 0.0, 0.0, 0.0)

    @property
    def stats(self) -> ReporterStats:
        return self._stats

    def sample(self) -> list[Event]:
        stats = {d: self.source.stats(d) for d in self.source.devices()}
        counters = {d: (int(s.get("num_alloc_retries", 0)), int(s.get("num_ooms", 0))) for d, s in stats.items()}
        rose = any(counters[d] > self._counters.get(d, (0, 0)) for d in counters)
        self._counters = counters
        now = self._clock()
        events: list[Event] = []
        if snapshot_due(now, self._last_snapshot, self.snapshot_min_interval, rose):
            started = time.perf_counter()
            segments = self.source.snapshot()
            cost = time.perf_counter() - started
            self._last_snapshot = now
            for device, state in device_states(segments, stats).items():
                events.append(state_event(state, self.host, physical_gpu(device, self._visible),
                                          self.source.gpu_uuid(device)))
            s = self._stats
            self._stats = replace(s, snapshots=s.snapshots + 1, events=s.events + len(events),
                                  last_snapshot_s=cost, max_snapshot_s=max(s.max_snapshot_s, cost),
                                  total_snapshot_s=s.total_snapshot_s + cost)
        self._stats = replace(self._stats, ticks=self._stats.ticks + 1)
        return events


class Reporter:
    """Samples the allocator every `interval` seconds on a daemon thread and ships the events."""

    def __init__(self, source: AllocatorSource, shipper: Shipper, host: str, *, interval: float = 10.0,
                 snapshot_min_interval: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 cuda_visible_devices: str | None = None):
        self.source, self.shipper, self.host, self.interval = source, shipper, host, interval
        self.sampler = AllocatorSampler(source, host, snapshot_min_interval=snapshot_min_interval, clock=clock,
                                        cuda_visible_devices=cuda_visible_devices)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuslo-torch-allocator", daemon=True)

    @property
    def stats(self) -> ReporterStats:
        return self.sampler.stats

    def tick(self) -> list[Event]:
        """Sample once, spool what the sample found, and try to ship."""
        events = self.sampler.sample()
        if events:
            self.shipper.spool.append(events)
        self.shipper.drain(max_batches=10)
        return events

    def start(self) -> Reporter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling and try once more to ship what is spooled."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.shipper.drain(max_batches=10)
        self.shipper.close()

    def _loop(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a reporter must never take the serving process down
                log.exception("torch_allocator: sampling failed")
            if self._stop.wait(self.interval):
                return


def start(server: str, interval: float = 10.0, host: str | None = None, token: str | None = None, *,
          snapshot_min_interval: float | None = None, source: AllocatorSource | None = None) -> Reporter:
    """Start reporting this process's allocator to `server`; returns the running Reporter (a daemon thread).

    The snapshot is taken at most every `snapshot_min_interval` seconds (default: max(interval, 30)), sooner
    only when allocation retries or OOMs rose. Events wait in an in-memory spool while the server is away.
    """
    host = host or socket.gethostname()
    source = source or TorchCudaSource()
    shipper = Shipper(Spool(None, max_events=10_000), ShipperConfig(server=server, token=token, host=host))
    reporter = Reporter(source, shipper, host, interval=interval,
                        snapshot_min_interval=max(interval, 30.0) if snapshot_min_interval is None
                        else snapshot_min_interval,
                        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    return reporter.start()


class AllocatorProbe:
    """The allocator as an agent probe: one job samples the allocator of the process the probe runs in (an
    embedded Agent, or `gpuslo serve --probe` in a process that owns the GPUs); `start()` above is the usual way
    into a serving process."""

    name = SOURCE

    def __init__(self, host: str, *, interval_s: float = 10.0, snapshot_min_interval_s: float | None = None,
                 source_factory: Callable[[], AllocatorSource] = TorchCudaSource):
        self.host, self.interval_s = host, interval_s
        self.snapshot_min_interval_s = max(interval_s, 30.0) if snapshot_min_interval_s is None \
            else snapshot_min_interval_s
        self._source_factory = source_factory
        self.sampler: AllocatorSampler | None = None

    def start(self) -> None:
        """ProbeError when this process has no PyTorch or no CUDA."""
        self.sampler = AllocatorSampler(self._source_factory(), self.host,
                                        snapshot_min_interval=self.snapshot_min_interval_s,
                                        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))

    def sample(self) -> Sequence[Event]:
        if self.sampler is None:
            raise ProbeError("torch_allocator: not started")
        return self.sampler.sample()

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("torch-allocator-sample", self.interval_s, self.sample),)

    def stop(self) -> None:
        self.sampler = None


OPTIONS = ("interval", "snapshot_min_interval")


def build_probe(arg: str | None, host: str) -> AllocatorProbe:
    """The agent's entry point: `--probe torch_allocator[:interval=S,snapshot_min_interval=S]`."""
    values: dict[str, float] = {}
    for item in (i.strip() for i in (arg or "").split(",") if i.strip()):
        name, equals, value = item.partition("=")
        if not equals or name not in OPTIONS:
            raise ProbeError(f"torch_allocator: {item!r} is not one of {', '.join(OPTIONS)} as name=value")
        try:
            values[name] = float(value)
        except ValueError as exc:
            raise ProbeError(f"torch_allocator: {name}={value!r} is not a number of seconds") from exc
        if values[name] < 0 or (name == "interval" and values[name] == 0):
            raise ProbeError(f"torch_allocator: {name} must be positive")
    return AllocatorProbe(host, interval_s=values.get("interval", 10.0),
                          snapshot_min_interval_s=values.get("snapshot_min_interval"))
