"""Query string → filters: every accepted value, and a precise 400 for each bad one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from werkzeug.datastructures import MultiDict

from gpuslo.engine.store.read_models import EventFilter, ViolationFilter
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import Paging, event_filter, parse_time, violation_filter


def _bad(call, args: dict | list) -> list[dict]:
    with pytest.raises(RequestError) as info:
        call(MultiDict(args), 50)
    assert (info.value.status, info.value.code) == (400, "bad_query")
    return info.value.details


def test_no_params_means_no_filter_and_default_paging():
    assert violation_filter(MultiDict(), 50) == (ViolationFilter(), Paging(1, 50))
    assert event_filter(MultiDict(), 700) == (EventFilter(), Paging(1, 500))


def test_every_violation_filter():
    args = MultiDict({"status": "open", "severity": "critical", "slo": "serving-latency", "rule": "oom",
                      "host": "gpu-node-1", "gpu": "3", "since": "2025-01-01T00:00:00Z",
                      "until": "2025-01-01T02:00:00+01:00", "page": "2", "page_size": "500"})
    found, paging = violation_filter(args, 50)
    assert found == ViolationFilter(status="open", severity="critical", slo="serving-latency", rule_id="oom",
                                    host="gpu-node-1", gpu=3, since=datetime(2025, 1, 1, tzinfo=UTC),
                                    until=datetime(2025, 1, 1, 1, tzinfo=UTC))
    assert paging == Paging(2, 500)


def test_empty_values_are_ignored_as_a_form_sends_them():
    found, _ = violation_filter(MultiDict({"status": "", "host": "  ", "gpu": ""}), 50)
    assert found == ViolationFilter()


def test_every_event_filter():
    args = MultiDict({"kind": "cuda_oom", "host": "h", "gpu": "0", "job": "train-7"})
    found, _ = event_filter(args, 50)
    assert found == EventFilter(kind="cuda_oom", host="h", gpu=0, job="train-7")


@pytest.mark.parametrize(("args", "param", "words"), [
    ({"status": "closed"}, "status", "one of: open, acknowledged, resolved"),
    ({"severity": "high"}, "severity", "not one of"),
    ({"gpu": "-1"}, "gpu", "not a whole number"),
    ({"gpu": "1024"}, "gpu", "outside 0..1023"),
    ({"since": "yesterday"}, "since", "not an RFC 3339 time"),
    ({"since": "2025-01-01T00:00:00"}, "since", "no time zone"),
    ({"since": "2025-01-02T00:00:00Z", "until": "2025-01-01T00:00:00Z"}, "until", "before since"),
    ({"page": "0"}, "page", "outside 1..1000000"),
    ({"page_size": "501"}, "page_size", "outside 1..500"),
    ({"page_size": "ten"}, "page_size", "not a whole number"),
    ({"severty": "critical"}, "severty", "unknown parameter"),
    ([("status", "open"), ("status", "resolved")], "status", "once"),
])
def test_bad_violation_params(args, param, words):
    details = _bad(violation_filter, args)
    assert details[0]["param"] == param and words in details[0]["reason"]


def test_all_bad_params_are_reported_at_once():
    details = _bad(event_filter, {"kind": "oom", "gpu": "x", "rule": "r"})
    assert {d["param"] for d in details} == {"kind", "gpu", "rule"}


def test_plus_offset_sent_unencoded_still_parses():
    assert parse_time("2025-01-01T02:00:00 02:00") == datetime(2025, 1, 1, tzinfo=UTC)
