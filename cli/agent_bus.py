"""`gpuslo agent --bus`: the agent's shipper publishing to NATS JetStream instead of posting to a server.

The spool is the same: an event leaves it only once JetStream acknowledged every copy of it; a failed publish
keeps the whole batch and the shipper's back-off applies (ids make the re-publish idempotent)."""

from __future__ import annotations

import logging

from gpuslo.engine.errors import EventError, GpusloError
from gpuslo.engine.events import parse_event
from gpuslo.engine.fleet.publish import Publisher
from gpuslo.probes.shipper import Shipper, ShipperConfig, ShipResult
from gpuslo.probes.spool import Spool, SpooledEvent

log = logging.getLogger(__name__)


class BusShipper(Shipper):
    """A Shipper whose transport is the fleet's stream."""

    def __init__(self, spool: Spool, config: ShipperConfig, publisher: Publisher):
        super().__init__(spool, config)
        self._publisher = publisher

    def _send(self, batch: list[SpooledEvent]) -> ShipResult:
        events, done, rejected = [], [], 0
        for item in batch:
            try:
                events.append(parse_event(item.as_json()))
            except EventError as exc:  # never publish what ingest would refuse; drop it with its reason
                log.warning("spooled event %s is not valid: %s", item.event_id, exc)
                done.append(item.seq)
                rejected += 1
                continue
            done.append(item.seq)
        try:
            self._publisher.publish(events)
        except GpusloError as exc:
            return ShipResult(sent=len(batch), error=str(exc))
        self.spool.ack(done)
        return ShipResult(sent=len(batch), acked=len(done), rejected=rejected)
