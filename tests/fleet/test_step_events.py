"""StepEvents: a worker step builds each event once across the partition copies it fetched, and only when a copy
is the same JSON; what does not build is never cached and raises parse_event's own error every time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from fleet_support import RULES

from gpuslo.engine.errors import EventError
from gpuslo.engine.events import parse_event
from gpuslo.engine.fleet.bus import Bus, Delivered
from gpuslo.engine.fleet.partition import PartitionRunner, PartitionSettings
from gpuslo.engine.fleet.routing import RoutingTable, rulebooks_for
from gpuslo.engine.fleet.step_events import StepEvents
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.store.db import Database


def _xid(event_id: str = "e1", **changes: Any) -> dict[str, Any]:
    return {"id": event_id, "kind": "gpu_xid", "host": "node-1", "gpu": 0, "time": "2026-01-02T03:04:05.000000Z",
            "attrs": {"xid": 79, "pci_bus": "0000:3b:00"}, **changes}


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """What a second message holding the same published body decodes to: an equal, distinct object."""
    decoded: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return decoded


def test_a_copy_of_the_same_json_gets_the_first_copys_event() -> None:
    built = StepEvents()
    first = built.build(_xid())
    again = built.build(_copy(_xid()))
    assert again is first
    assert first == parse_event(_xid())
    assert built.reused == 1


def test_a_different_body_under_the_same_id_is_built_anew() -> None:
    built = StepEvents()
    first = built.build(_xid())
    other = built.build(_xid(host="node-2"))
    assert other is not first and other.host == "node-2"
    assert built.build(_copy(_xid())) is first  # the first body stays cached
    assert built.reused == 1


def test_json_that_is_equal_but_not_the_same_is_not_shared() -> None:
    # 0 == False and 79 == 79.0 in Python; as JSON they differ, and parse_event judges each on its own.
    built = StepEvents()
    built.build(_xid())
    with pytest.raises(EventError) as refused:
        built.build(_xid(gpu=False))
    assert "gpu" in str(refused.value)
    assert built.reused == 0


def test_what_does_not_build_is_never_cached_and_fails_each_time() -> None:
    built = StepEvents()
    bad = _xid(attrs={"xid": "not a number", "pci_bus": "0000:3b:00"})
    for _ in range(2):
        with pytest.raises(EventError) as refused:
            built.build(_copy(bad))
        with pytest.raises(EventError) as direct:
            parse_event(_copy(bad))
        assert str(refused.value) == str(direct.value)
    assert built.build(_xid()) is not None and built.reused == 0


@pytest.mark.parametrize("obj", [["not", "an", "object"], "text", {"id": 7, "kind": "gpu_xid"}, {"kind": "x"}])
def test_objects_without_a_text_id_go_to_parse_event(obj: object) -> None:
    with pytest.raises(EventError):
        StepEvents().build(obj)


def test_partitions_of_one_step_share_the_event_their_messages_hold() -> None:
    """An NCCL timeout goes to its host's and its job's partition; a worker owning both builds it once per step,
    and each partition evaluates it (their memories of ids are their own)."""
    rulebooks = load_directory(RULES)[0]
    timeout = parse_event({"id": "t1", "kind": "nccl_timeout", "host": "node-2", "job": "job-9", "rank": 3,
                           "time": "2026-12-01T10:00:01Z", "attrs": {"op": "ALLREDUCE", "seq": 7,
                                                                    "timeout_ms": 600000}})
    partitions = RoutingTable.of(rulebooks, 4).route(timeout)
    assert sorted(p.space for p in partitions) == ["host", "job"]
    runners = [PartitionRunner(p, rulebooks_for(rulebooks, p.space), bus=Bus.__new__(Bus),  # never read here
                               database=Database("sqlite://"), owner="t", notify=lambda *_: None,
                               metrics=Metrics(), settings=PartitionSettings()) for p in partitions]
    body = b"[" + orjson.dumps(timeout.to_dict()) + b"]"  # what publish.py writes into each subject's message
    built = StepEvents()
    pending = [runner.evaluate([Delivered(1, datetime.now(UTC), body)], built) for runner in runners]
    events = [p.results[0].events for p in pending if p is not None]
    assert len(events) == 2 and events[0][0] is events[1][0] and events[0][0] == timeout
    assert built.reused == 1
