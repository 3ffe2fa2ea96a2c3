"""Allocator probe: fragmentation maths on recorded snapshot structures, and the reporter loop (no torch)."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.shipper import Shipper, ShipperConfig
from gpuslo.probes.spool import Spool
from gpuslo.probes.torch_allocator import (
    SNAPSHOT_FLOOR_S,
    AllocatorProbe,
    AllocatorState,
    Reporter,
    TorchCudaSource,
    device_states,
    fragmentation_ratio,
    physical_gpu,
    snapshot_due,
    start,
)

FIXTURES = Path(__file__).parent / "fixtures"
MiB = 1024 * 1024


class RecordedSource:
    """An allocator source replaying a recorded snapshot and memory_stats; counts snapshots taken."""

    def __init__(self, name: str):
        data = json.loads((FIXTURES / name).read_text())
        self.segments: list[dict[str, Any]] = data["segments"]
        self.counters = {int(k): dict(v) for k, v in data["stats"].items()}
        self.snapshots = 0

    def devices(self) -> Sequence[int]:
        return sorted(self.counters)

    def stats(self, device: int) -> Mapping[str, Any]:
        return dict(self.counters[device])

    def snapshot(self) -> Sequence[Mapping[str, Any]]:
        self.snapshots += 1
        return self.segments

    def gpu_uuid(self, device: int) -> str | None:
        return f"GPU-0000000{device}-aaaa-bbbb-cccc-dddddddddddd"


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _reporter(source: RecordedSource, clock: Clock, **kwargs: Any) -> Reporter:
    shipper = Shipper(Spool(None), ShipperConfig(server=_dead_url(), host="srv-1", timeout_s=1.0))
    return Reporter(source, shipper, "srv-1", clock=clock, **kwargs)


def test_fragmented_snapshot_gives_exact_fr_per_device() -> None:
    source = RecordedSource("torch-snapshot-fragmented.json")
    states = device_states(source.segments, source.counters)
    assert states[0] == AllocatorState(
        device=0, reserved_bytes=22 * MiB, allocated_bytes=14 * MiB + MiB // 2, free_bytes=7 * MiB,
        largest_free_bytes=2 * MiB, fragmentation_ratio=5 / 7, segments=2, alloc_retries=3, num_ooms=1)
    assert states[0].fragmentation_ratio > 0.65  # the stall zone of the seed definition
    # Device 1: one free block is all the free memory, so nothing is fragmented.
    one = states[1]
    assert (one.free_bytes, one.largest_free_bytes, one.fragmentation_ratio) == (6 * MiB, 6 * MiB, 0.0)


def test_healthy_snapshot_has_low_fr() -> None:
    source = RecordedSource("torch-snapshot-healthy.json")
    state = device_states(source.segments, source.counters)[0]
    assert (state.free_bytes, state.largest_free_bytes) == (50 * MiB, 48 * MiB)
    assert state.fragmentation_ratio == 2 / 50
    assert state.largest_free_bytes / state.free_bytes > 0.45


def test_pending_free_blocks_are_neither_allocated_nor_free() -> None:
    segments = [{"device": 0, "total_size": 3 * MiB, "blocks": [
        {"size": MiB, "state": "active_pending_free"}, {"size": MiB, "state": "inactive"},
        {"size": MiB, "state": "active_allocated"}]}]
    state = device_states(segments)[0]
    assert (state.reserved_bytes, state.allocated_bytes, state.free_bytes) == (3 * MiB, MiB, MiB)


def test_adjacent_free_blocks_are_not_merged() -> None:
    segments = [{"device": 0, "total_size": 3 * MiB, "blocks": [
        {"size": MiB, "state": "inactive"}, {"size": 2 * MiB, "state": "inactive"}]}]
    state = device_states(segments)[0]
    assert (state.largest_free_bytes, state.fragmentation_ratio) == (2 * MiB, 1 / 3)


def test_a_device_with_counters_but_no_segments_reports_zeros() -> None:
    states = device_states([], {2: {"num_alloc_retries": 4, "num_ooms": 2}})
    assert states == {2: AllocatorState(2, 0, 0, 0, 0, 0.0, 0, 4, 2)}
    assert fragmentation_ratio(0, 0) == 0.0


@pytest.mark.parametrize(("index", "visible", "expected"), [
    (0, None, 0), (1, "", 1), (0, "3,5", 3), (1, "3, 5", 5), (2, "3,5", None),
    (0, "GPU-5b1c2f3e-8d4a-4e61-9f0b-2a7c1d9e4b30", None)])
def test_physical_gpu_follows_cuda_visible_devices(index: int, visible: str | None, expected: int | None) -> None:
    assert physical_gpu(index, visible) == expected


def test_snapshot_due_rules() -> None:
    assert snapshot_due(10.0, None, 30.0, False)
    assert not snapshot_due(20.0, 0.0, 30.0, False)
    assert snapshot_due(30.0, 0.0, 30.0, False)
    assert snapshot_due(SNAPSHOT_FLOOR_S, 0.0, 30.0, True)
    assert not snapshot_due(SNAPSHOT_FLOOR_S / 2, 0.0, 30.0, True)


def test_reporter_emits_one_event_per_device_and_rate_limits_the_snapshot() -> None:
    source, clock = RecordedSource("torch-snapshot-fragmented.json"), Clock()
    reporter = _reporter(source, clock, interval=10.0, snapshot_min_interval=30.0, cuda_visible_devices="4,6")
    events = reporter.tick()
    assert [(e.kind, e.gpu, e.attrs["scope"]) for e in events] == [
        ("mem_fragmentation", 4, "allocator"), ("mem_fragmentation", 6, "allocator")]
    assert dict(events[0].attrs) == {
        "scope": "allocator", "free_bytes": 7 * MiB, "largest_free_bytes": 2 * MiB,
        "fragmentation_ratio": round(5 / 7, 6), "reserved_bytes": 22 * MiB, "allocated_bytes": 14 * MiB + MiB // 2,
        "alloc_retries": 3, "segments": 2, "num_ooms": 1}
    assert events[0].gpu_uuid == "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
    assert events[0].source == "torch_allocator" and events[0].pid is not None
    clock.now += 10
    assert reporter.tick() == [] and source.snapshots == 1  # not due yet, counters unchanged
    source.counters[0]["num_alloc_retries"] = 4
    clock.now += 2
    assert len(reporter.tick()) == 2 and source.snapshots == 2  # retries rose: snapshot sooner
    stats = reporter.stats
    assert (stats.ticks, stats.snapshots, stats.events) == (3, 2, 4)
    assert 0 < stats.last_snapshot_s <= stats.max_snapshot_s <= stats.total_snapshot_s
    # The server is down: the events wait in the reporter's spool (plus the shipper's "down" status).
    spooled = [s.as_json() for s in reporter.shipper.spool.read_batch(100)]
    assert sum(1 for s in spooled if s["kind"] == "mem_fragmentation") == 4
    reporter.stop()


def test_start_runs_a_daemon_thread_and_stop_ends_it() -> None:
    source = RecordedSource("torch-snapshot-healthy.json")
    reporter = start(_dead_url(), interval=0.05, host="srv-2", source=source, snapshot_min_interval=0.0)
    assert reporter._thread.daemon
    deadline = 200
    while reporter.stats.ticks < 2 and deadline:
        deadline -= 1
        reporter._stop.wait(0.02)
    reporter.stop()
    assert not reporter._thread.is_alive()
    assert reporter.stats.ticks >= 2 and source.snapshots == reporter.stats.snapshots >= 2


@pytest.mark.skipif("torch" in sys.modules, reason="torch is loaded in this process")
def test_without_torch_the_source_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what an environment without PyTorch looks like
    with pytest.raises(ProbeError, match="PyTorch is not installed"):
        TorchCudaSource()


def test_the_agent_face_samples_through_one_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    source = RecordedSource("torch-snapshot-fragmented.json")
    probe = AllocatorProbe("srv-3", interval_s=1.0, snapshot_min_interval_s=0.0, source_factory=lambda: source)
    probe.start()
    (job,) = probe.jobs()
    events = job.run()
    assert [(e.kind, e.host, e.gpu) for e in events] == [("mem_fragmentation", "srv-3", 4),
                                                         ("mem_fragmentation", "srv-3", 6)]
    assert events[0].attrs["fragmentation_ratio"] == round(5 / 7, 6)
    probe.stop()
    with pytest.raises(ProbeError, match="not started"):
        job.run()
