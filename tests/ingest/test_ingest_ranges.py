"""Issue 11, ingest at the door: every value ingest accepts can be stored on both databases, served as strict JSON
and evaluated; what cannot is refused with a 422 naming the field (never a 500/503), and stores nothing."""

from __future__ import annotations

import json

from ingest_support import Live, now_time, strict_json, xid_event


def _text(body: dict[str, object], replace: dict[str, str] | None = None) -> bytes:
    """The JSON text of `body` (\\u escapes for NUL and surrogates), with placeholders swapped for raw JSON."""
    text = json.dumps(body)
    for placeholder, raw in (replace or {}).items():
        text = text.replace(json.dumps(placeholder), raw)
    return text.encode()


# (what is wrong, the event's fields changed, raw JSON swapped in, the field named, the reason code)
BAD = [
    ("pid beyond 64 bits", {"pid": 2**63}, {}, "pid", "out_of_range"),
    ("pid beyond PID_MAX_LIMIT", {"pid": 4_194_305}, {}, "pid", "out_of_range"),
    ("Xid beyond 64 bits", {"attrs": {"xid": 10**20}}, {}, "attrs.xid", "out_of_range"),
    ("Xid 0", {"attrs": {"xid": 0}}, {}, "attrs.xid", "out_of_range"),
    ("rank beyond int32", {"rank": 2**31}, {}, "rank", "out_of_range"),
    ("gpu index 1024", {"gpu": 1024}, {}, "gpu", "out_of_range"),
    ("negative gpu", {"gpu": -1}, {}, "gpu", "out_of_range"),
    ("lone surrogate in host", {"host": "\ud800"}, {}, "host", "bad_text"),
    ("NUL in host", {"host": "node\x00a"}, {}, "host", "bad_text"),
    ("NUL in job", {"job": "train\x00"}, {}, "job", "bad_text"),
    ("NUL in a label", {"labels": {"team": "a\x00"}}, {}, "labels.team", "bad_text"),
    ("1e400 in an attribute", {"attrs": {"xid": 79, "detail": "@inf"}}, {"@inf": "1e400"}, "attrs.detail",
     "not_finite"),
    ("-1e400 as the Xid", {"attrs": {"xid": "@inf"}}, {"@inf": "-1e400"}, "attrs.xid", "not_finite"),
    ("year 0001", {"time": "0001-01-01T00:00:00Z"}, {}, "time", "time_too_old"),
    ("year 1999", {"time": "1999-12-31T23:59:59Z"}, {}, "time", "time_too_old"),
    ("year 9999", {"time": "9999-12-31T23:59:59Z"}, {}, "time", "time_in_future"),
    ("an hour ahead", {"time": now_time(3600)}, {}, "time", "time_in_future"),
    ("not a time", {"time": "2026-13-01T00:00:00Z"}, {}, "time", "bad_time"),
    ("message too long", {"message": "x" * 9000}, {}, "message", "too_long"),
    ("host too long", {"host": "h" * 254}, {}, "host", "too_long"),
]


def test_a_value_no_part_can_hold_is_422_naming_the_field(live: Live):
    for what, fields, raw, field, _code in BAD:  # one server for all cases: starting one costs more than a case
        response = live.post(_text(xid_event("bad-1", **fields), raw))
        assert response.status_code == 422, (what, response.text)
        (result,) = strict_json(response.text)["results"]
        assert result["status"] == "rejected" and result["problems"][0]["field"] == field, (what, result)
        assert result["problems"][0]["reason"], what
    for code in {case[4] for case in BAD}:
        expected = sum(1 for case in BAD if case[4] == code)
        assert live.metric("gpuslo_events_rejected_total", kind="gpu_xid", reason=code) == expected, code
    assert live.events()["total"] == 0


def test_odd_values_refused_in_a_batch_store_the_others_and_the_api_stays_strict_json(live: Live):
    bodies = [_text(xid_event(f"bad-{i}", **fields), raw).decode() for i, (_, fields, raw, _, _) in enumerate(BAD)]
    good = [json.dumps(xid_event(f"good-{i}", host=f"node-{i}")) for i in range(3)]
    response = live.post(("[" + ",".join(bodies + good) + "]").encode())
    assert response.status_code == 200, response.text
    answer = strict_json(response.text)
    assert (answer["accepted"], answer["rejected"]) == (3, len(BAD))
    assert [r["problems"][0]["field"] for r in answer["results"][:len(BAD)]] == [case[3] for case in BAD]
    live.idle()
    listed = live.events()
    assert sorted(e["id"] for e in listed["items"]) == ["good-0", "good-1", "good-2"]
    assert all(e["processed_at"] and "error" not in e for e in listed["items"])
    assert live.get("/events").status_code == 200
    violations = strict_json(live.get("/api/v1/violations").text)
    assert violations["total"] == 3  # each good event was evaluated (xid 79 on three hosts)


