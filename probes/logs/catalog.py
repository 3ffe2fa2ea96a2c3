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

# The prefilter: every family's start contains one of these words, so lines without them are never parsed. Each
# begins with a byte that is rare in ordinary log text (an upper-case letter, `_`, `'`, `-`): the automaton's
# SIMD prefilter slows down by half with a few words that start with a lower-case letter or whose head is also the
# head of common text ("KV cache usage", "[PG ID"), and with every few more words (bench/logs.py): a word that
# another word covers on the lines that matter ("Error" in "RuntimeError: HIP error") is left out. `re` tries a
# branch at every occurrence of its first byte. No word is a prefix of another.
TRIGGER_WORDS: tuple[bytes, ...] = (
    b"UDA", b"UBLAS", b"UDNN_", b"U is lost", b"U has fallen", b"_EXHAUSTED", b"_bfc) ran out", b"Watchdog",
    b"'s watchdog", b"G status", b"Heartbeat", b"HC", b"L error", b"L WARN", b"L communicator", b"L operation",
    b"L work", b"No available memory", b"NVSwitch", b"NvLink link", b"VRM", b"V cache is needed", b"Error",
    b"M when allocating", b"Malloc failed", b"Timed out", b"Tried to allocate", b"The client socket",
    b"The model's max", b"Capture", b"GraphExec", b"Assertion `", b"DCGM_FR_", b"SXid", b"-fabricmanager",
    b"' device marked", b"FABRIC_",
)


def _grouped(words: tuple[bytes, ...]) -> bytes:
    """One branch per first byte (`U(?:DA|BLAS|...)`), so `re` enters a branch only at that byte."""
    heads: dict[bytes, list[bytes]] = {}
    for word in words:
        heads.setdefault(word[:1], []).append(re.escape(word[1:]))
    return b"|".join(re.escape(head) + b"(?:" + b"|".join(tails) + b")" for head, tails in heads.items())


TRIGGER = re.compile(_grouped(TRIGGER_WORDS))


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
