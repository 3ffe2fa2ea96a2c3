"""Issue 11, the engine: a poison event is quarantined with its error and the rest of its batch goes on; the engine
loop is supervised and /healthz says within 5 s when it is not evaluating; events stored before ingest checked
them cannot wedge it; the stream clock never runs ahead of wall clock + skew. Over HTTP, on both databases."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from types import MappingProxyType

import pytest
from ingest_support import Live, now_time, strict_json, wait_for, xid_event
from sqlalchemy import update

from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import EventRow
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match


def _violations(live: Live) -> list[dict]:
    return strict_json(live.get("/api/v1/violations?page_size=100").text)["items"]


def test_an_event_whose_evaluation_raises_is_quarantined_and_its_batch_goes_on(live: Live, monkeypatch):
    evaluator = live.core.runtime.evaluator
    original = evaluator._fact

    def fact(event, unit, timestamp):  # any exception at all while evaluating this one event
        if event.host == "poison":
            raise ZeroDivisionError("injected: this event cannot be evaluated")
        return original(event, unit, timestamp)

    monkeypatch.setattr(evaluator, "_fact", fact)
    events = [xid_event(f"ok-{i}", host=f"node-{i}") for i in range(3)]
    events.insert(1, xid_event("poison-1", host="poison"))
    assert live.post(events).status_code == 200
    live.idle()
    assert sorted(v["group"]["host"] for v in _violations(live)) == ["node-0", "node-1", "node-2"]
    stored = {e["id"]: e for e in live.events()["items"]}
    assert stored["poison-1"]["error"].startswith("evaluating it failed: ZeroDivisionError: injected")
    assert stored["poison-1"]["processed_at"] and all("error" not in stored[f"ok-{i}"] for i in range(3))
    assert live.metric("gpuslo_events_quarantined_total", stage="evaluate") == 1
    page = live.get("/events").text
    assert "Quarantined:" in page and "injected: this event cannot be evaluated" in page
    assert live.get("/healthz").status_code == 200


def test_an_event_whose_result_cannot_be_stored_is_quarantined_and_the_others_are_stored(live: Live, monkeypatch):
    original = violations.record

    def record(session, items, **kwargs):
        if any(e.host == "poison" for m in items if isinstance(m, Match) for e in m.explanation.evidence):
            raise ValueError("injected: the database refuses what this event produced")
        return original(session, items, **kwargs)

    monkeypatch.setattr(violations, "record", record)
    events = [xid_event(f"ok-{i}", host=f"node-{i}") for i in range(3)] + [xid_event("poison-2", host="poison")]
    assert live.post(events).status_code == 200
    wait_for(lambda: live.metric("gpuslo_events_quarantined_total", stage="store") == 1, timeout=15)
    live.idle()
    assert sorted(v["group"]["host"] for v in _violations(live)) == ["node-0", "node-1", "node-2"]
    stored = {e["id"]: e for e in live.events()["items"]}
    assert "injected: the database refuses" in stored["poison-2"]["error"]
    assert all(stored[f"ok-{i}"]["processed_at"] and "error" not in stored[f"ok-{i}"] for i in range(3))
    assert wait_for(lambda: live.get("/healthz").status_code == 200, timeout=5)


def test_a_failing_engine_loop_is_restarted_and_healthz_says_so_within_5_s(live: Live, monkeypatch):
    runtime = live.core.runtime
    original, failing = runtime._take_batch, threading.Event()
    failing.set()

    def take_batch():
        if failing.is_set():
            raise RuntimeError("injected: the engine loop fails")
        return original()

    started = time.monotonic()
    monkeypatch.setattr(runtime, "_take_batch", take_batch)
    down = wait_for(lambda: (r := live.get("/healthz")).status_code == 503 and r, timeout=5)
    assert time.monotonic() - started < 5
    reason = strict_json(down.text)["engine"]["reason"]
    assert "injected: the engine loop fails" in reason and strict_json(down.text)["status"] == "unavailable"
    assert live.post([xid_event("while-down", host="node-late")]).status_code == 200  # ingest still stores
    wait_for(lambda: live.metric("gpuslo_engine_restarts_total") >= 2, timeout=10)
    failing.clear()
    wait_for(lambda: live.get("/healthz").status_code == 200, timeout=15)
    live.idle()
    assert [v["group"]["host"] for v in _violations(live)] == ["node-late"]  # evaluated after the restart


def test_an_engine_that_stops_advancing_is_503_within_5_s(live: Live, monkeypatch):
    evaluator, release = live.core.runtime.evaluator, threading.Event()
    original = evaluator.evaluate_batch

    def evaluate_batch(events):
        if any(e.host == "stall" for e in events):
            release.wait(30)  # as a catastrophic regex or a hung call would
        return original(events)

    monkeypatch.setattr(evaluator, "evaluate_batch", evaluate_batch)
    assert live.post([xid_event("stall-1", host="stall")]).status_code == 200
    posted = time.monotonic()
    down = wait_for(lambda: (r := live.get("/healthz")).status_code == 503 and r, timeout=5)
    assert time.monotonic() - posted < 5
    assert "has not advanced" in strict_json(down.text)["engine"]["reason"]
    release.set()
    wait_for(lambda: live.get("/healthz").status_code == 200, timeout=5)
    live.idle()
    assert [v["group"]["host"] for v in _violations(live)] == ["stall"]


# ---- events stored before ingest checked them ------------------------------------------------------------


def _old_event(event_id: str, **fields) -> Event:
    """An event built without validation, as ingest stored such bodies before issue 11."""
    values = {"id": event_id, "kind": "gpu_xid", "time": datetime(2026, 1, 1, tzinfo=UTC), "host": "node-old",
              "gpu": 0, "attrs": MappingProxyType({"xid": 79})}
    values.update(fields)
    return Event(**values)


def _citing(event: Event) -> Match:
    return Match(rule_id="xid-fallen-off-bus", rule_title="GPU fell off the bus", rulebook="hardware",
                 rulebook_version="1", rulebook_hash="ab" * 32, slo="gpu-availability", slo_objective="99.9%",
                 severity="critical", group_key=f"host={event.host},gpu=0", group={"host": event.host, "gpu": 0},
                 summary="stored before the fix", remediation="-", runbook=None,
                 explanation=Explanation((ConditionResult("xid in [79]", "xid", 79, True),), (event,),
                                         (ChainLink(event.id, event.kind, event.time, "old"),)),
                 seen_at=datetime(2026, 1, 1, tzinfo=UTC))


def _seed_old_rows(url: str) -> int:
    """Rows ingest accepted before issue 11: year 0001 (its body written by glibc's strftime, `1-01-01T...`),
    an Xid beyond 64 bits, Infinity on SQLite (PostgreSQL's json type never took it), and a violation citing
    the year-0001 event. Returns the violation's id."""
    database = Database(url)
    year_one = _old_event("old-year-1", time=datetime(1, 1, 1, tzinfo=UTC), host="node-year-1")
    odd = [year_one, _old_event("old-xid-2-70", attrs=MappingProxyType({"xid": 2**70}))]
    if database.engine.dialect.name == "sqlite":
        odd.append(_old_event("old-infinity", attrs=MappingProxyType({"xid": 79, "detail": float("inf")})))
    with database.session() as session:
        repository.store_events(session, odd, now=datetime(2026, 1, 1, tzinfo=UTC))
        body = dict(year_one.to_dict(), time="1-01-01T00:00:00.000000Z")
        session.execute(update(EventRow).where(EventRow.id == year_one.id).values(body=body))
        violation = violations.record_match(session, _citing(year_one), now=datetime(2026, 1, 1, tzinfo=UTC))
    database.dispose()
    return violation.id


def test_events_stored_before_the_checks_are_quarantined_on_read_and_never_wedge_anything(database_url,
                                                                                         start_server):
    violation_id = _seed_old_rows(database_url)
    live = start_server()
    assert live.post([xid_event("new-1", host="node-new")]).status_code == 200
    live.idle()
    assert "node-new" in [v["group"]["host"] for v in _violations(live)]  # the engine evaluates new events
    assert live.get("/healthz").status_code == 200
    stored = {e["id"]: e for e in live.events()["items"]}  # strict JSON: no Infinity anywhere
    old = [event_id for event_id in stored if event_id.startswith("old-")]
    assert len(old) == (3 if database_url.startswith("sqlite") else 2)
    for event_id in old:
        assert stored[event_id]["error"].startswith("stored body fails validation"), stored[event_id]
        assert stored[event_id]["processed_at"]
    assert stored["old-year-1"]["time"] == "0001-01-01T00:00:00.000000Z"
    assert live.metric("gpuslo_events_quarantined_total", stage="read") == len(old)
    assert live.get("/events").status_code == 200
    assert live.get(f"/violations/{violation_id}").status_code == 200
    detail = live.get(f"/api/v1/violations/{violation_id}")
    assert detail.status_code == 200 and strict_json(detail.text)["evidence"][0]["id"] == "old-year-1"


# ---- the stream clock ---------------------------------------------------------------------------------


def test_a_far_future_event_cannot_move_the_stream_clock_beyond_wall_clock_plus_skew(live: Live):
    beats = [{"id": f"up-{i}", "kind": "probe_status", "time": now_time(-1), "host": f"node-{i}", "source": "agent",
              "attrs": {"probe": "nvml", "state": "up"}} for i in range(5)]
    assert live.post(beats).status_code == 200
    refused = live.post(dict(beats[0], id="future", time="9999-12-31T23:59:59Z"))
    assert refused.status_code == 422 and strict_json(refused.text)["results"][0]["problems"][0]["field"] == "time"
    # Such an event can still reach the engine from a row stored before ingest refused it: it must not fire
    # probe-silent (for: 2m) for every host.
    live.core.runtime.submit([_future(beats[0])])
    live.idle()
    time.sleep(1.6)  # the stream clock runs on by itself after 1 s of quiet; give the absence check its turn
    live.idle()
    skew = live.core.settings.max_clock_skew_seconds
    assert live.core.runtime.evaluator.stream_time(time.monotonic()) <= time.time() + skew + 1
    assert [v for v in _violations(live) if v["rule_id"] == "probe-silent"] == []


def _future(beat: dict) -> Event:
    event = parse_event(dict(beat, id="future-2", host="node-x"))
    return Event(**{**{f: getattr(event, f) for f in ("id", "kind", "host", "source", "attrs")},
                    "time": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)})


@pytest.mark.parametrize("bad_at", [0, 250, 499])
def test_a_batch_of_500_with_one_bad_event_stores_499_and_names_the_one(live: Live, bad_at: int):
    events = [xid_event(f"b-{i}", host=f"node-{i % 7}") for i in range(500)]
    events[bad_at]["host"] = "nul\x00host"
    response = live.post(events)
    assert response.status_code == 200
    answer = strict_json(response.text)
    assert (answer["accepted"], answer["rejected"]) == (499, 1)
    (bad,) = [r for r in answer["results"] if r["status"] == "rejected"]
    assert (bad["index"], bad["id"], bad["problems"][0]["field"]) == (bad_at, f"b-{bad_at}", "host")
    assert live.events("page_size=1")["total"] == 499
