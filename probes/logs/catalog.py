"""Every message family in the order they are tried, and the prefilter's trigger words that cover them all.

The first family whose start matches a line takes it, so a wrapper ("Capture cuda graph failed: <error>")
comes before the families of the errors it wraps, and the specific before the generic.
"""

from __future__ import annotations

import re
from dataclasses import replace

from gpuslo.probes.logs.families_checks import CHECK_FAMILIES
from gpuslo.probes.logs.families_checks import NEEDS as CHECK_NEEDS
from gpuslo.probes.logs.families_cuda import (
    CUDA_FAMILIES_AFTER,
    CUDA_FAMILIES_BEFORE,
    CUDA_STATUS_FAMILIES,
    _capture_failed,
)
from gpuslo.probes.logs.families_driver import DRIVER_FAMILIES, XID_FAMILIES
from gpuslo.probes.logs.families_generic import _DISTINCT, GENERIC_FAMILIES
from gpuslo.probes.logs.families_loss import LOSS_FAMILIES
from gpuslo.probes.logs.families_nccl import NCCL_BASE_FAMILIES, NCCL_FAMILIES, NCCL_WARN
from gpuslo.probes.logs.families_oom import OOM_FAMILIES
from gpuslo.probes.logs.families_serving import NEEDS as SERVING_NEEDS
from gpuslo.probes.logs.families_serving import SERVING_FAMILIES
from gpuslo.probes.logs.families_tooling import NEEDS as TOOLING_NEEDS
from gpuslo.probes.logs.families_tooling import TOOLING_FAMILIES_BEFORE
from gpuslo.probes.logs.families_training import NEEDS as TRAINING_NEEDS
from gpuslo.probes.logs.families_training import TRAINING_FAMILIES
from gpuslo.probes.logs.patterns import NEW_RECORD, Family
from gpuslo.probes.logs.prefilter import ahocorasick_rs

