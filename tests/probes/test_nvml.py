"""NVML probe: the missing-library path for real, and event building from recorded NVML answers.

This machine has no NVIDIA driver, so the live NVML calls (PynvmlBackend past nvmlInit) run only in the GPU
run (scripts/gpu-e2e.sh on the H200), which also records fixtures with `python -m gpuslo.probes.nvml`.
"""

from __future__ import annotations

import json

import pytest
from nvml_recording import RecordedNvml

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import parse_event
from gpuslo.probes.nvml import NvmlProbe, PynvmlBackend, XidRecord, build_probe, recording


def _nvml_present() -> bool:
    try:
        PynvmlBackend().open()
    except ProbeError:
        return False
    return True


def _started() -> tuple[NvmlProbe, RecordedNvml]:
    backend = RecordedNvml.load("nvml-two-gpus.json")
    probe = NvmlProbe(backend, host="gpu-node-7")
    probe.start()
    return probe, backend


@pytest.mark.skipif(_nvml_present(), reason="NVML is present here; the missing-library path needs no driver")
def test_missing_nvml_is_a_probe_error_that_says_what_to_do() -> None:
    probe = build_probe(None, "node-a")
    with pytest.raises(ProbeError) as caught:
        probe.start()
    message = str(caught.value)
    assert "libnvidia-ml.so.1" in message and "no NVIDIA driver" in message
    assert "leave the nvml probe out" in message


def test_the_probe_takes_no_argument() -> None:
    with pytest.raises(ProbeError, match="takes no argument"):
        build_probe("/dev/nvidia0", "node-a")


def test_inventory_and_envelopes_come_from_nvml() -> None:
    probe, backend = _started()
    assert backend.opened and backend.watching
    inventory = probe.inventory
    assert inventory.driver_version == "580.82.07"
    assert [(d.index, d.name, d.pci_bus) for d in inventory.devices] == [
        (0, "NVIDIA H200", "00000000:19:00.0"), (1, "NVIDIA H200", "00000000:3B:00.0")]
    assert probe.envelope(1) == {"gpu": 1, "gpu_uuid": "GPU-0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"}
    assert probe.envelope(9) == {"gpu": 9, "gpu_uuid": None}
    probe.stop()
    assert backend.closed


def test_xids_become_gpu_xid_events_with_the_device_envelope() -> None:
    probe, _ = _started()
    events = probe.poll_xids(timeout_ms=0)
    assert [(e.kind, e.gpu, e.attrs["xid"], e.attrs["pci_bus"]) for e in events] == [
        ("gpu_xid", 1, 79, "0000:3b:00"), ("gpu_xid", 0, 13, "0000:19:00"),
        ("gpu_xid", 0, 4000, "0000:19:00")]
    assert events[0].gpu_uuid == "GPU-0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
    assert events[0].attrs["detail"] == "Xid 79 on NVIDIA H200: GPU has fallen off the bus"
    assert events[2].attrs["detail"] == "Xid 4000 on NVIDIA H200: see NVIDIA's Xid catalogue"
    assert {e.host for e in events} == {"gpu-node-7"} and {e.source for e in events} == {"nvml"}
    assert len({e.id for e in events}) == 3
    for event in events:  # what the server will parse
        assert parse_event(json.loads(json.dumps(event.to_dict()))) == event
    assert probe.poll_xids() == []


def test_poll_stops_at_its_limit() -> None:
    probe, _ = _started()
    assert len(probe.poll_xids(limit=2)) == 2
    assert len(probe.poll_xids(limit=2)) == 1


def test_an_xid_on_an_unknown_device_keeps_its_index() -> None:
    probe, _ = _started()
    event = probe.xid_event(XidRecord(device_index=5, xid=48))
    assert (event.gpu, event.gpu_uuid, event.attrs["pci_bus"]) == (5, None, "")
    assert event.attrs["detail"] == "Xid 48 on GPU 5: double-bit ECC error"


def test_memory_samples_are_kept_and_map_processes_to_gpus() -> None:
    probe, _ = _started()
    assert probe.memory == ()
    nvml_jobs = {job.name: job for job in probe.jobs()}
    assert nvml_jobs["nvml-memory"].run() == ()  # samples, not events: no honest FR for device memory
    first, second = probe.memory
    assert (first.used_bytes, first.free_bytes, first.total_bytes) == (84825604096, 65929216000, 150754820096)
    assert second.processes == ()
    assert probe.gpu_of_pid(4242) == 0 and probe.gpu_of_pid(1) is None


def test_recording_writes_what_the_replay_reads() -> None:
    backend = RecordedNvml.load("nvml-two-gpus.json")
    again = json.loads(json.dumps(recording(backend)))
    assert again["devices"] == backend.data["devices"] and again["memory"] == backend.data["memory"]
    assert backend.closed


@pytest.mark.skipif(not _nvml_present(), reason="no NVIDIA driver on this machine; the GPU run covers live NVML")
def test_live_nvml_inventory() -> None:
    probe = build_probe(None, "live")
    probe.start()
    try:
        assert probe.inventory.devices and probe.inventory.driver_version
        assert all(d.uuid.startswith("GPU-") for d in probe.inventory.devices)
        assert len(probe.sample_memory()) == len(probe.inventory.devices)
    finally:
        probe.stop()
