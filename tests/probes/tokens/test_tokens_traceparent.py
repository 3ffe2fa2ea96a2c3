"""The active token probe sends a W3C traceparent with each request and records its ids on every event of it;
the ids survive ingest and storage and link to the trace UI from the violation page."""

from __future__ import annotations

import re

from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe


def test_each_request_carries_its_own_traceparent_and_its_events_the_ids(stream_server, assert_valid) -> None:
    config = ActiveProbeConfig(url=f"{stream_server.base_url}/stalls/v1/chat/completions", model="tiny",
                               max_tokens=20, stall_threshold_ms=150)
    with ActiveTokenProbe(config, host="node-1") as probe:
        first = probe.run_once()
        second = probe.run_once()
    sent = [served.traceparent for served in stream_server.served[-2:]]
    parents = [re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01", header) for header in sent]
    assert all(parents)
    for events, parent in zip((first, second), parents, strict=True):
        assert {(e.trace_id, e.span_id) for e in events} == {parent.groups()}  # type: ignore[union-attr]
        assert any(e.kind == "token_stall" for e in events)
        assert_valid(events)
    assert parents[0].group(1) != parents[1].group(1)  # type: ignore[union-attr]
