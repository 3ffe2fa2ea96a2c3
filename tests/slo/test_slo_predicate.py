"""SLI conditions compiled into predicates decide exactly as the explainer (and so the engine) does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slo_support import T0

from gpuslo.engine.errors import Location
from gpuslo.engine.events import Event
from gpuslo.engine.explain import condition_holds
from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.slo.predicate import predicate

CONDITIONS = [
    "itl_max_ms < 200ms", "not (itl_max_ms >= 200ms)", "ttft_ms <= 2s and tokens > 0", "has ttft_ms",
    "not has error", "endpoint in ['/a', '/b']", "not (endpoint in ['/a'])", "endpoint contains 'chat'",
    "model matches '^llama'", "not (model matches 'x')", "itl_max_ms < 200ms or error == 'timeout'",
    "not (tokens > 5 and (ttft_ms > 100ms or itl_max_ms > 50ms))",
]
values = {
    "itl_max_ms": st.one_of(st.none(), st.floats(0, 1000)), "ttft_ms": st.one_of(st.none(), st.floats(0, 5000)),
    "tokens": st.one_of(st.none(), st.integers(0, 10)), "error": st.sampled_from([None, "timeout", "http 500"]),
    "endpoint": st.sampled_from([None, "/a", "/b", "/v1/chat"]), "model": st.sampled_from([None, "llama-3", "qx"]),
}


@pytest.mark.parametrize("text", CONDITIONS)
@settings(max_examples=80, deadline=None)
@given(attrs=st.fixed_dictionaries(values))
def test_predicate_agrees_with_the_explainer(text, attrs):
    expr = parse_expression(text, "token_latency", location=Location("t.yaml", 1, 1))
    event = Event(id="e", kind="token_latency", time=T0, host="h",
                  attrs={k: v for k, v in attrs.items() if v is not None})
    assert predicate(expr)(event) == condition_holds(expr, event, {"m": event})