def test_times_in_any_rfc3339_form_are_normalized_to_utc_microseconds_and_kept_as_sent(live: Live):
    sent = {"nanos-offset": "2026-11-30T12:00:00.123456789+02:00", "lower-case": "2026-11-30t10:00:01.5z",
            "negative-offset": "2026-11-30T05:30:02-04:30", "plain": "2026-11-30T10:00:03.000001Z"}
    response = live.post([xid_event(event_id, time=when) for event_id, when in sent.items()])
    assert response.status_code == 200 and strict_json(response.text)["accepted"] == 4, response.text
    stored = {e["id"]: e for e in live.events()["items"]}
    assert stored["nanos-offset"]["time"] == "2026-11-30T10:00:00.123456Z"
    assert stored["lower-case"]["time"] == "2026-11-30T10:00:01.500000Z"
    assert stored["negative-offset"]["time"] == "2026-11-30T10:00:02.000000Z"
    assert stored["plain"]["time"] == "2026-11-30T10:00:03.000001Z"
    for event_id in ("nanos-offset", "lower-case", "negative-offset"):
        assert stored[event_id]["time_sent"] == sent[event_id]  # the original, as the client wrote it
    assert "time_sent" not in stored["plain"]  # the canonical form restates it without loss
    # The same instant written another way is the same event: a duplicate, not a conflict.
    again = live.post(xid_event("nanos-offset", time="2026-11-30T10:00:00.123456Z"))
    assert again.status_code == 200 and strict_json(again.text)["results"][0]["status"] == "duplicate"


def test_recorded_incidents_still_replay_in_full(live: Live):
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "examples" / "incidents"
    total = 0
    for path in sorted(folder.glob("*.jsonl")):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        response = live.post("\n".join(lines).encode(), "application/x-ndjson")
        answer = strict_json(response.text)
        refused = [r for r in answer["results"] if r["status"] not in ("accepted", "duplicate")]
        assert refused == [], f"{path.name}: {refused[:3]}"
        total += len(lines)
    assert live.events("page_size=1")["total"] == total


def test_a_repeated_key_is_refused_precisely_and_only_its_event(live: Live):
    single = live.post(b'{"id": "d1", "kind": "gpu_xid", "time": "%s", "host": "a", "host": "b", '
                       b'"attrs": {"xid": 79}}' % now_time(-5).encode())
    assert single.status_code == 422
    (problem,) = strict_json(single.text)["results"][0]["problems"]
    assert problem["field"] == "host" and "duplicate key 'host'" in problem["reason"]
    repeated = (f'{{"id": "d2", "kind": "gpu_xid", "time": "{now_time(-5)}", "host": "a", '
                '"attrs": {"xid": 79, "xid": 13}}')
    nested = f"[{json.dumps(xid_event('fine'))}, {repeated}]"
    answer = strict_json(live.post(nested.encode()).text)
    assert [r["status"] for r in answer["results"]] == ["accepted", "rejected"]
    assert answer["results"][1]["index"] == 1 and answer["results"][1]["problems"][0]["field"] == "attrs.xid"
    ndjson = json.dumps(xid_event("n1")) + '\n{"id": "n2", "id": "n3"}\n'
    lines = strict_json(live.post(ndjson.encode(), "application/x-ndjson").text)["results"]
    assert [r["status"] for r in lines] == ["accepted", "rejected"] and "line 2" in lines[1]["problems"][0]["reason"]
    assert live.metric("gpuslo_events_rejected_total", kind="unknown", reason="duplicate_key") == 3


def test_a_5000_digit_number_is_reported_as_too_long_not_as_nesting(live: Live):
    response = live.post(b'{"id": "long", "kind": "gpu_xid", "attrs": {"xid": ' + b"7" * 5000 + b"}}")
    assert response.status_code == 400
    error = strict_json(response.text)["error"]
    assert "5000 digits" in error["message"] and "nesting" not in error["message"]
    assert "line 1, column 52" in error["message"]  # where the number starts
