"""Every message family in the order they are tried, and the prefilter's trigger words that cover them all.

The first family whose start matches a line takes it, so a wrapper ("Capture cuda graph failed: <error>")
comes before the families of the errors it wraps, and the specific before the generic.
"""

from __future__ import annotations

import re
from dataclasses import replace

from gpuslo.probes.logs import patterns
from gpuslo.probes.logs.families_cuda import CUDA_FAMILIES_AFTER, CUDA_FAMILIES_BEFORE, _capture_failed
from gpuslo.probes.logs.families_driver import DRIVER_FAMILIES
from gpuslo.probes.logs.families_nccl import NCCL_FAMILIES, NCCL_WARN
from gpuslo.probes.logs.patterns import NEW_RECORD, Family

# Words the families added after patterns.TRIGGER need; each is a plain literal (the automaton's and the
# regex's spelling alike) and none is a prefix of another word or of patterns.TRIGGER's.
_MORE_WORDS: tuple[bytes, ...] = (
    b"L operation", b"L work", b"by watchdog", b"socket has timed out", b"DistStoreError", b"Socket Timeout",
    b"uda graph", b"stream is capturing", b"EndCapture", b"stream capture", b"GraphExecUpdate", b"hipError",
    b"HIP error", b"HIP out of memory", b"cudaError", b"UDNN_STATUS", b"thread: [", b"ried to allocate",
    b"tored in KV cache", b"Not enough memory", b"cudaMalloc failed", b"failed to allocate CUDA",
    b"equested amount of GPU memory", b"CNMEM_STATUS", b"Failed to allocate CUDA", b"XidCritical",
    b"marked unhealthy", b"DCGM_FR_", b"SXid", b"NVSwitch", b"fabricmanager", b"fabric manager config", b"NvLink link", b"uda Runtime",
    b"failed with error", b"illegal memory access", b"device-side assert", b"unspecified launch failure",
    b"ECC error encountered", b"legacy stream", b"unjoined work",
)
TRIGGER_WORDS: tuple[bytes, ...] = patterns.TRIGGER_WORDS + _MORE_WORDS
TRIGGER = re.compile(patterns.TRIGGER.pattern + b"|" + b"|".join(re.escape(word) for word in _MORE_WORDS))


def _families() -> tuple[Family, ...]:
    by_name = {family.name: family for family in patterns.FAMILIES}
    head = [by_name[name] for name in ("nvrm_xid", "fallen_off_bus", "nvrm_gpu_lost", "nccl_watchdog")]
    # the stuck-watchdog sentence is often hard-wrapped: take up to two more lines until "without making progress"
    head.append(replace(by_name["nccl_heartbeat"], complete=re.compile(r"without\s*making|monitor\s*timed\s*out"),
                        max_lines=3))
    head += [by_name[name] for name in ("nccl_comm_abort", "gloo_timeout", "nccl_error", "nccl_cuda_failure")]
    tail = [by_name[name] for name in ("torch_oom", "tf_oom", "xla_oom", "vllm_kv_cache", "ray_oom", "cuda_status",
                                       "cuda_graph")]
    rest = (*head, NCCL_WARN, *NCCL_FAMILIES, *DRIVER_FAMILIES, *CUDA_FAMILIES_BEFORE, *tail, *CUDA_FAMILIES_AFTER)
    assert len({f.name for f in rest}) == len(rest) and len(patterns.FAMILIES) == len(head) + len(tail) + 1
    capture = Family("capture_failed", re.compile(r"[Cc]apture cuda graph failed:"), _capture_failed(rest))
    return (capture, *rest)


FAMILIES: tuple[Family, ...] = _families()
__all__ = ["FAMILIES", "NEW_RECORD", "TRIGGER", "TRIGGER_WORDS"]
