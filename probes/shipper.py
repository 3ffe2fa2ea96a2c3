"""Ship spooled events to the server's ingest API in batches, backing off while it is away."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gpuslo.engine.events import Event
from gpuslo.probes.probe_api import status_event
from gpuslo.probes.spool import Spool, SpooledEvent

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/events"
# Every verdict is final: resending an item the server answered for can only earn the same answer.
FINAL_STATUSES = frozenset({"accepted", "duplicate", "conflict", "rejected"})
# Ingest answers a batch with per-item results under these statuses, even when none went in.
_RESULT_STATUSES = frozenset({200, 202, 409, 422})


@dataclass(frozen=True)
class ShipperConfig:
    """Where to send and how hard to try."""

    server: str
    token: str | None = None
    host: str = "localhost"
    batch_size: int = 500
    timeout_s: float = 10.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0


@dataclass(frozen=True)
class ShipResult:
    """What one attempt did: events sent and acknowledged, rejected ones, and the failure if any."""

    sent: int = 0
    acked: int = 0
    rejected: int = 0
    error: str | None = None
    skipped: bool = False


def backoff_delay(failures: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential back-off with "equal jitter": half fixed, half random, so agents do not retry in step."""
    ceiling = min(max_s, base_s * (2 ** max(0, failures - 1)))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


class Shipper:
    """Moves events from a spool to `POST {server}/api/v1/events`; acks only what the server answered for."""

    def __init__(self, spool: Spool, config: ShipperConfig, *, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic, client: httpx.Client | None = None):
        self.spool = spool
        self.config = config
        self._rng = rng or random.Random()
        self._clock = clock
        headers = {"Content-Type": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._client = client or httpx.Client(timeout=config.timeout_s, headers=headers)
        self._url = config.server.rstrip("/") + INGEST_PATH
        self._batch_size = config.batch_size
        self._failures = 0
        self._next_attempt = 0.0
        self._state = "up"
        self._reported_dropped = 0
        self._lock = threading.Lock()

    @property
    def failures(self) -> int:
        """Consecutive failed attempts (0 while the server answers)."""
        return self._failures

    @property
    def next_attempt_in(self) -> float:
        """Seconds until the next attempt is allowed (0 when not backing off)."""
        return max(0.0, self._next_attempt - self._clock())

    def ship_once(self) -> ShipResult:
        """Send one batch unless backing off; never raises for a server or network failure."""
        with self._lock:
            if self._clock() < self._next_attempt:
                return ShipResult(skipped=True)
            self._report_drops()
            batch = self.spool.read_batch(self._batch_size)
            if not batch:
                return ShipResult()
            result = self._send(batch)
            self._after(result)
            return result

    def drain(self, max_batches: int = 1000) -> int:
        """Ship batches until the spool is empty, an attempt fails, or `max_batches`; returns events acked."""
        acked = 0
        for _ in range(max_batches):
            result = self.ship_once()
            acked += result.acked
            if result.skipped or result.error or result.sent == 0:
                break
        return acked

    def close(self) -> None:
        self._client.close()

    def _send(self, batch: list[SpooledEvent]) -> ShipResult:
        body = "[" + ",".join(item.body for item in batch) + "]"
        try:
            response = self._client.post(self._url, content=body.encode())
        except httpx.HTTPError as exc:
            return ShipResult(sent=len(batch), error=f"{type(exc).__name__}: {exc}")
        if response.status_code == 413 and len(batch) > 1:
            # Too many events or bytes for the server's limits: halve the batch and try again at once.
            self._batch_size = max(1, len(batch) // 2)
            return ShipResult(sent=len(batch), error=None)
        results = _results(response) if response.status_code in _RESULT_STATUSES else None
        if results is None:
            return ShipResult(sent=len(batch), error=f"HTTP {response.status_code}: {response.text[:200]}")
        done, rejected = [], 0
        for index, status, problems in results:
            if 0 <= index < len(batch) and status in FINAL_STATUSES:
                done.append(batch[index].seq)
                if status in ("rejected", "conflict"):
                    rejected += 1
                    log.warning("server %s event %s: %s", status, batch[index].event_id, problems)
        self.spool.ack(done)
        return ShipResult(sent=len(batch), acked=len(done), rejected=rejected)

    def _after(self, result: ShipResult) -> None:
        if result.error is None:
            self._failures = 0
            self._next_attempt = 0.0
            self._set_state("up", "server answered")
            return
        self._failures += 1
        cfg = self.config
        delay = backoff_delay(self._failures, cfg.backoff_base_s, cfg.backoff_max_s, self._rng)
        self._next_attempt = self._clock() + delay
        log.warning("shipping to %s failed (%s); retry in %.1fs", self._url, result.error, delay)
        self._set_state("down", f"{result.error}; retry in {delay:.1f}s")

    def _set_state(self, state: str, detail: str) -> None:
        if state != self._state:
            self._state = state
            self.spool.append([self._status_event(state, detail)], reserved=True)

    def _report_drops(self) -> None:
        dropped = self.spool.dropped
        if dropped != self._reported_dropped:
            self._reported_dropped = dropped
            self.spool.append([self._status_event("degraded", f"spool full: {dropped} events dropped")],
                              reserved=True)

    def _status_event(self, state: str, detail: str) -> Event:
        return status_event(self.config.host, "shipper", state, detail, self.spool.dropped)


def _results(response: httpx.Response) -> list[tuple[int, str, object]] | None:
    """(index, status, problems) per item of an ingest answer, or None when the body is not one."""
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    out = []
    for item in data["results"]:
        if isinstance(item, dict) and isinstance(item.get("index"), int):
            out.append((item["index"], str(item.get("status")), item.get("problems")))
    return out
