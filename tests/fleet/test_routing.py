"""Key spaces and partitions of the shipped rulebooks: each rule lands in the space of a field its key has, and
every event reaches exactly the partitions whose rules read its kind (no cluster needed)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from fleet_support import RULES

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.events import Event
from gpuslo.engine.fleet.routing import (
    FLEET_SPACE,
    RoutingTable,
    longest_window,
    partition_index,
    rule_key,
    rulebooks_for,
    sli_space,
    slis_of,
    space_of,
)
from gpuslo.engine.fleet.slis import owns_group
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import rule_patterns

SHIPPED = load_directory(RULES)[0]


def test_every_shipped_rule_is_partitioned_by_a_field_of_its_key() -> None:
    spaces = {rule.id: space_of(rule) for rulebook in SHIPPED for rule in rulebook.rules}
    assert spaces["collective-hang"] == "job" and spaces["nccl-watchdog-timeout"] == "job"
    assert spaces["oom-storm"] == "host" and spaces["probe-silent"] == "host" and spaces["cuda-oom"] == "host"
    for rulebook in SHIPPED:
        for rule in rulebook.rules:
            assert spaces[rule.id] in rule_key(rule), rule.id


def test_an_event_goes_to_one_partition_of_each_space_that_reads_its_kind(
        make_event: Callable[..., Event]) -> None:
    table = RoutingTable.of(SHIPPED, 16)
    assert [(s.field, s.partitions) for s in table.spaces] == [("endpoint", 16), ("host", 16), ("job", 16)]
    timeout = make_event(kind="nccl_timeout", host="node-7", job="job-1", rank=1,
                         attrs={"op": "ALLREDUCE", "seq": 3, "timeout_ms": 1000})
    oom = make_event(host="node-7")
    readers = {space_of(r) for rb in SHIPPED for r in rb.rules if "nccl_timeout" in {p.kind for p in rule_patterns(r)}}
    assert [p.space for p in table.route(timeout)] == sorted(readers) == ["host", "job"]
    oom_readers = {space_of(r) for rb in SHIPPED for r in rb.rules if "cuda_oom" in {p.kind for p in rule_patterns(r)}}
    assert [p.space for p in table.route(oom)] == sorted(oom_readers)  # host rules; rootcause.yaml joins on job
    numbers = {p.number for p in table.all_partitions()}
    assert len(numbers) == 48 and all(p.number in numbers for p in table.route(timeout) + table.route(oom))
    assert table.route(timeout)[1].number == 32 + zlib.crc32(b"job-1") % 16
    # Stable across processes: crc32, never Python's salted hash().
    assert table.route(oom)[0].index == partition_index(oom, table.spaces[1]) == zlib.crc32(b"node-7") % 16
    same_host = [make_event(host="node-7", gpu=g) for g in range(4)]
    assert len({table.route(e)[0].subject for e in same_host}) == 1
    spread = {table.route(make_event(host=f"node-{i}"))[0].index for i in range(200)}
    assert len(spread) == 16


def test_each_measured_slo_is_counted_in_the_space_of_its_group_by_only(make_event: Callable[..., Event]) -> None:
    slis = {sli.slo_id: sli for sli in slis_of(SHIPPED)}
    assert {slo: sli_space(sli) for slo, sli in slis.items()} == {
        "token-latency": "endpoint", "first-token-latency": "endpoint", "stream-success": "endpoint",
        "training-progress": "job"}
    table = RoutingTable.of(SHIPPED, 16)
    request = make_event(kind="token_request", host="node-3", attrs={"request_id": "r", "phase": "done",
                                                                      "endpoint": "/v1/chat"})
    endpoint = next(p for p in table.route(request) if p.space == "endpoint")
    assert endpoint.index == zlib.crc32(b"/v1/chat") % 16 and endpoint.partitions == 16
    for space in ("endpoint", "host", "job"):  # every SLO stays (rules cite them); only its space measures it
        measured = {slo.id for rb in rulebooks_for(SHIPPED, space) for slo in rb.slos.values() if slo.indicator}
        assert measured == {slo for slo, sli in slis.items() if sli_space(sli) == space}
        assert {slo.id for rb in rulebooks_for(SHIPPED, space) for slo in rb.slos.values()} == {
            slo.id for rb in SHIPPED for slo in rb.slos.values()}
    # A stored group key routes back to the partition its events go to.
    assert owns_group(endpoint, slis["stream-success"], "endpoint=/v1/chat")
    assert not owns_group(replace(endpoint, index=(endpoint.index + 1) % 16), slis["stream-success"],
                          "endpoint=/v1/chat")


def test_a_rule_with_an_empty_key_is_fleet_wide_with_one_partition() -> None:
    rulebook = SHIPPED[0]
    keyless = replace(rulebook.rules[0], group_by=())
    table = RoutingTable.of([replace(rulebook, rules=(keyless,))], 16)
    assert [(s.field, s.partitions) for s in table.spaces] == [(FLEET_SPACE, 1)]
    assert table.spaces[0].kinds == {p.kind for p in rule_patterns(keyless)}


def test_a_partition_runs_only_the_rules_of_its_space() -> None:
    host_only = rulebooks_for(SHIPPED, "host")
    assert {r.id for rb in host_only for r in rb.rules} >= {"oom-storm", "cuda-oom"}
    assert not {r.id for rb in host_only for r in rb.rules} & {"collective-hang", "nccl-watchdog-timeout"}
    job_windows = [getattr(r.when, "within_s", None) or getattr(r.when, "for_s", 0.0)
                   for rb in SHIPPED for r in rb.rules if space_of(r) == "job"]
    assert longest_window(rulebooks_for(SHIPPED, "job")) == max(job_windows) >= 300.0  # collective-hang: 5 m


def test_the_table_survives_the_bus_and_refuses_garbage() -> None:
    table = RoutingTable.of(SHIPPED, 8)
    assert RoutingTable.from_json(table.to_json()) == table
    with pytest.raises(ConfigError, match="not a table written by a gpuslo worker"):
        RoutingTable.from_json(b'{"spaces": [{"field": "host"}]}')
    with pytest.raises(ConfigError, match="within 1..4096"):
        RoutingTable.of(SHIPPED, 0)
