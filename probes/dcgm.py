"""dcgm-exporter scrape probe: `--probe dcgm[:URL]` (default http://127.0.0.1:9400/metrics).

Scrapes NVIDIA's dcgm-exporter and turns changes and thresholds into events: a new Xid value → `gpu_xid`; an
increase of double-bit (or many single-bit) ECC errors, clock-throttle reasons of the hardware kind, row-remap
failures and a nearly full frame buffer → `gpu_health`, each with the GPU's frame-buffer and profiling fields
(SM active, DRAM active) of the same scrape when the exporter has them. The first scrape is the baseline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.probe_api import ProbeJob, new_event_id, status_event

DEFAULT_URL = "http://127.0.0.1:9400/metrics"
MIB = 2**20
# Clock event (throttle) reason bits that mean the hardware slowed the GPU down, not the application idling.
THROTTLE_BITS: Mapping[int, str] = MappingProxyType({
    0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"})
SBE_BURST = 100  # single-bit errors per scrape that are worth telling on their own
FB_LOW_RATIO = 0.02  # free frame buffer below 2 % of the total


@dataclass(frozen=True)
class GpuSample:
    """One GPU's fields in one scrape (absent fields are None)."""

    gpu: int
    host: str | None
    uuid: str | None
    values: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, name: str) -> float | None:
        return self.values.get(name)


