"""Gloo's collective timeout (a real message family: torch.distributed on CPUs) becomes an nccl_timeout event."""

from __future__ import annotations

from logprobe_helpers import load


def test_a_captured_gloo_timeout_is_one_timeout_event_of_rank_0():
    (event,) = load("gloo_timeout.log")
    assert (event.kind, event.rank, dict(event.attrs)) == ("nccl_timeout", 0, {"op": "gloo:recv", "timeout_ms": 5000})
    assert event.labels["family"] == "gloo_timeout"
    assert "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete" in (event.message or "")
