"""The attribution probe as the agent runs it: `--probe attribution:pid=P[+P...],cgroup=PATH[+PATH],port=N,gpu=G`.

It keeps the serving processes' signals (eBPF) and the GPU's samples (NVML) on CLOCK_MONOTONIC, and gives each
token_stall handed to `enrich` its `attribution.*` attributes. A stall is attributed once its end is `delay_s`
old, so the records covering it have crossed the ring buffer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.attribution.attribute import Attribution, attribute
from gpuslo.probes.attribution.bpf import check_comm
from gpuslo.probes.attribution.cgroups import Cgroup
from gpuslo.probes.attribution.clock import Alignment, remeasure
from gpuslo.probes.attribution.clusters import load, nearest
from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.attribution.gpu import GpuSampler
from gpuslo.probes.attribution.signals import GpuSample, Interval
from gpuslo.probes.ebpf.libraries import resolve
from gpuslo.probes.probe_api import ProbeJob

log = logging.getLogger(__name__)
CLOCK_EVERY_S = 10.0


@dataclass(frozen=True)
class AttributionConfig:
    """Which processes serve tokens (by pid, by cgroup v2 directory), their port (retransmits), the GPU to sample
    and how often."""

    pids: tuple[int, ...] = ()
    cgroups: tuple[str, ...] = ()  # absolute, or relative to the cgroup2 mount; their descendants count too
    port: int = 0
    gpu: int = 0
    hz: float = 20.0
    delay_s: float = 0.3
    libraries: tuple[str, ...] = ()
    nvml: bool = True
    comm: str = ""  # thread-name prefix of the serving threads ("" : every thread of the watched processes)
    clusters: str = ""  # a `gpuslo stalls cluster --model-out` file: stalls get `attribution.cluster`
    sendq: bool = True  # send-queue stalls and zero windows (sock_send_length, tcp_probe); sendq=0: not hooked

    @classmethod
    def parse(cls, arg: str | None) -> AttributionConfig:
        """`pid=12+34,cgroup=system.slice/vllm.service,comm=engine,port=8000,gpu=0,hz=20,lib=/usr/lib/libcuda.so.1,
        nvml=0`; every item optional."""
        fields: dict[str, object] = {}
        libs: list[str] = []
        for item in (p.strip() for p in (arg or "").split(",") if p.strip()):
            key, sep, value = item.partition("=")
            try:
                if not sep:
                    raise ValueError("expected key=value")
                if key == "pid":
                    fields["pids"] = tuple(int(p) for p in value.split("+"))
                elif key == "cgroup":
                    if not all(value.split("+")):
                        raise ValueError("an empty cgroup path")
                    fields["cgroups"] = tuple(value.split("+"))
                elif key in ("port", "gpu"):
                    fields[key] = int(value)
                elif key in ("hz", "delay_s"):
                    fields[key] = float(value)
                elif key == "lib":
                    libs.append(value)
                elif key in ("nvml", "sendq"):
                    fields[key] = value != "0"
                elif key == "clusters":
                    fields["clusters"] = value
                elif key == "comm":
                    check_comm(value)
                    fields["comm"] = value
                else:
                    raise ValueError("unknown key (pid, cgroup, port, gpu, hz, delay_s, lib, nvml, sendq, comm, "
                                     "clusters)")
            except ValueError as exc:
                raise ProbeError(f"attribution probe: '{item}': {exc}") from exc
        hz = float(fields.get("hz", 20.0))  # type: ignore[arg-type]
        if not 1 <= hz <= 100:
            raise ProbeError(f"attribution probe: hz={hz:g} is outside 1..100")
        return cls(libraries=tuple(libs), **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Inputs:
    """One stall's window on CLOCK_MONOTONIC and the signals around it (what a replay recomputes from)."""

    start_ns: int
    end_ns: int
    intervals: tuple[Interval, ...]
    samples: tuple[GpuSample, ...]
    clock_error_ns: int