# The prefilter: every family's start contains one of these words, so lines without them are never parsed. Each
# begins with a byte that is rare in ordinary log text (an upper-case letter, `_`, `'`, `-`): the automaton's
# SIMD prefilter slows down by half with a few words that start with a lower-case letter or whose head is also the
# head of common text ("KV cache usage", "[PG ID"), and with every few more words (bench/logs.py): a word that
# another word covers on the lines that matter ("Error" in "RuntimeError: HIP error") is left out. `re` tries a
# branch at every occurrence of its first byte. No word is a prefix of another. At most 64 words: two automata of
# at most 32 (the crate's Slim Teddy, 18 ms per 100 MB each) read a chunk in ~36 ms; 33+ words in one automaton
# switch it to Fat Teddy (twice as slow) and a third automaton costs another 18-45 ms (bench/logs.py 0.69 -> 0.62).
# Words that another word covers by construction are left out: CUBLAS_STATUS_/CUDNN_STATUS_ hold "_STATUS_", "SXid"
# holds "Xid" (h15i gave its place to TensorFlow/XLA's "Resource exhausted: Failed to allocate request ..."; every
# "NCCL communicator was aborted" line of the corpus and tests also holds "Error" or "Watchdog", so h15i gave
# "L communicator"'s place to NCCL 2.0's "WARN C"; every corpus and test line with "NV_ERR_" or "GraphExec" also
# holds another word (NVRM's "VRM", "cudaErrorGraphExec..."'s "Error", ") failed with error "), so h15j gave their
# places to Ray's memory monitor, "Ray killed this worker" and the raylet's "N Workers (tasks / actors) killed due to
# memory pressure (OOM)" ("(OOM)" measured 10 ms slower per 100 MB: "(" is common),
# "Invalid " (was "Invalid loss") also holds compute-sanitizer's "Invalid __global__ read of size N bytes",
# every corpus and test line with "CUFFT" also holds another word ("CuFFTError", "RuntimeError: cuFFT error: ..."), so
# h15k gave its place to the CUDA samples' "cudaSafeCall() Runtime API error 700: <text>" ("API error"),
# dmesg's "NVRM: API mismatch" and the kernel's "GPU has fallen off
# the bus" hold "VRM" (a tool that relays the latter names its
# "Xid"/"XID" 79), vLLM's "Free memory on device ..." and "No available memory for the cache blocks" are raised as
# ValueError (so printed after "ValueError: ", which holds "Error"), nvidia-smi's "device handle for GPU ...: GPU is
# lost / Unknown Error" holds "U is lost" / "Error", and "Out of " covers "Out of memory" and "Out of GPU memory". The
# crate puts a word in the bucket of its index (mod 8) unless it shares a head with another: the ORDER below sets the
# buckets, and with it how often a bucket fires on ordinary text (57 vs 36 ms over bench/logs.py's 100 MB for the same
# 64 words); it is measured, not designed: `bench/logs.py --search-order N` swaps words N times and prints a faster
# order.
# h15n gave "FABRIC_"'s place to "fabric manager": every corpus line with "FABRIC_" (Fabric Manager's config-item
# error) also holds it, as do Fabric Manager's own log lines ("[ERROR] [tid N] fabric manager NVIDIA GPU driver
# interface version ... don't match ...", "... aborting fabric manager"); in FABRIC_'s bucket the lower-case word cost
# 15 -> 27 ms per 100 MB, swapped with "Detected a " it costs nothing measurable (bench/logs.py's log, 15 ms). h15n
# also cut "Detected a " to "Detected ", which holds it and the k8s device plugin's "Detected non-NVML platform: ..."
# (20-24 ms either way on bench/logs.py's log).
TRIGGER_WORDS: tuple[bytes, ...] = (
    b"UDA", b"U is lost", b") failed with error ", b"_EXHAUSTED", b"_bfc) ran out", b"Watchdog",
    b"Received a dump signal",
    b"G status", b"Heartbeat", b"THC", b"Resource exhausted", b"L WARN", b"V cache is needed", b"L operation",
    b"L work",
    b"(error code ", b"NVSwitch", b"The model's max", b"VRM", b"WARN C", b"Error",
    b"M when allocating", b"Malloc failed", b"Timed out", b"Tried to allocate", b"The client socket", b"_STATUS_",
    b"Ray killed", b"Workers (tasks", b"Assertion `", b"DCGM_FR_", b"L error", b"-fabricmanager", b"' device marked",
    b"Detected ", b"Out of ", b"Not enough memory", b"Test NCCL failure", b"Loss is ", b"NaN", b"nan", b"Invalid ",
    b"Current loss scale", b"NvLink link", b"BFCArena", b"fabric manager", b"Fail - GPU", b"UDNN failure", b"Capture",
    b"Insufficient GPU memory", b"'s watchdog", b"Internal: unable to create", b"Executor creation failed",
    b"/library version mismatch", b"API error", b"CUresult", b"XID", b".cu at line", b"Success", b"Gpu API",
    b"'thrust::", b"!!!! kernel", b"Cuda ", b"Xid",
)


def _grouped(words: tuple[bytes, ...]) -> bytes:
    """One branch per first byte (`U(?:DA|BLAS|...)`), so `re` enters a branch only at that byte."""
    heads: dict[bytes, list[bytes]] = {}
    for word in words:
        heads.setdefault(word[:1], []).append(re.escape(word[1:]))
    return b"|".join(re.escape(head) + b"(?:" + b"|".join(tails) + b")" for head, tails in heads.items())


TRIGGER = re.compile(_grouped(TRIGGER_WORDS))


def _families() -> tuple[Family, ...]:
    rest = (*XID_FAMILIES, *NCCL_BASE_FAMILIES, NCCL_WARN, *NCCL_FAMILIES, *DRIVER_FAMILIES, *TOOLING_FAMILIES_BEFORE,
            *CUDA_FAMILIES_BEFORE,
            *CHECK_FAMILIES, *OOM_FAMILIES, *CUDA_STATUS_FAMILIES, *SERVING_FAMILIES, *CUDA_FAMILIES_AFTER,
            *LOSS_FAMILIES, *TRAINING_FAMILIES, *GENERIC_FAMILIES)
    assert len({f.name for f in rest}) == len(rest)
    capture = Family("capture_failed", re.compile(r"[Cc]apture cuda graph failed:"), _capture_failed(rest))
    return (capture, *rest)


