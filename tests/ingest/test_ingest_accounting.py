"""Issue 11, ingest accounting: every event of a request that got through is counted once (accepted, duplicate, or
rejected under a reason from a fixed set); requests refused whole are counted by status; a batch the database
refuses is stored event by event; `gpuslo replay` of a file with one bad line stores the others."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from click.testing import CliRunner
from ingest_support import Live, strict_json, xid_event

from gpuslo.cli.main import main
from gpuslo.engine import ingest as ingest_module
from gpuslo.engine.event_checks import REASONS
from gpuslo.engine.events import KINDS
from gpuslo.engine.store import repository


def _sum(samples: dict[str, float]) -> float:
    return sum(samples.values())


def test_sent_equals_accepted_plus_duplicates_plus_rejected_exactly(start_server):
    live: Live = start_server(max_events_per_request=50, ingest_requests_per_second=0.001, ingest_burst=40)
    sent = 0
    for round_ in range(20):  # every round refuses new raw values: labels must not grow with them
        items = [xid_event(f"r{round_}-ok-{i}", host=f"h{i}") for i in range(5)]
        items += [dict(items[0])]  # a duplicate within the request
        items += [dict(items[1], host="elsewhere")]  # a conflict
        items += [xid_event(f"r{round_}-pid", pid=10**6 * (round_ + 5)),  # pid beyond PID_MAX_LIMIT
                  xid_event(f"r{round_}-x", kind=f"kind-{round_}"),  # an unknown kind, different every time
                  {"id": f"r{round_}-u", "unknown_field_{round_}": 1}, 17, "text"]
        response = live.post(items)
        assert response.status_code == 200, response.text
        sent += len(items)
    line = json.dumps(xid_event("nd-1"))
    ndjson = "\n".join([line, '{"broken": ', line, '{"id": "a", "id": "b"}'])
    assert live.post(ndjson.encode(), "application/x-ndjson").status_code == 200
    sent += 4
    accepted = _sum(live.samples("gpuslo_events_accepted_total"))
    duplicates = _sum(live.samples("gpuslo_events_duplicate_total"))
    rejected = live.samples("gpuslo_events_rejected_total")
    assert accepted == 20 * 5 + 1 and duplicates == 20 + 1
    assert accepted + duplicates + _sum(rejected) == sent
    for labels in rejected:
        kind, reason = re.fullmatch(r'\{kind="([^"]*)",reason="([^"]*)"\}', labels).groups()
        assert kind in KINDS or kind == "unknown", labels
        assert reason in REASONS, labels
    assert len(rejected) <= 8  # 20 rounds of new raw values, a handful of series
    # Requests refused whole: counted by status, their events never counted one by one.
    refused = {
        400: live.post(b'[{"id": "x",'),
        415: httpx.post(f"{live.url}/api/v1/events", content=b"{}", headers={"Content-Type": "text/plain"}),
        413: live.post([xid_event(f"many-{i}") for i in range(51)]),
        422: live.post(b"[]"),
    }
    for status, response in refused.items():
        assert response.status_code == status, (status, response.text)
    limited = [live.post(xid_event("late")) for _ in range(40)]
    assert 429 in [r.status_code for r in limited]
    counts = live.samples("gpuslo_ingest_requests_refused_total")
    for status in refused:
        assert counts[f'{{status="{status}"}}'] == 1, counts
    assert counts['{status="429"}'] == sum(1 for r in limited if r.status_code == 429)
    assert _sum(live.samples("gpuslo_events_accepted_total")) == accepted + sum(
        1 for r in limited if r.status_code == 202)


def test_a_batch_the_database_refuses_is_stored_event_by_event(live: Live, monkeypatch):
    original = repository.store_events

    def store_events(session, events, **kwargs):
        if any(e.id == "refused-by-db" for e in events):
            raise ValueError("injected: the database refuses this row")
        return original(session, events, **kwargs)

    monkeypatch.setattr(ingest_module.repository, "store_events", store_events)
    events = [xid_event(f"s-{i}", host=f"n{i}") for i in range(5)]
    events[3] = xid_event("refused-by-db")
    answer = strict_json(live.post(events).text)
    assert [r["status"] for r in answer["results"]] == ["accepted"] * 3 + ["rejected", "accepted"]
    problem = answer["results"][3]["problems"][0]
    assert problem["field"] == "(event)" and "injected: the database refuses this row" in problem["reason"]
    assert live.events()["total"] == 4
    assert live.metric("gpuslo_events_rejected_total", kind="gpu_xid", reason="store_failed") == 1


def test_replay_of_a_file_with_one_bad_line_stores_the_others(live: Live, tmp_path: Path):
    lines = [json.dumps(xid_event(f"line-{n}", host=f"node-{n}")) for n in range(1, 21)]
    lines[6] = json.dumps(xid_event("line-7", host="nul\x00host"))
    path = tmp_path / "incident.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["replay", str(path), "--server", live.url, "--batch-size", "5"],
                                catch_exceptions=False)
    assert result.exit_code == 1, result.stdout
    assert "line 7: id line-7 rejected: host: contains a NUL character" in result.stdout
    assert "19 accepted" in result.stdout
    assert live.events()["total"] == 19
