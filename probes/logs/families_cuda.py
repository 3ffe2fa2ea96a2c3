"""CUDA families beyond PyTorch's wordings: graph capture and update failures in any framework, C++ library
errors that name the status (RAFT, RMM, thrust, compute-sanitizer), cuDNN status errors, device-side
assertions (THC/THCUNN and ATen paths), serving engines' KV-cache capacity errors, llama.cpp/TensorRT/Triton
allocation failures."""

from __future__ import annotations

import re

from gpuslo.probes.logs.patterns import (
    Family,
    Found,
    _api,
    _c,
    _clean,
    _cuda_gpu,
    _first,
    _gpu_any,
    _int,
    _kind_for,
    _size,
)
from gpuslo.probes.logs.units import find_status

# ---- graph capture and update ---------------------------------------------------------------------------

_CAPTURE_FAILED = r"[Cc]apture cuda graph failed:\s*"


def _capture_failed(families: tuple[Family, ...]):  # type: ignore[no-untyped-def]
    """SGLang/other servers' "Capture cuda graph failed: <error>": the error after the colon decides the
    family (an OOM is an OOM, a gloo timeout a timeout); an error no family knows is a graph error."""

    def extract(text: str) -> Found | None:
        rest = re.split(_CAPTURE_FAILED, text, maxsplit=1)[-1]
        for family in families:
            if family.name != "capture_failed" and family.starts(rest):
                found = family.extract(rest)
                if found is not None:
                    return found
        status = find_status(rest)
        name, code = status if status else (rest.split("\n", 1)[0].strip()[:200] or "CUDAGraphCaptureError", None)
        return Found("cuda_graph_error", _clean({"error_name": name, "error_code": code, "api": _api(rest)}))

    return extract


def _capture_generic(text: str) -> Found:
    """TensorRT's "The CUDA graph capture on the stream has failed", "Failed to end stream capture",
    `cudaStreamEndCapture ... failed`: the named status when the line has one."""
    status = find_status(text)
    name, code = status if status else ("CUDAGraphCaptureError", None)
    return Found(_kind_for(code) if code is not None else "cuda_graph_error",
                 _clean({"error_name": name, "error_code": code, "api": _api(text)}))


def _named_status(text: str) -> Found | None:
    """A status named outright: `Reason=cudaErrorIllegalAddress:...`, `... returned cudaErrorX(CUresult=910)`,
    `Program hit cudaErrorX (error 910)`, `parallel_for failed: cudaErrorIllegalAddress`, HIP's `hipErrorX`."""
    status = find_status(text)
    if status is None:
        return None
    name, code = status
    kind = _kind_for(code)
    requested = _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text)) \
        if kind == "cuda_oom" else None
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                               "requested_bytes": requested}), gpu=_cuda_gpu(text))


# ---- cuDNN, device-side assertions --------------------------------------------------------------------


def _cudnn(text: str) -> Found | None:
    match = re.search(r"\bCUDNN_STATUS_([A-Z_]+)", text)
    if not match or match.group(1) == "SUCCESS":
        return None
    # cudnnStatus_t values differ between cuDNN 8 and 9 and the line does not print them: no error_code
    kind = "cuda_oom" if match.group(1) == "ALLOC_FAILED" else "cuda_error"
    return Found(kind, _clean({"error_name": match.group(0), "api": _api(text)}))


def _device_assert(text: str) -> Found:
    # ".../THCUNN/ClassNLLCriterion.cu:52: void kernel(...): block: [0,0,0], thread: [13,0,0] Assertion `t >= 0`
    # failed." — one line per failing thread; the echo check keeps the first
    return Found("cuda_error", {"error_name": "cudaErrorAssert", "error_code": 710})


# ---- out of memory ------------------------------------------------------------------------------------


def _kv_capacity(text: str) -> Found:
    """vLLM's "max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)"
    and SGLang's "Not enough memory ... --mem-fraction-static": the KV cache cannot hold one request."""
    return Found("cuda_oom", _clean({
        "requested_tokens": _int(r"max\s*seq\s*len\s*\((\d+)\)", text),
        "available_tokens": _int(r"stored\s*in\s*KV\s*cache\s*\((\d+)\)", text),
        "error_name": "InsufficientKVCacheMemory"}))


def _alloc_failed(text: str) -> Found:
    """llama.cpp/ggml ("allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory", "failed to
    allocate CUDA0 buffer of size N"), TensorRT ("Requested amount of GPU memory (N bytes) could not be
    allocated"), Triton ("Failed to allocate CUDA memory with byte size N on GPU 0")."""
    requested = _first(_size(r"allocating\s*(?:SIZE)", text), _int(r"buffer\s*of\s*size\s*(\d+)", text),
                       _int(r"GPU\s*memory\s*\((\d+)\s*bytes\)", text), _int(r"byte\s*size\s*(\d+)", text))
    gpu = _first(_int(r"on\s*device\s*(\d+)", text), _int(r"\bCUDA(\d+)\s*buffer", text),
                 _int(r"on\s*GPU\s*(\d+)", text), _gpu_any(text))
    api = re.search(r"\b(cudaMalloc\w*)\b", text)
    return Found("cuda_oom", _clean({"requested_bytes": requested, "api": api.group(1) if api else None,
                                     "error_name": "cudaErrorMemoryAllocation", "error_code": 2}), gpu=gpu)


CUDA_FAMILIES_BEFORE: tuple[Family, ...] = (
    Family("cudnn_status", _c(r"\bCUDNN_STATUS_(?!SUCCESS)[A-Z]"), _cudnn),
    Family("device_assert", _c(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `"), _device_assert),
    Family("kv_capacity", _c(r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV"
                             r" cache"
                             r"|Not enough memory\. Please try to increase --mem-fraction-static"
                             r"|Not enough memory to allocate KV cache"), _kv_capacity),
    Family("alloc_failed", _c(r"cudaMalloc failed: out of memory|failed to allocate CUDA\d* buffer of size \d"
                              r"|Requested amount of GPU memory \(\d+ bytes\) could not be allocated"
                              r"|Failed to allocate CUDA memory with byte size \d"), _alloc_failed),
)
CUDA_FAMILIES_AFTER: tuple[Family, ...] = (
    Family("capture_generic", _c(r"CUDA graph capture on the stream has failed|[Ff]ailed to end stream capture"
                                 r"|cudaStreamEndCapture\b.{0,80}\bfailed|stream capture (?:failed|invalidated)"),
           _capture_generic),
    Family("cuda_named", _c(r"\b(?:cuda|hip)Error[A-Z]\w+"), _named_status),
    Family("cuda_phrase", _c(r"CUDA driver version is insufficient for CUDA runtime version|no CUDA-capable device is"
                             r" detected|an illegal memory access was encountered|device-side assert triggered"
                             r"|unspecified launch failure|uncorrectable ECC error encountered|operation would make "
                             r"the legacy stream depend on a capturing blocking stream"
                             r"|capturing stream has unjoined work"
                             r"|operation not permitted when stream is capturing"), _named_status),
    # C++ wrappers: "cudaGraphExecUpdate(...) failed with error the graph update was not performed ..."
    Family("cuda_call_failed", _c(r"\bcu[A-Za-z]\w*\(.*\) failed with error "), _named_status),
)
