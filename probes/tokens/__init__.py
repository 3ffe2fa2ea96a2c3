"""Token-stream probe: per-token latency of streaming LLM endpoints (active, passive and in-process)."""

from gpuslo.probes.tokens.active import ActiveProbeConfig, ActiveTokenProbe
from gpuslo.probes.tokens.inprocess import measure_stream
from gpuslo.probes.tokens.measure import EventContext, StreamSummary, summarize
from gpuslo.probes.tokens.passive import PassiveProbeConfig, PassiveTokenProbe
from gpuslo.probes.tokens.probe import build_probe

__all__ = [
    "ActiveProbeConfig", "ActiveTokenProbe", "EventContext", "PassiveProbeConfig", "PassiveTokenProbe",
    "StreamSummary", "build_probe", "measure_stream", "summarize",
]
