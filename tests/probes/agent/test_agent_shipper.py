"""The shipper against a real HTTP server on 127.0.0.1: acks, back-off, rejections, drop reports."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
from agent_ingest_server import IngestServer

from gpuslo.probes.shipper import Shipper, ShipperConfig, backoff_delay
from gpuslo.probes.spool import Spool


class FakeClock:
    """Monotonic time the test moves by hand, so back-off is checked without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _shipper(spool: Spool, url: str, clock: FakeClock, **config) -> Shipper:
    return Shipper(spool, ShipperConfig(server=url, host="node-a", timeout_s=2.0, **config),
                   rng=random.Random(7), clock=clock)


def _statuses(log_ids: list[str], ingest: IngestServer) -> list[dict]:
    return [json.loads(ingest.log.stored[i]) for i in log_ids if i.startswith("status-")]


def test_ships_a_json_array_with_the_bearer_token_and_acks(tmp_path: Path, make_event, ingest) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append([make_event() for _ in range(5)])
    shipper = _shipper(spool, ingest.url, FakeClock(), token="s3cret", batch_size=2)
    assert shipper.drain() == 5
    assert len(spool) == 0
    first = ingest.log.requests[0]
    assert first["path"] == "/api/v1/events"
    assert first["headers"]["Authorization"] == "Bearer s3cret"
    assert first["headers"]["Content-Type"] == "application/json"
    assert [e["id"] for e in json.loads(first["body"])] == ["ev-1", "ev-2"]
    assert ingest.log.received_ids == ["ev-1", "ev-2", "ev-3", "ev-4", "ev-5"]


def test_no_token_sends_no_authorization(tmp_path: Path, make_event, ingest) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append([make_event()])
    _shipper(spool, ingest.url, FakeClock()).drain()
    assert "Authorization" not in ingest.log.requests[0]["headers"]


def test_backs_off_while_the_server_answers_500_then_delivers(tmp_path: Path, make_event) -> None:
    server = IngestServer(mode="fail")
    try:
        spool = Spool(tmp_path / "s.db")
        spool.append([make_event() for _ in range(3)])
        clock = FakeClock()
        shipper = _shipper(spool, server.url, clock, backoff_base_s=1.0, backoff_max_s=8.0)
        delays = []
        for _ in range(5):
            result = shipper.ship_once()
            assert result.error and "HTTP 500" in result.error and result.acked == 0
            assert shipper.ship_once().skipped  # still backing off: no request sent
            delays.append(shipper.next_attempt_in)
            clock.now += shipper.next_attempt_in
        assert len(server.log.requests) == 5
        # Equal jitter: the n-th delay lies in [c/2, c] with c = min(8, 2**(n-1)).
        for n, delay in enumerate(delays, start=1):
            ceiling = min(8.0, 2.0 ** (n - 1))
            assert ceiling / 2 <= delay <= ceiling
        assert len(spool) == 4  # the 3 events plus the shipper's own "down" status
        server.log.mode = "ok"
        # The 4 spooled, then the "up" status written on recovery, in the same drain.
        assert shipper.drain() == 5
        assert shipper.failures == 0 and shipper.next_attempt_in == 0
        assert len(spool) == 0
        states = [(s["attrs"]["state"], s["attrs"]["probe"]) for s in _statuses(server.log.received_ids, server)]
        assert states == [("down", "shipper"), ("up", "shipper")]
        assert set(server.log.stored) >= {"ev-1", "ev-2", "ev-3"}
    finally:
        server.close()


def test_backs_off_while_connections_are_refused(tmp_path: Path, make_event, dead_port: int) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append([make_event()])
    clock = FakeClock()
    shipper = _shipper(spool, f"http://127.0.0.1:{dead_port}", clock)
    result = shipper.ship_once()
    assert result.error is not None and "ConnectError" in result.error
    assert shipper.failures == 1 and shipper.ship_once().skipped
    clock.now += 60
    assert shipper.ship_once().error is not None
    assert shipper.failures == 2
    down = [json.loads(s.body) for s in spool.read_batch(10) if s.event_id.startswith("status-")]
    assert [d["attrs"]["state"] for d in down] == ["down"]
    assert "ConnectError" in down[0]["attrs"]["detail"]


def test_rejected_events_are_logged_and_dropped_not_retried(tmp_path: Path, make_event, ingest, caplog) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append([make_event(), make_event(), make_event()])
    ingest.log.mode = "reject:ev-2"
    shipper = _shipper(spool, ingest.url, FakeClock())
    with caplog.at_level(logging.WARNING, logger="gpuslo.probes.shipper"):
        result = shipper.ship_once()
    assert (result.sent, result.acked, result.rejected) == (3, 3, 1)
    assert len(spool) == 0
    assert "rejected event ev-2" in caplog.text
    assert shipper.ship_once().sent == 0
    assert ingest.log.received_ids == ["ev-1", "ev-2", "ev-3"]


def test_items_missing_from_the_answer_stay_spooled(tmp_path: Path, make_event, ingest, monkeypatch) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append([make_event(), make_event()])
    answer = ingest.log.answer

    def first_only(items):
        status, body = answer(items)
        body["results"] = body["results"][:1]
        return status, body

    monkeypatch.setattr(ingest.log, "answer", first_only)
    assert _shipper(spool, ingest.url, FakeClock()).ship_once().acked == 1
    assert [s.event_id for s in spool.read_batch(5)] == ["ev-2"]


def test_drops_are_reported_as_probe_status(tmp_path: Path, make_event, ingest) -> None:
    spool = Spool(tmp_path / "s.db", max_events=2)
    spool.append([make_event() for _ in range(5)])
    shipper = _shipper(spool, ingest.url, FakeClock())
    shipper.drain()
    reports = _statuses(ingest.log.received_ids, ingest)
    assert [(r["attrs"]["state"], r["attrs"]["dropped"]) for r in reports] == [("degraded", 3)]
    assert reports[0]["attrs"]["detail"] == "spool full: 3 events dropped"
    assert {"ev-1", "ev-2"} <= set(ingest.log.stored) and "ev-3" not in ingest.log.stored


@pytest.mark.parametrize("failures", [1, 2, 5, 30])
def test_backoff_delay_stays_within_its_bounds(failures: int) -> None:
    rng = random.Random(failures)
    ceiling = min(60.0, 2.0 ** (failures - 1))
    delays = [backoff_delay(failures, 1.0, 60.0, rng) for _ in range(200)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert max(delays) - min(delays) > ceiling / 4  # jittered, not constant