FIELDS = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
          "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
          "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
          "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def parse_samples(text: str) -> dict[int, GpuSample]:
    """GPU index → its fields, from dcgm-exporter's text (labels `gpu`, `UUID`, `Hostname`)."""
    found: dict[int, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # prometheus_client names counter samples `<family>_total`, whatever the exporter wrote.
            name = family.name if sample.name == f"{family.name}_total" else sample.name
            if name not in FIELDS or not str(sample.labels.get("gpu", "")).isdigit():
                continue
            gpu = int(sample.labels["gpu"])
            entry = found.setdefault(gpu, {"host": sample.labels.get("Hostname"), "uuid": sample.labels.get("UUID"),
                                           "values": {}})
            entry["values"][name] = float(sample.value)
    return {gpu: GpuSample(gpu, e["host"], e["uuid"], MappingProxyType(e["values"])) for gpu, e in found.items()}


def _context(sample: GpuSample) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name, attr, scale in (("DCGM_FI_DEV_FB_USED", "fb_used_bytes", MIB),
                              ("DCGM_FI_DEV_FB_FREE", "fb_free_bytes", MIB),
                              ("DCGM_FI_PROF_SM_ACTIVE", "sm_active", 1),
                              ("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active", 1)):
        value = sample.get(name)
        if value is not None and value >= 0:
            attrs[attr] = int(value * scale) if scale != 1 else round(min(value, 1.0), 4)
    return attrs


def _throttle(sample: GpuSample) -> int:
    value = sample.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    if value is None:
        value = sample.get("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
    return int(value) if value is not None and value >= 0 else 0


def _increase(now: GpuSample, before: GpuSample, name: str) -> float:
    current, previous = now.get(name), before.get(name)
    if current is None or previous is None or current < previous:  # absent, or a counter reset
        return 0.0
    return current - previous


def changes(now: GpuSample, before: GpuSample) -> list[tuple[str, dict[str, Any]]]:
    """(kind, attrs) of what changed between two scrapes of one GPU."""
    out: list[tuple[str, dict[str, Any]]] = []
    xid = now.get("DCGM_FI_DEV_XID_ERRORS")
    if xid is not None and 0 < xid < 2**16 and xid != before.get("DCGM_FI_DEV_XID_ERRORS"):
        out.append(("gpu_xid", {"xid": int(xid), "detail": "dcgm-exporter DCGM_FI_DEV_XID_ERRORS"}))
    context = _context(now)
    dbe = _increase(now, before, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    if dbe > 0:
        out.append(("gpu_health", {"signal": "ecc_dbe", "value": dbe, **context}))
    sbe = _increase(now, before, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    if sbe >= SBE_BURST:
        out.append(("gpu_health", {"signal": "ecc_sbe", "value": sbe, **context}))
    reasons = [name for bit, name in THROTTLE_BITS.items() if _throttle(now) & bit]
    if reasons and not all(_throttle(before) & bit for bit, name in THROTTLE_BITS.items() if name in reasons):
        out.append(("gpu_health", {"signal": "throttle", "value": _throttle(now), "detail": ",".join(reasons),
                                   **context}))
    if (now.get("DCGM_FI_DEV_ROW_REMAP_FAILURE") or 0) > 0 and not before.get("DCGM_FI_DEV_ROW_REMAP_FAILURE"):
        out.append(("gpu_health", {"signal": "row_remap_failure", "value": 1, **context}))
    used, free = now.get("DCGM_FI_DEV_FB_USED"), now.get("DCGM_FI_DEV_FB_FREE")
    was_free = before.get("DCGM_FI_DEV_FB_FREE")
    if used is not None and free is not None and used + free > 0 and free / (used + free) < FB_LOW_RATIO:
        previous_total = (before.get("DCGM_FI_DEV_FB_USED") or 0) + (was_free or 0)
        if was_free is None or previous_total <= 0 or was_free / previous_total >= FB_LOW_RATIO:
            out.append(("gpu_health", {"signal": "fb_low", "value": round(free / (used + free), 4), **context}))
    return out


class DcgmExporterProbe:
    """Scrapes dcgm-exporter every `interval_s`; a failed scrape is a `probe_status` down event."""

    name = "dcgm"

    def __init__(self, url: str, host: str, *, interval_s: float = 10.0, timeout_s: float = 5.0,
                 client: httpx.Client | None = None):
        self.url, self.host, self.interval_s, self.timeout_s = url, host, interval_s, timeout_s
        self._client = client or httpx.Client(trust_env=False)
        self._previous: dict[int, GpuSample] | None = None

    def start(self) -> None:
        try:
            self._previous = parse_samples(self._fetch())
        except (httpx.HTTPError, ValueError) as exc:
            raise ProbeError(f"dcgm: cannot scrape {self.url}: {type(exc).__name__}: {exc}") from exc

    def _fetch(self) -> str:
        response = self._client.get(self.url, timeout=self.timeout_s)
        response.raise_for_status()
        return response.text

    def observe(self, text: str, when: datetime | None = None) -> list[Event]:
        """The events of a scrape compared with the previous one (none for the first)."""
        current, previous = parse_samples(text), self._previous
        self._previous = current
        if previous is None:
            return []
        moment = (when or datetime.now(UTC)).isoformat(timespec="microseconds").replace("+00:00", "Z")
        events = []
        for gpu, sample in sorted(current.items()):
            before = previous.get(gpu)
            if before is None:
                continue
            for kind, attrs in changes(sample, before):
                body = {"id": new_event_id("dcgm"), "kind": kind, "time": moment, "host": sample.host or self.host,
                        "gpu": gpu, "source": "dcgm", "attrs": attrs}
                if sample.uuid:
                    body["gpu_uuid"] = sample.uuid[:64]
                events.append(parse_event(body))
        return events

    def scrape_once(self) -> Sequence[Event]:
        started = time.time()
        try:
            text = self._fetch()
        except httpx.HTTPError as exc:
            return [status_event(self.host, self.name, "down", f"scrape {self.url} failed: {type(exc).__name__}")]
        return self.observe(text, datetime.fromtimestamp(started, UTC))

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("dcgm-scrape", self.interval_s, self.scrape_once),)

    def stop(self) -> None:
        self._client.close()


def build_probe(arg: str | None, host: str) -> DcgmExporterProbe:
    """The agent's entry point: `--probe dcgm` or `--probe dcgm:http://node:9400/metrics`."""
    url = arg or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        raise ProbeError(f"dcgm: expected the exporter's http:// URL, got {url!r}")
    return DcgmExporterProbe(url, host)