# Per family, literals that every match of its start contains (each alternative of the regex has one of them):
# the parser tries a family's regex only on lines that have one. tests/probes/logs/test_catalog.py checks them.
_NEEDS: dict[str, tuple[str, ...]] = {
    "capture_failed": ("apture cuda graph failed",), "nvrm_xid": ("NVRM: Xid",),
    "fallen_off_bus": ("fallen off the bus", "GPU is lost"), "nvrm_gpu_lost": ("NVRM: The NVIDIA GPU",),
    "device_handle": ("device handle for GPU", "device handle for gpu"),
    "executor_memory": ("Executor creation failed",),
    "version_mismatch": ("library version mismatch", "API mismatch: the client"),
    "nccl_watchdog": ("Watchdog caught",), "nccl_heartbeat": ("Heartbeat monitor", "atchdog got stuck"),
    "nccl_comm_abort": ("communicator was aborted",), "gloo_timeout": ("Timed out waiting",),
    "nccl_error": ("NCCL error",), "nccl_cuda_failure": ("NCCL WARN Cuda",), "nccl_warn": ("NCCL WARN",),
    "nccl_error_number": ("NCCL Error",), "nccl_tests_failure": ("Test NCCL failure", "Test CUDA failure"),
    "pg_failed": ("NCCL operations have failed",),
    "pg_work": ("NCCL work", "by watchdog at work"),
    "store_timeout": ("socket has timed out", "DistStoreError", "Socket Timeout"),
    "nccl_op_failed": ("NCCL operation ",), "gsp_timeout": ("_kgspLogXid119",),
    "gsp_heartbeat": ("eartbeat timed out",), "gsp_rpc": ("RPC",),
    "rm_init": ("RmInitAdapter", "rm_init_adapter", "Cannot initialize GSP", "osInitNvMapping"),
    "nvrm_memory": ("NVRM:",), "nvswitch_sxid": ("SXid (",), "fm_nvswitch": ("NVSwitch",),
    "fm_failed": ("NVSwitch device information", "fabricmanager", "fabric manager config"),
    "nvlink_down": ("NvLink link",), "device_plugin_xid": ("XidCriticalError",),
    "marked_unhealthy": ("device marked unhealthy",), "dcgm_health": ("DCGM_FR_",),
    "nv_status": ("NV_ERR_",), "dcgm_health_watch": ("in health system",), "dcgm_diag_fail": ("Fail - GPU",),
    "cudnn_status": ("CUDNN_STATUS_",), "cnmem_status": ("CNMEM_STATUS_",),
    "xla_stream": ("kernels launched on stream",), "device_assert": ("Assertion `",),
    "kv_capacity": ("stored in KV cache", "Not enough memory", "Error: Prefill out of memory",
                    "Error: Decode out of memory", "_slots runs out of memory"),
    "alloc_failed": ("cudaMalloc failed", "failed to allocate CUDA", "Requested amount of GPU memory",
                     "Failed to allocate CUDA memory", "BFCArena::AllocateRawInternal", "OutOfMemory (Requested size"),
    "report_field_oom": ("Exception Type:** torch.",),
    "torch_oom": ("out of memory", "Tried to allocate"), "tf_oom": ("OOM when allocating",),
    "xla_oom": ("RESOURCE_EXHAUSTED", "ut of memory while trying", "ran out of memory trying"),
    "vllm_kv_cache": ("No available memory for the cache", "KV cache is needed"), "ray_oom": ("Task was killed",),
    "sglang_kv_cache": ("no GPU memory for the KV cache",),
    "kv_alloc_insufficient": ("Insufficient GPU memory for KVCache",),
    "startup_free_memory": ("Free memory on device",),
    "pg_dump_signal": ("dump signal due to a collective timeout",),
    "cuda_status": ("CUDA", "Cuda", "cuBLAS Error", "cuda runtime error", "CUBLAS_STATUS_", "HIP error",
                    "CUDNN failure", "CUresult error", "Internal: unable to create", "Invalid error code (",
                    "API error", "cudaError_t "),
    "cuda_graph": ("CUDA graph capture", "cudaErrorStreamCapture", "cudaErrorCapturedEvent"),
    "capture_generic": ("CUDA graph capture on the stream", "ailed to end stream capture", "cudaStreamEndCapture",
                        "stream capture "),
    "cuda_named": ("cudaError", "hipError"),
    "cuda_phrase": ("CUDA driver version", "CUDA-capable", "illegal memory access", "device-side assert",
                    "unspecified launch failure", "uncorrectable ECC", "legacy stream", "unjoined work",
                    "stream is capturing"),
    "cuda_call_failed": (") failed with error ",),
    "cudnn_frontend": ("[cudnn_frontend] Error",), "nccl_failure_text": ("NCCL failure :",),
    "loss_became_nonfinite": ("Error: Loss became infinite",),
    "grad_norm_nonfinite": ("in local grad norm", "Unexpected result "),
    "loss_stated_nonfinite": (", stopping training", "NaN loss during", "Invalid loss", "gradients are Nan",
                              "diverged with loss", "Error: loss is ", "Error: Loss is ", "Error: the loss is ",
                              "Error: The loss is "),
    "loss_scale_floor": ("Error: Minimum loss scale", "Current loss scale"),
    "anomaly_nonfinite": ("' returned ",),
    "step_scores_nonfinite": (", step ",),
    "loss_metric_nonfinite": ("loss", "Loss", "grad_norm", "grad norm"),
    "nccl_call_result": (" failed: unhandled", " failed: internal error", " failed: invalid",
                         " failed: remote process"),
    "library_status": ("CUFFT", "_STATUS_", " internal error"), "scheme_status": ("Error", "ERROR_"),
    "oom_wording": ("ut of memory", "ut of GPU memory", "ut of device memory", "ut of Device memory",
                    "ut of CUDA memory", "ut of video memory", "nsufficient GPU memory", "OUT OF MEMORY"),
    "cuda_code": ("rror", "RROR", "tatus", "esult", "ode"),
    "library_number": (" failure", " error", " Error", " ERROR"),
    # the start is case-blind: a sentence-initial capital too (CUDA's "[[ System not yet initialized (error 802) ]]")
    "cuda_text": tuple(sorted({t.lower()[:12] for t in _DISTINCT} | {t[:12] for t in _DISTINCT}
                              | {t.capitalize()[:12] for t in _DISTINCT})),
    "any_xid": ("XID", "Xid"),
    "allocation_failed": ("o allocate", "annot allocate", "llocation "), **CHECK_NEEDS, **SERVING_NEEDS,
    **TRAINING_NEEDS, **TOOLING_NEEDS,
    "collective_timed_out": ("imed out", "imeout", "imed  out", "imedout", "ime out", "imeOut"),
}
FAMILIES: tuple[Family, ...] = tuple(replace(f, needs=_NEEDS[f.name]) for f in _families())


class _Candidates:
    """The families whose `needs` a line has, in catalog order: one automaton pass over the line finds every
    literal present, instead of ~40 families testing theirs one by one (without ahocorasick-rs: the loop)."""

    def __init__(self, families: tuple[Family, ...], automaton: bool = True):
        self._families = families
        needs = sorted({need for family in families for need in family.needs})
        self._owners = tuple(tuple(i for i, f in enumerate(families) if need in f.needs) for need in needs)
        self._automaton = (ahocorasick_rs.AhoCorasick(needs, matchkind=ahocorasick_rs.MatchKind.Standard)
                           if automaton and ahocorasick_rs is not None else None)

    def __call__(self, text: str) -> list[Family]:
        if self._automaton is None:
            return [f for f in self._families if any(need in text for need in f.needs)]
        found = self._automaton.find_matches_as_indexes(text, overlapping=True)
        if not found:
            return []
        owners = self._owners
        return [self._families[i] for i in sorted({i for need, _, _ in found for i in owners[need]})]


candidates = _Candidates(FAMILIES)
"""`candidates(text)`: the families that may start on `text`; try each one's `start` in that order."""
__all__ = ["FAMILIES", "NEW_RECORD", "TRIGGER", "TRIGGER_WORDS", "candidates"]
