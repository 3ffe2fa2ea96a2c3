"""Token-stream probe: per-token latency of streaming LLM endpoints (active, passive and in-process)."""

from gpuslo.probes.tokens.active import ActiveProbeConfig, ActiveTokenProbe
from gpuslo.probes.tokens.inprocess import measure_stream
from gpuslo.probes.tokens.measure import EventContext, StreamSummary, summarize
from gpuslo.probes.tokens.passive import PassiveProbeConfig, PassiveTokenProbe

__all__ = [
    "ActiveProbeConfig", "ActiveTokenProbe", "EventContext", "PassiveProbeConfig", "PassiveTokenProbe",
    "StreamSummary", "measure_stream", "summarize",
]
