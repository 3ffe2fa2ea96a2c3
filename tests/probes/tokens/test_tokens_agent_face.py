"""`--probe tokens:URL` for `gpuslo agent` and `gpuslo serve`: the passive scrape and the active stream, loaded
through the agent's own probe loader against the real local streaming server."""

from __future__ import annotations

import pytest
from test_tokens_passive import SCRAPE_1, SCRAPE_2

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.agent import ProbeSpec, load_probe


def test_a_metrics_url_is_scraped_passively(stream_server, assert_valid) -> None:
    stream_server.metrics_text = SCRAPE_1
    probe = load_probe(ProbeSpec.parse(f"tokens:{stream_server.base_url}/metrics,interval=5"), "node-1")
    probe.start()  # the baseline scrape
    try:
        (job,) = probe.jobs()
        assert job.name == "tokens-scrape" and job.interval_s == 5
        stream_server.metrics_text = SCRAPE_2
        events = job.run()
    finally:
        probe.stop()
    assert events and {e.kind for e in events} == {"token_latency"} and {e.host for e in events} == {"node-1"}
    assert_valid(events)


def test_an_endpoint_is_streamed_actively(stream_server, assert_valid) -> None:
    probe = load_probe(ProbeSpec.parse(f"tokens:{stream_server.base_url}/quick/v1/chat/completions,model=tiny,"
                                       "interval=2,stall_ms=150"), "node-1")
    probe.start()
    try:
        (job,) = probe.jobs()
        events = job.run()
    finally:
        probe.stop()
    kinds = [e.kind for e in events]
    assert job.name == "tokens-stream" and kinds[0] == "token_request" and "token_latency" in kinds
    assert [e.attrs["phase"] for e in events if e.kind == "token_request"][:2] == ["start", "first_token"]
    assert_valid(events)


@pytest.mark.parametrize(("arg", "message"), [
    ("", "give the endpoint"),
    ("ftp://x/metrics", "http:// or https://"),
    ("http://127.0.0.1:1/v1/completions", "needs model=NAME"),
    ("http://127.0.0.1:1/metrics,colour=red", "is not one of"),
    ("http://127.0.0.1:1/metrics,interval=-1", "must be positive"),
])
def test_bad_arguments_are_probe_errors_naming_the_problem(arg: str, message: str) -> None:
    probe = None
    with pytest.raises(ProbeError, match=message):
        probe = load_probe(ProbeSpec.parse(f"tokens:{arg}" if arg else "tokens"), "node-1")
        probe.start()
    assert probe is None or probe.name == "tokens"
