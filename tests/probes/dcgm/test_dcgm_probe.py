"""The dcgm-exporter probe scraping dcgm-exporter's text format from a real HTTP server on 127.0.0.1 (the
exporter itself needs a GPU and DCGM; its output format is reproduced from dcgm-exporter's default counters)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.agent import ProbeSpec, load_probe
from gpuslo.probes.dcgm import parse_samples

LABELS = 'gpu="{gpu}",UUID="GPU-{gpu}abc",pci_bus_id="00000000:{gpu}B:00.0",device="nvidia{gpu}",' \
         'modelName="NVIDIA H200",Hostname="gpu-node-7",DCGM_FI_DRIVER_VERSION="580.159.04"'


def page(per_gpu: dict[int, dict[str, float]]) -> str:
    lines = []
    for name, kind in (("DCGM_FI_DEV_XID_ERRORS", "gauge"), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter"),
                       ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter"), ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge"),
                       ("DCGM_FI_DEV_FB_USED", "gauge"), ("DCGM_FI_DEV_FB_FREE", "gauge"),
                       ("DCGM_FI_PROF_SM_ACTIVE", "gauge"), ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge")):
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} {kind}"]
        for gpu, values in per_gpu.items():
            if name in values:
                lines.append(f"{name}{{{LABELS.format(gpu=gpu)}}} {values[name]}")
    return "\n".join(lines) + "\n"


HEALTHY = {"DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 5,
           "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 1, "DCGM_FI_DEV_FB_USED": 80_000, "DCGM_FI_DEV_FB_FREE": 63_000,
           "DCGM_FI_PROF_SM_ACTIVE": 0.42, "DCGM_FI_PROF_DRAM_ACTIVE": 0.3}


@pytest.fixture
def exporter() -> Iterator[Any]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = server.text.encode()  # type: ignore[attr-defined]
            self.send_response(server.status)  # type: ignore[attr-defined]
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.text, server.status = page({0: HEALTHY, 1: HEALTHY}), 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/metrics"  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_parse_reads_every_gpu_with_its_labels() -> None:
    samples = parse_samples(page({0: HEALTHY, 3: {**HEALTHY, "DCGM_FI_DEV_XID_ERRORS": 79}}))
    assert sorted(samples) == [0, 3] and samples[3].get("DCGM_FI_DEV_XID_ERRORS") == 79
    assert samples[0].host == "gpu-node-7" and samples[0].uuid == "GPU-0abc"


def test_changes_become_events_and_a_steady_gpu_says_nothing(exporter) -> None:
    probe = load_probe(ProbeSpec.parse(f"dcgm:{exporter.url}"), "fallback-host")
    probe.start()
    try:
        (job,) = probe.jobs()
        assert job.run() == []  # nothing changed since the baseline
        exporter.text = page({0: HEALTHY, 1: {**HEALTHY, "DCGM_FI_DEV_XID_ERRORS": 79,
                                               "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2,
                                               "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x40 | 1,
                                               "DCGM_FI_DEV_FB_USED": 142_000, "DCGM_FI_DEV_FB_FREE": 1_000}})
        events = job.run()
        again = job.run()  # the same values: no new events
    finally:
        probe.stop()
    by_kind = {(e.kind, e.attrs.get("signal")): e for e in events}
    assert set(by_kind) == {("gpu_xid", None), ("gpu_health", "ecc_dbe"), ("gpu_health", "throttle"),
                            ("gpu_health", "fb_low")}
    assert all(e.gpu == 1 and e.host == "gpu-node-7" and e.gpu_uuid == "GPU-1abc" for e in events)
    assert by_kind["gpu_xid", None].attrs["xid"] == 79
    dbe = by_kind["gpu_health", "ecc_dbe"]
    assert dbe.attrs["value"] == 2 and dbe.attrs["fb_free_bytes"] == 1_000 * 2**20 and dbe.attrs["sm_active"] == 0.42
    assert by_kind["gpu_health", "throttle"].attrs["detail"] == "hw_thermal"
    assert again == []


def test_a_failed_scrape_is_a_down_status_and_a_bad_url_an_error(exporter) -> None:
    probe = load_probe(ProbeSpec.parse(f"dcgm:{exporter.url}"), "node-1")
    probe.start()
    exporter.status = 503
    try:
        (event,) = probe.jobs()[0].run()
    finally:
        probe.stop()
    assert event.kind == "probe_status" and event.attrs["state"] == "down"
    with pytest.raises(ProbeError, match="http:// URL"):
        load_probe(ProbeSpec.parse("dcgm:node:9400"), "node-1")
    with pytest.raises(ProbeError, match="cannot scrape"):
        load_probe(ProbeSpec.parse("dcgm:http://127.0.0.1:1/metrics"), "node-1").start()
