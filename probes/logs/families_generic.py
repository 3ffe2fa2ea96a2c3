"""Generalizations over frameworks: a status named or worded in any framework's message, read by what it says.

The specific families come first in the catalog; these take what is left, from the line's own statement:
- a CUDA status under any naming scheme (`ErrorOutOfMemory`, `ERROR_OUT_OF_MEMORY`) on a line that names CUDA
  or a GPU, mapped by a table of status words to its family (memory allocation → cuda_oom, capture → graph);
- the statuses of the CUDA math libraries (cuFFT, cuSPARSE, cuSOLVER, cuRAND, nvJPEG): an allocation failure is
  an OOM, the rest CUDA errors;
- an NCCL call reported with an ncclGetErrorString text (`ncclBroadcast failed: unhandled cuda error`, as
  Horovod and TensorFlow print it) → nccl_error with the ncclResult_t it stands for;
- a cudaError_t number after an error/status/result/code word on a line that names CUDA (`CUDA error(700)`,
  `Cuda driver error 700`, `CUresult error result=2`, `... CUDA capable devices. Return status: 35`);
- a library's failure number (`CUDNN failure 4000`, `CUBLAS error 13`, `CUDA failure 2`);
- a distinctive cudaGetErrorString text (`an illegal memory access was encountered`) on a line naming CUDA;
- an Xid number stated in any wording (`Detected XID 145 for GPU 0`, `Xid (PCI:0002:00:00): 119`);
- a collective that timed out, in any wording (`NCCL all_reduce timed out after 1800 s`, `Timeout at NCCL
  work`), with the timeout and op it states;
- an allocation that failed on a GPU, in any wording (`failed to allocate 2.0 GiB on device 1`);
- an out-of-memory wording (`out of memory`, `Out of GPU memory`, `insufficient GPU memory`) on a line that
  names CUDA, a GPU or a CUDA allocation call.
The look-alike rules (prose.py) judge these starts like any other.
"""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import _api, _cuda_gpu, _kind_for
from gpuslo.probes.logs.patterns import Family, Found, _clean, _first, _first_rank, _int, _pci, _size
from gpuslo.probes.logs.units import CUBLAS_STATUS, CUDA_ERRORS, SCHEME, find_scheme_status, status_for_code

# a line about the GPU: CUDA named, a GPU, a CUDA call, a CUDA source file (`.cu`), thrust (CUDA's C++ library)
_GPU_MARK = re.compile(r"CUDA|[Cc]uda|GPU|Gpu|\bcu[A-Z]\w+|\bgpu\b|VRAM|[Dd]evice memory|\w\.cuh?\b|\bthrust::")


def _requested(text: str) -> int | None:
    return _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text),
                  _size(r"[Rr]equested\s*(?:size|amount)?\s*(?:was|of|:)?\s*(?:SIZE)", text))


def _scheme_status(text: str) -> Found | None:
    """`ManagedCuda.CudaException: ErrorOutOfMemory: ...`, `CUDA error: ... (code #2, ERROR_OUT_OF_MEMORY)`."""
    status = find_scheme_status(text) if _GPU_MARK.search(text) else None
    if status is None:
        return None
    name, code = status
    kind = _kind_for(code)
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                               "requested_bytes": _requested(text) if kind == "cuda_oom" else None}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


# cufftResult values (cuFFT's CUFFTError(code N, ...) prints the number)
_CUFFT_CODES = {1: "CUFFT_INVALID_PLAN", 2: "CUFFT_ALLOC_FAILED", 3: "CUFFT_INVALID_TYPE", 4: "CUFFT_INVALID_VALUE",
                5: "CUFFT_INTERNAL_ERROR", 6: "CUFFT_EXEC_FAILED", 7: "CUFFT_SETUP_FAILED", 8: "CUFFT_INVALID_SIZE"}
_LIBRARY = re.compile(r"\b(?P<name>(?:CUFFT|(?:CUSPARSE|CUSOLVER|CURAND|NVJPEG|CUTENSOR)_STATUS)_[A-Z_]+)\b"
                      r"|CUFFTError\(code (?P<code>\d+)"
                      # XLA's wording of a library's internal status: "INTERNAL: cuSolver internal error"
                      r"|\b(?P<lib>cuSolver|cuSPARSE|cuBLAS|cuFFT|cuRAND) internal error\b")


def _library_status(text: str) -> Found | None:
    match = _LIBRARY.search(text)
    if not match:
        return None
    code = int(match.group("code")) if match.group("code") else None
    name = match.group("name") or _CUFFT_CODES.get(code or 0) or (
        f"{match.group('lib').upper()}_STATUS_INTERNAL_ERROR" if match.group("lib") else None)
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


