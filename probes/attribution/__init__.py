"""Five-layer attribution of token stalls (network, scheduler, kernel, driver, GPU) from eBPF and NVML signals on
one monotonic timeline: `gpuslo agent --probe attribution:...` enriches each token_stall with `attribution.*`."""

from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe, build_probe
from gpuslo.probes.attribution.attribute import LAYERS, Attribution, attribute

__all__ = ["LAYERS", "Attribution", "AttributionConfig", "AttributionProbe", "attribute", "build_probe"]