class AttributionProbe:
    """start() loads the program and the sampler; watch(pid); enrich(stall) → the stall with its attribution."""

    name = "attribution"

    def __init__(self, config: AttributionConfig, host: str):
        self.config, self.host = config, host
        self.collector: Collector | None = None
        self.sampler: GpuSampler | None = None
        self.alignment: Alignment | None = None
        self.unavailable: list[str] = []
        self._clock_at = 0.0
        self._lock = threading.Lock()
        self.model = load(config.clusters) if config.clusters else None

    def start(self) -> None:
        self.alignment, self._clock_at = remeasure(None), time.monotonic()
        cgroups = tuple(Cgroup.resolve(c) for c in self.config.cgroups)
        collector = Collector(resolve(self.config.libraries), port=self.config.port, comm=self.config.comm,
                              cgroups=cgroups, send_stalls=self.config.sendq)
        try:
            collector.start()
        except ProbeError:
            collector.close()
            raise
        self.collector = collector
        for pid in self.config.pids:
            collector.watch(pid)
        if self.config.nvml:
            sampler = GpuSampler(self.config.gpu, self.config.hz)
            try:
                sampler.start()
                self.sampler = sampler
                self.unavailable += sampler.unavailable
            except Exception as exc:  # noqa: BLE001 - no NVML: attribution without GPU evidence
                self.unavailable.append(f"NVML: {exc}")
                log.warning("attribution probe: NVML unavailable: %s", exc)

    def watch(self, pid: int) -> None:
        if self.collector is None:
            raise ProbeError("attribution probe: not started")
        with self._lock:
            self.collector.watch(pid)

    def drain(self) -> Sequence[Event]:
        """Read the ring buffer; re-measure the clock offset every CLOCK_EVERY_S. Emits no events itself."""
        if self.collector is None:
            raise ProbeError("attribution probe: not started")
        with self._lock:
            self.collector.poll(0)
            if time.monotonic() - self._clock_at >= CLOCK_EVERY_S:
                self.alignment, self._clock_at = remeasure(self.alignment), time.monotonic()
                self.collector.refresh_threads()
        return ()

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("attribution-ring", 0.1, self.drain),)

    def window(self, stall: Event) -> tuple[int, int]:
        """The gap's [start, end] on CLOCK_MONOTONIC: a token_stall is timed at the token that ended it; a
        token_latency (timed at its request's start) says when its worst gap ended (`itl_max_at_ms`)."""
        assert self.alignment is not None
        end_wall = int(round(stall.time.timestamp() * 1e6)) * 1000
        if stall.kind == "token_latency":
            end_wall += int(float(stall.attrs["itl_max_at_ms"]) * 1e6)
            gap_ms = float(stall.attrs["itl_max_ms"])
        else:
            gap_ms = float(stall.attrs["gap_ms"])
        end = self.alignment.current.to_mono(end_wall)
        return end - int(gap_ms * 1e6), end

    @staticmethod
    def attributable(event: Event) -> bool:
        """A token_stall, or a request's token_latency that says where its worst gap was."""
        return event.kind == "token_stall" or (
            event.kind == "token_latency" and "itl_max_at_ms" in event.attrs and "itl_max_ms" in event.attrs)

    def ready(self, stall: Event) -> bool:
        """Whether the stall ended long enough ago for its signals to be in."""
        return time.monotonic_ns() >= self.window(stall)[1] + int(self.config.delay_s * 1e9)

    def inputs(self, stall: Event) -> Inputs:
        """What the stall's attribution is computed from: its window, the intervals from 1 s before it (with the
        allocation bursts and on-CPU spans still open in the kernel) and the GPU samples."""
        if self.collector is None or self.alignment is None:
            raise ProbeError("attribution probe: not started")
        self.drain()
        start, end = self.window(stall)
        with self._lock:
            intervals = [i for i in self.collector.intervals if i.end_ns > start - 1_000_000_000]
            intervals += self.collector.open_bursts() + self.collector.open_oncpu()
        samples = self.sampler.window(start, end + 100_000_000) if self.sampler else []
        return Inputs(start, end, tuple(intervals), tuple(samples), self.alignment.error_ns(end))

    def attribution(self, stall: Event, inputs: Inputs | None = None) -> Attribution:
        if self.collector is None:
            raise ProbeError("attribution probe: not started")
        i = inputs or self.inputs(stall)
        with self._lock:
            own = self.collector.serving_pids()
        return attribute(i.start_ns, i.end_ns, i.intervals, i.samples, own_pids=own,
                         server_observed=bool(own or self.collector.cgroups), clock_error_ns=i.clock_error_ns)

    def enrich(self, stall: Event, inputs: Inputs | None = None) -> Event:
        """The token_stall (or the request's worst gap, on its token_latency) with its `attribution.*` attributes;
        other kinds pass unchanged."""
        if not self.attributable(stall):
            return stall
        found = self.attribution(stall, inputs)
        enriched = replace(stall, attrs=MappingProxyType({**stall.attrs, **found.attrs()}))
        cluster = nearest(enriched.attrs, self.model) if self.model and stall.kind == "token_stall" else None
        if cluster is not None:
            enriched = replace(enriched, attrs=MappingProxyType({**enriched.attrs, "attribution.cluster": cluster}))
        return enriched

    def enrich_when_ready(self, event: Event, timeout_s: float = 2.0) -> Event:
        """What the agent calls for every other probe's event: a token_stall or token_latency waits (at most
        timeout_s) until its signals are in, then gets its attribution; other kinds pass unchanged."""
        if not self.attributable(event) or self.collector is None:
            return event
        deadline = time.monotonic() + timeout_s
        while not self.ready(event) and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.enrich(event)

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.collector is not None:
            self.collector.close()
            self.collector = None


def build_probe(arg: str | None, host: str) -> AttributionProbe:
    return AttributionProbe(AttributionConfig.parse(arg), host)
