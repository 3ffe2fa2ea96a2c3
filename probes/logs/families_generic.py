"""Generalizations over frameworks: a status named or worded in any framework's message, read by what it says.

The specific families come first in the catalog; these take what is left, from the line's own statement:
- a CUDA status under any naming scheme (`ErrorOutOfMemory`, `ERROR_OUT_OF_MEMORY`) on a line that names CUDA
  or a GPU, mapped by a table of status words to its family (memory allocation → cuda_oom, capture → graph);
- the statuses of the CUDA math libraries (cuFFT, cuSPARSE, cuSOLVER, cuRAND, nvJPEG): an allocation failure is
  an OOM, the rest CUDA errors;
- an NCCL call reported with an ncclGetErrorString text (`ncclBroadcast failed: unhandled cuda error`, as
  Horovod and TensorFlow print it) → nccl_error with the ncclResult_t it stands for;
- an out-of-memory wording (`out of memory`, `Out of GPU memory`, `insufficient GPU memory`) on a line that
  names CUDA, a GPU or a CUDA allocation call.
The look-alike rules (prose.py) judge these starts like any other.
"""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import _api, _cuda_gpu, _kind_for
from gpuslo.probes.logs.patterns import Family, Found, _clean, _first, _first_rank, _int, _size
from gpuslo.probes.logs.units import status_by_suffix

_GPU_MARK = re.compile(r"CUDA|[Cc]uda|GPU|\bcu[A-Z]\w+|\bgpu\b|VRAM|[Dd]evice memory")


def _requested(text: str) -> int | None:
    return _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text),
                  _size(r"[Rr]equested\s*(?:size|amount)?\s*(?:was|of|:)?\s*(?:SIZE)", text))


def _scheme_status(text: str) -> Found | None:
    """`ManagedCuda.CudaException: ErrorOutOfMemory: ...`, `CUDA error: ... (code #2, ERROR_OUT_OF_MEMORY)`."""
    if not _GPU_MARK.search(text):
        return None
    for match in _SCHEME.finditer(text):
        status = status_by_suffix(match.group(1) or match.group(2))
        if status is not None:
            name, code = status
            kind = _kind_for(code)
            return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                                       "requested_bytes": _requested(text) if kind == "cuda_oom" else None}),
                         gpu=_cuda_gpu(text), rank=_first_rank(text))
    return None


_SCHEME = re.compile(r"\bError([A-Z][a-z]+(?:[A-Z][a-z]+)+)\b|(?<![A-Z_])ERROR_([A-Z]+(?:_[A-Z]+)+)\b")

# cufftResult values (cuFFT's CUFFTError(code N, ...) prints the number)
_CUFFT_CODES = {1: "CUFFT_INVALID_PLAN", 2: "CUFFT_ALLOC_FAILED", 3: "CUFFT_INVALID_TYPE", 4: "CUFFT_INVALID_VALUE",
                5: "CUFFT_INTERNAL_ERROR", 6: "CUFFT_EXEC_FAILED", 7: "CUFFT_SETUP_FAILED", 8: "CUFFT_INVALID_SIZE"}
_LIBRARY = re.compile(r"\b(?P<name>(?:CUFFT|(?:CUSPARSE|CUSOLVER|CURAND|NVJPEG|CUTENSOR)_STATUS)_[A-Z_]+)\b"
                      r"|CUFFTError\(code (?P<code>\d+)")


def _library_status(text: str) -> Found | None:
    match = _LIBRARY.search(text)
    if not match:
        return None
    code = int(match.group("code")) if match.group("code") else None
    name = match.group("name") or _CUFFT_CODES.get(code or 0)
    if name is None or name.endswith("_SUCCESS"):
        return None
    kind = "cuda_oom" if "ALLOC" in name else "cuda_error"
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


# ncclGetErrorString texts → ncclResult_t
_NCCL_RESULTS = {"unhandled cuda error": ("ncclUnhandledCudaError", 1),
                 "unhandled system error": ("ncclSystemError", 2), "internal error": ("ncclInternalError", 3),
                 "invalid argument": ("ncclInvalidArgument", 4), "invalid usage": ("ncclInvalidUsage", 5),
                 "remote process exited or there was a network error": ("ncclRemoteError", 6)}
_NCCL_CALL = re.compile(r"\b(nccl[A-Z]\w*) failed: (" + "|".join(map(re.escape, _NCCL_RESULTS)) + ")")


def _nccl_call(text: str) -> Found | None:
    match = _NCCL_CALL.search(text)
    if not match:
        return None
    name, code = _NCCL_RESULTS[match.group(2)]
    return Found("nccl_error", {"error_name": name, "error_code": code, "api": match.group(1)},
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


_OOM_WORDS = re.compile(r"\b[Oo]ut of (?:GPU |[Dd]evice |CUDA |video )?memory\b|\b[Ii]nsufficient GPU memory\b"
                        r"|\bOUT OF MEMORY\b")


def _oom_wording(text: str) -> Found | None:
    if not _GPU_MARK.search(text):
        return None
    return Found("cuda_oom", _clean({"requested_bytes": _requested(text), "api": _api(text)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


GENERIC_FAMILIES: tuple[Family, ...] = (
    Family("nccl_call_result", _NCCL_CALL, _nccl_call),
    Family("library_status", _LIBRARY, _library_status),
    Family("scheme_status", _SCHEME, _scheme_status),
    Family("oom_wording", _OOM_WORDS, _oom_wording),
)
