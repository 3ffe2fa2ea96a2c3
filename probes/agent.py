"""The node agent: runs the configured probes on a scheduler, spools their events, and ships them."""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.kinds import PROBE_KINDS, ProbeBuilder
from gpuslo.probes.probe_api import Probe, ProbeJob, status_event
from gpuslo.probes.shipper import Shipper, ShipperConfig
from gpuslo.probes.spool import Spool

log = logging.getLogger(__name__)

_PROBE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SEVERITY = {"up": 0, "degraded": 1, "unavailable": 2}


@dataclass(frozen=True)
class ProbeSpec:
    """A probe as configured: `nvml`, or `logs:/var/log/train.log` (name, then an optional argument)."""

    name: str
    arg: str | None = None

    @classmethod
    def parse(cls, text: str) -> ProbeSpec:
        name, _, arg = text.partition(":")
        return cls(name.strip(), arg or None)

    def __str__(self) -> str:
        return f"{self.name}:{self.arg}" if self.arg else self.name


@dataclass(frozen=True)
class AgentConfig:
    server: str
    spool_path: Path
    host: str
    token: str | None = None
    probes: tuple[ProbeSpec, ...] = ()
    ship_interval_s: float = 2.0
    max_spool_events: int = 100_000
    batch_size: int = 500
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0


ProbeFactory = Callable[[ProbeSpec, str], Probe]


def load_probe(spec: ProbeSpec, host: str) -> Probe:
    """Build the probe of kind `spec.name` (probes/kinds.py) through its module's `build_probe(arg, host)`."""
    if not _PROBE_NAME.match(spec.name):
        raise ProbeError(f"{spec}: not a probe name (lower-case letters, digits and '_')")
    kind = PROBE_KINDS.get(spec.name)
    if kind is None:
        raise ProbeError(f"{spec.name}: no such probe in this build of gpuslo (probes: {', '.join(PROBE_KINDS)})")
    try:
        module = importlib.import_module(kind.module)
    except ModuleNotFoundError as exc:
        raise ProbeError(f"{spec.name}: a module it needs is not installed: {exc.name}") from exc
    build: ProbeBuilder | None = getattr(module, "build_probe", None)
    if build is None:
        raise ProbeError(f"{spec.name}: {kind.module} is not a probe (it has no build_probe)")
    return build(spec.arg, host)


class Agent:
    """Starts probes (an unavailable one is reported and skipped), samples them, and ships what they emit."""

    def __init__(self, config: AgentConfig, *, factory: ProbeFactory = load_probe):
        self.config = config
        self._factory = factory
        self.spool = Spool(config.spool_path, max_events=config.max_spool_events)
        self.shipper = Shipper(self.spool, ShipperConfig(
            server=config.server, token=config.token, host=config.host, batch_size=config.batch_size,
            backoff_base_s=config.backoff_base_s, backoff_max_s=config.backoff_max_s))
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.probes: list[Probe] = []
        self._states: dict[str, str] = {}
        self._jobs: dict[tuple[str, str], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start every probe that can run, schedule their jobs and the shipper; never raises ProbeError."""
        now = datetime.now(UTC)
        for spec in self.config.probes:
            probe = self._start_probe(spec)
            if probe is None:
                continue
            self.probes.append(probe)
            for job in probe.jobs():
                self.scheduler.add_job(self._run_job, "interval", seconds=job.interval_s, args=(probe, job),
                                       id=job.name, max_instances=1, coalesce=True, next_run_time=now)
        self.scheduler.add_job(self.shipper.drain, "interval", seconds=self.config.ship_interval_s,
                               id="shipper", max_instances=1, coalesce=True, next_run_time=now)
        self.scheduler.start()

    def stop(self) -> None:
        """Stop sampling, stop the probes, ship once more, and close the spool (what is left stays on disk)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        for probe in self.probes:
            try:
                probe.stop()
            except Exception:  # noqa: BLE001 - one probe failing to stop must not keep the others running
                log.exception("probe %s failed to stop", probe.name)
        self.shipper.drain(max_batches=20)
        self.shipper.close()
        self.spool.close()

    def probe_states(self) -> dict[str, str]:
        with self._lock:
            return dict(self._states)

    def _start_probe(self, spec: ProbeSpec) -> Probe | None:
        try:
            probe = self._factory(spec, self.config.host)
            probe.start()
        except ProbeError as exc:
            log.error("probe %s is unavailable: %s", spec, exc)
            self._report(spec.name, "unavailable", str(exc))
            return None
        self._report(probe.name, "up", f"started: {spec}")
        return probe

    def _run_job(self, probe: Probe, job: ProbeJob) -> None:
        try:
            events = job.run()
        except ProbeError as exc:
            log.error("probe %s job %s: %s", probe.name, job.name, exc)
            self._job_outcome(probe.name, job.name, "unavailable", f"{job.name}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a failing sampler is reported, the agent runs on
            log.exception("probe %s job %s failed", probe.name, job.name)
            self._job_outcome(probe.name, job.name, "degraded", f"{job.name}: {type(exc).__name__}: {exc}")
            return
        self.spool.append(self._enriched(probe, events))
        self._job_outcome(probe.name, job.name, "up", f"{job.name} ran")

    def _enriched(self, source: Probe, events: Sequence[Event]) -> Sequence[Event]:
        """Events of one probe through the others' `enrich` (the attribution probe adds `attribution.*` to each
        token_stall, waiting until its signals are in); a failing enricher leaves the event as it was."""
        for other in self.probes:
            enrich = getattr(other, "enrich_when_ready", None)
            if other is source or enrich is None:
                continue
            out = []
            for event in events:
                try:
                    out.append(enrich(event))
                except Exception:  # noqa: BLE001 - the event matters more than its attribution
                    log.exception("probe %s could not enrich event %s", other.name, event.id)
                    out.append(event)
            events = out
        return events

    def _job_outcome(self, probe: str, job: str, state: str, detail: str) -> None:
        """A probe is as bad as its worst job, so one failing job does not make its state flap."""
        with self._lock:
            self._jobs[(probe, job)] = (state, detail)
            worst = max((v for (p, _), v in self._jobs.items() if p == probe), key=lambda v: _SEVERITY[v[0]])
        self._report(probe, *worst)

    def _report(self, probe: str, state: str, detail: str) -> None:
        """Spool a probe_status event when a probe's state changes (not on every run)."""
        with self._lock:
            if self._states.get(probe) == state:
                return
            self._states[probe] = state
        self.spool.append([status_event(self.config.host, probe, state, detail, self.spool.dropped)],
                          reserved=True)


def probe_specs(texts: Sequence[str]) -> tuple[ProbeSpec, ...]:
    return tuple(ProbeSpec.parse(t) for t in texts)
