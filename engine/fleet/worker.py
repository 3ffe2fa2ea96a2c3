"""`gpuslo worker`: claim a fair share of the partitions, replay each claimed one, then evaluate and store what
the stream brings; give partitions back when workers join, take them over when workers leave."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import orjson

from gpuslo.engine.alerts import load_alerts_config
from gpuslo.engine.config import Settings
from gpuslo.engine.errors import ConfigError, GpusloError
from gpuslo.engine.explain import SummaryRenderer
from gpuslo.engine.fleet.bus import Bus, StreamSettings
from gpuslo.engine.fleet.ownership import Ownership, assign, weights
from gpuslo.engine.fleet.partition import PartitionRunner, PartitionSettings, StoreAbandoned, store_batches
from gpuslo.engine.fleet.routing import Partition, RoutingTable, rulebooks_for
from gpuslo.engine.fleet.slis import burn_rule_ids
from gpuslo.engine.fleet.step_events import StepEvents
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.services.changes import Notifier
from gpuslo.engine.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker partitions, rebalances and reads (every worker of a fleet uses the same `partitions`)."""

    partitions: int = 16
    rebalance_s: float = 1.0
    fetch_timeout_s: float = 0.25
    # Messages one step fetches across all its partitions at most (each gets its share, at most `batch`): a
    # worker owning 192 partitions asked each for `batch` at once, more than the 64 MB the NATS server lets a
    # client fall behind (it cut the connection: docs/notes/h19e.md).
    fetch_messages: int = 4096
    stream: StreamSettings = field(default_factory=StreamSettings)
    partition: PartitionSettings = field(default_factory=PartitionSettings)
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")