# a condition the wording sits in, within its sentence: advice ("If you are running out of memory, consider
# decreasing `gpu_memory_utilization`"), not a report
_CONDITIONAL = re.compile(r"\b[Ii]f\s+(?:you|your|it|the|this|we)\b[^.!?;]*$")


def _oom_wording(text: str) -> Found | None:
    if not _GPU_MARK.search(text):
        return None
    wording = _OOM_WORDS.search(text)
    if wording is not None and _CONDITIONAL.search(text, 0, wording.start()):
        return None
    # a status number beside the wording (Paddle's "(External) CUDA error(2), out of memory.") names the status,
    # so that the hint line after it ("[Hint: 'cudaErrorMemoryAllocation'. ...]") is the same incident's echo
    coded = _cuda_code(text)
    named = dict(coded.attrs) if coded is not None and coded.kind == "cuda_oom" else {}
    return Found("cuda_oom", _clean({"error_name": named.get("error_name"), "error_code": named.get("error_code"),
                                     "requested_bytes": _requested(text), "api": _api(text)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


_CUDA_MARK = re.compile(r"CUDA|[Cc]uda|CUresult")
# the number right after the word, not a line number (`:812`), a version (`12.1`) or a quantity (`2 GiB`)
_CODE = re.compile(r"\b(?:[Ee]rror|ERROR|[Ss]tatus|[Rr]esult|[Cc]ode)\s*(?:code\s*)?(?:[=:#(]\s*\(?|\s+\(?)"
                   r"(?P<code>\d{1,3})\b(?![.:/-]\d|\s*(?:%|[KMGT]i?B\b|bytes))")


def _cuda_code(text: str) -> Found | None:
    if not _CUDA_MARK.search(text):
        return None
    for match in _CODE.finditer(text):
        number = int(match.group("code"))
        status = status_for_code(number) if number > 1 else None
        if status is not None:
            name, code = status
            kind = _kind_for(code)
            return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                                       "requested_bytes": _requested(text) if kind == "cuda_oom" else None}),
                         gpu=_cuda_gpu(text), rank=_first_rank(text))
    return None


_LIB_NUMBER = re.compile(r"\b(?P<lib>CUDNN|CUBLAS|CUDA|Cuda|CUFFT|CUSPARSE|CURAND|CUSOLVER)\s+"
                         r"(?:failure|error|Error|ERROR)\s*(?:code\s*)?[(#]?(?P<number>\d{1,4})\b(?![.:/-]\d)")
_CUBLAS_CODES = {code: "CUBLAS_STATUS_" + name for name, code in CUBLAS_STATUS.items()}


def _library_number(text: str) -> Found | None:
    match = _LIB_NUMBER.search(text)
    if not match:
        return None
    lib, number = match.group("lib").upper(), int(match.group("number"))
    if lib == "CUDA":
        status = status_for_code(number) if number > 1 else None
        if status is None:
            return None
        kind = _kind_for(status[1])
        return Found(kind, _clean({"error_name": status[0], "error_code": status[1], "api": _api(text),
                                   "requested_bytes": _requested(text) if kind == "cuda_oom" else None}),
                     gpu=_cuda_gpu(text), rank=_first_rank(text))
    if lib == "CUBLAS":
        name = _CUBLAS_CODES.get(number)
        kind = "cuda_oom" if number == 3 else "cuda_error"
        return Found(kind, _clean({"error_name": name, "error_code": number, "api": _api(text)}),
                     gpu=_cuda_gpu(text), rank=_first_rank(text))
    if lib == "CUFFT":
        name = _CUFFT_CODES.get(number)
        return Found("cuda_oom" if number == 2 else "cuda_error",
                     _clean({"error_name": name, "error_code": number, "api": _api(text)}),
                     gpu=_cuda_gpu(text), rank=_first_rank(text))
    return Found("cuda_error", _clean({"error_code": number, "api": _api(text) or lib.lower()}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


# the cudaGetErrorString texts that no other software prints (not "invalid argument" or "unknown error")
_DISTINCT = tuple(sorted((t for t in CUDA_ERRORS if len(t) >= 18 and "out of memory" not in t), key=len,
                         reverse=True))
_TEXT = re.compile("|".join(re.escape(t) for t in _DISTINCT), re.IGNORECASE)
_WARNING = re.compile(r"\b[Ww]arn(?:ing)?\b|\bWARN(?:ING)?\b")
_TEXT_MARK = re.compile(r"CUDA|[Cc]uda|GPU|Gpu|\bcu[A-Z]\w+|[Dd]evice|[Kk]ernel|Triton|\w\.cuh?\b|\bthrust::")


def _cuda_text(text: str) -> Found | None:
    match = _TEXT.search(text)
    if not match or not _TEXT_MARK.search(text) or _WARNING.search(text):
        return None  # a warning that names a status ("... failed with CUDART error: peer access is not ...
        # To silence this warning, ...") reports what a fallback took care of
    name, code = CUDA_ERRORS.get(match.group(0)) or next(
        v for t, v in CUDA_ERRORS.items() if t.lower() == match.group(0).lower())
    return Found(_kind_for(code), _clean({"error_name": name, "error_code": code, "api": _api(text)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


_XID = re.compile(r"\b(?:XID|Xid)\s*(?:\((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\)\s*)?"
                  r"(?:[:=]\s*(?P<xid>\d{1,3})\b(?![.:/-]\d)"
                  # a bare "Xid 79" only where the GPU it hit follows ("Detected XID 145 for GPU 0"), not in a
                  # sentence ("Watch dmesg for Xid 79 events")
                  r"|\s+(?P<bare>\d{1,3})(?=\s+(?:for|on)\s+(?:GPU|[Dd]evice)\b))")


def _any_xid(text: str) -> Found | None:
    match = _XID.search(text)
    if not match:
        return None
    return Found("gpu_xid", _clean({"xid": int(match.group("xid") or match.group("bare")),
                                    "pci_bus": _pci(match.group("pci")) if match.group("pci") else None}),
                 gpu=_int(r"\bfor GPU\s*(\d+)", text))


_COLLECTIVE = (r"(?:NCCL|RCCL|[Cc]ollective|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|AllReduce|AllGather"
               r"|ReduceScatter|[Bb]roadcast|[Bb]arrier)")
_TIMED_OUT = re.compile(r"\b" + _COLLECTIVE + r"\b[^\n]{0,80}?\b(?:timed\s*out|[Tt]ime[Oo]ut\s*"
                        r"(?:error|exceeded|expired|reached|after|while|at)\b)|\b(?:[Tt]imed\s*out|[Tt]imeout)\s*(?:in|during|waiting\s*for|on)\s*"
                        r"(?:the\s*)?" + _COLLECTIVE + r"\b")
_OP = re.compile(r"\b(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|barrier|AllReduce|AllGather"
                 r"|ReduceScatter|Broadcast|Barrier)\b")


def _timed_out(text: str) -> Found | None:
    if re.search(r"\b(?:set|setting|configured|default|increase|raise|retry\w*|INFO)\b", text):
        return None  # a setting, advice or a retry ("NCCL timeout set to 1800 s", "... timed out, retrying")
    op = _OP.search(text)
    seconds = _int(r"(?:after|timeout(?:\s*of)?|exceeded)\s*(\d+)\s*(?:s|sec|seconds)\b", text)
    ms = _int(r"(?:after|timeout(?:\s*of)?|exceeded)\s*(\d+)\s*(?:ms|milliseconds)\b", text)
    return Found("nccl_timeout", _clean({"op": op.group(1).upper().replace("_", "") if op else None,
                                         "timeout_ms": ms if ms is not None else
                                         (seconds * 1000 if seconds is not None else None)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


_ALLOC_FAILED = re.compile(r"\b(?:[Ff]ailed|[Uu]nable|[Cc]annot|[Cc]ould not|[Cc]ouldn't)\s*to\s*allocate\b"
                           r"|\b[Cc]annot allocate\b|\b[Aa]llocation (?:of [^\n]{1,40} )?failed\b")
_ALLOC_MARK = re.compile(r"CUDA|[Cc]uda|GPU|\bgpu\b|VRAM|[Dd]evice\b|\bcu[A-Z]\w+")


def _allocation_failed(text: str) -> Found | None:
    if not _ALLOC_MARK.search(text) or re.search(r"\b(?:host|pinned|CPU|cpu|RAM)\b", text):
        return None  # no GPU named, or host memory
    requested = _first(_requested(text), _size(r"(?:allocate|of)\s*(?:SIZE)", text))
    return Found("cuda_oom", _clean({"requested_bytes": requested, "api": _api(text)}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


GENERIC_FAMILIES: tuple[Family, ...] = (
    Family("nccl_call_result", _NCCL_CALL, _nccl_call, structured=True),
    Family("library_status", _LIBRARY, _library_status, structured=True),
    Family("scheme_status", SCHEME, _scheme_status, structured=True),
    Family("oom_wording", _OOM_WORDS, _oom_wording, structured=True),
    Family("allocation_failed", _ALLOC_FAILED, _allocation_failed, structured=True),
    Family("collective_timed_out", _TIMED_OUT, _timed_out, structured=True),
    Family("library_number", _LIB_NUMBER, _library_number, structured=True),
    Family("cuda_text", _TEXT, _cuda_text, structured=True),
    Family("any_xid", _XID, _any_xid, structured=True),
    Family("cuda_code", _CODE, _cuda_code, structured=True),
)