class Worker:
    """One engine worker of a fleet."""

    def __init__(self, settings: Settings, bus: Bus, database: Database, fleet: WorkerSettings,
                 metrics: Metrics | None = None):
        self._settings = settings
        self._bus = bus
        self._database = database
        # The replay covers the stream's duplicate window, so that a partition remembers every id it may see again.
        self._fleet = replace(fleet, partition=replace(fleet.partition,
                                                       duplicate_window_s=fleet.stream.duplicate_window_s))
        self.metrics = metrics or Metrics()
        self.rulebooks = _load(settings)
        self.table = RoutingTable.of(self.rulebooks, fleet.partitions)
        self._burn_rules = burn_rule_ids(self.rulebooks)
        self._stop = threading.Event()  # run()'s: a batch that cannot be stored is abandoned when it is set
        self._partitions = {p.number: p for p in self.table.all_partitions()}
        alerts = load_alerts_config(settings.alerts_config) if settings.alerts_config else None
        self._notify = Notifier(alerts, settings.public_url)  # the outbox rows, as the embedded core writes them
        self.ownership = Ownership(database, fleet.name)
        self.runners: dict[int, PartitionRunner] = {}
        self._renderer = SummaryRenderer()  # the partitions' (one thread): each summary template compiles once
        self.handled = 0
        self._waited = 0  # rebalances skipped waiting for the loads of the current members (_loads)

    def prepare(self) -> None:
        """Create the stream and bucket if missing and publish this worker's routing table."""
        self._bus.ensure_stream(self._fleet.stream)
        self._bus.put_routes(self.table)

    def run(self, stop: threading.Event) -> None:
        """Work until `stop` is set; partitions are given back (locks released) on the way out. A batch that
        cannot be stored when `stop` is set is abandoned: its partitions' next owner reads it again."""
        self._stop = stop
        next_rebalance = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() >= next_rebalance:
                    self.rebalance()
                    next_rebalance = time.monotonic() + self._fleet.rebalance_s
                self.step()
        except StoreAbandoned as exc:
            log.warning("worker %s: %s", self._fleet.name, exc)
        finally:
            for number in list(self.runners):
                self._drop(number)
            self.ownership.leave()

    def step(self) -> int:
        """One fetch across every owned partition and the handling of what came; returns the events evaluated."""
        runners = list(self.runners.values())
        if not runners:
            time.sleep(self._fleet.fetch_timeout_s)
            return 0
        readers = [r.reader for r in runners if r.reader is not None]
        limit = max(1, min(self._fleet.partition.batch, self._fleet.fetch_messages // max(1, len(readers))))
        batches = self._bus.take_all(readers, limit, self._fleet.fetch_timeout_s)
        built = StepEvents()  # an event the step fetched for several partitions is built once
        pending = [p for p in (runner.evaluate(delivered, built)
                               for runner, delivered in zip(runners, batches, strict=True)) if p is not None]
        for runner in store_batches(self._database, pending, self._fleet.name, self._notify, self.metrics,
                                    burn_rules=self._burn_rules, stop=self._stop):
            log.warning("worker %s: partition %s was written by another owner; giving it up", self._fleet.name,
                        runner.partition.name)
            self._drop(runner.partition.number, unlock=True)
        handled = sum(p.evaluated for p in pending)
        self.handled += handled
        return handled

    def rebalance(self) -> None:
        try:
            if not self.ownership.connected:
                self.ownership.join()
            loads = self._loads()
            if loads is _WAIT:
                return
            claimed, released = self.ownership.rebalance(sorted(self._partitions), loads)
        except GpusloError as exc:
            log.error("worker %s: lost the lock connection (%s); dropping every partition", self._fleet.name, exc)
            for number in list(self.runners):
                self._drop(number)
            return
        for number in released:
            self._drop(number)
        for number in sorted(claimed):
            self._claim(self._partitions[number])
        if claimed or released:
            log.info("worker %s: claimed %s, released %s; owns %d of %d", self._fleet.name,
                     _names(self._partitions, claimed), _names(self._partitions, released), len(self.runners),
                     len(self._partitions))

    def _loads(self) -> dict[int, int] | None:
        """The loads every worker shares the partitions by (ownership.assign): those one worker, the member of
        the lowest lock key, read from the stream (messages per partition) and wrote to the fleet's KV bucket.
        It writes them again only when the members changed or when, under the stream's loads now, the
        assignment they give is unbalanced (busiest member over 1.25 × the mean) and fresh ones do much better:
        every worker reads the same loads, so partitions move only then, never back and forth on counts that
        grow between two workers' reads. None if they cannot be read (the shares are then by count)."""
        try:
            keys = self.ownership.member_keys()
            raw = self._bus.loads()
            published = orjson.loads(raw) if raw else None
            if keys and keys[0] == self.ownership.key:
                counts = self._bus.subject_counts()
                fresh = {number: counts.get(p.subject, 0) for number, p in self._partitions.items()}
                if published is None or published["members"] != keys or _rebalance_pays(
                        sorted(self._partitions), {int(n): v for n, v in published["loads"].items()}, fresh, keys):
                    published = {"members": keys, "loads": fresh}
                    self._bus.put_loads(orjson.dumps(published, option=orjson.OPT_NON_STR_KEYS))
                    log.info("worker %s: wrote the partitions' loads for %d members", self._fleet.name, len(keys))
        except (GpusloError, ValueError, KeyError, TypeError) as exc:
            log.warning("worker %s: the partitions' loads (%s); sharing them by count", self._fleet.name, exc)
            return None
        if published is None:
            return None
        if published["members"] != keys and self._waited < 5:  # the leader writes those of these members soon
            self._waited += 1
            return _WAIT
        self._waited = 0
        return {int(n): int(v) for n, v in published["loads"].items()}

    def _claim(self, partition: Partition) -> None:
        runner = PartitionRunner(partition, rulebooks_for(self.rulebooks, partition.space), bus=self._bus,
                                 database=self._database, owner=self._fleet.name, notify=self._notify,
                                 metrics=self.metrics, settings=self._fleet.partition, renderer=self._renderer)
        try:
            runner.open()
        except GpusloError as exc:
            log.error("worker %s: opening partition %s failed: %s", self._fleet.name, partition.name, exc)
            runner.close()
            self.ownership.release(partition.number)
            return
        self.runners[partition.number] = runner

    def _drop(self, number: int, *, unlock: bool = False) -> None:
        runner = self.runners.pop(number, None)
        if runner is not None:
            runner.close()
        if unlock:
            try:
                self.ownership.release(number)
            except GpusloError:
                pass  # the lock connection is gone: so is the lock


def _load(settings: Settings) -> tuple[Rulebook, ...]:
    rulebooks, problems = load_directory(settings.rules_dir, settings.rules_overrides_dir)
    for problem in problems:
        log.error("rulebook problem: %s", problem)
    if problems:
        raise ConfigError(f"fleet worker: {len(problems)} rulebook problem(s) in {settings.rules_dir}; every "
                          f"worker must run the same good rulebooks (the first: {problems[0]})")
    return rulebooks


_WAIT: dict[int, int] = {}  # _loads: skip this rebalance


def _balance(partitions: list[int], assigned_by: dict[int, int], loads: dict[int, int], keys: list[int]) -> float:
    """Mean over the busiest member's load (under `loads`) of the assignment `assigned_by` gives."""
    shares = assign(partitions, weights(partitions, assigned_by), keys)
    per: list[int] = [sum(loads.get(n, 0) for n in mine) for mine in shares.values()]
    busiest = max(per, default=0)
    return sum(per) / len(per) / busiest if busiest else 1.0


def _rebalance_pays(partitions: list[int], published: dict[int, int], fresh: dict[int, int], keys: list[int]) -> bool:
    now = _balance(partitions, published, fresh, keys)
    return now < 0.8 and _balance(partitions, fresh, fresh, keys) > now + 0.1


def _names(partitions: dict[int, Partition], numbers: Sequence[int] | set[int]) -> str:
    return ", ".join(partitions[n].name for n in sorted(numbers)) or "none"
