"""CUDA checks of libraries that print their own structure around a CUDA status: assertion macros that compare
with `cudaSuccess` (glog/Caffe `Check failed: error == cudaSuccess (2 vs. 0)`, Faiss `'err == cudaSuccess'
failed ... (error 2 out of memory)`), OpenCV's `(-217:Gpu API call) <text> in function`, thrust's
`system_error` exceptions (`parallel_for failed: <text>`), DeepSpeed's cuBLAS wrapper (`!!!! kernel execution
error. (m: .., error: 13)`), CUDACHECK macros (`Cuda error <file>:<line> '<text>'`) and hand-written checks
(`<text> in <file>.cu at line N`). The structure says "a CUDA call failed"; the status is read from the number
or the cudaGetErrorString text the check prints."""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import _api, _cuda_gpu, _kind_for, _oom_bytes, cublas_found
from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first_rank
from gpuslo.probes.logs.units import CUBLAS_STATUS, CUBLAS_TEXTS, find_status, status_for_code

_CUBLAS_BY_CODE = {code: "CUBLAS_STATUS_" + name for name, code in CUBLAS_STATUS.items()}


def _status(number: str | None, text: str) -> tuple[str, int] | None:
    """The cudaError_t a check names: its number when one is printed, else the text's named status or
    cudaGetErrorString wording."""
    if number is not None:
        status = status_for_code(int(number))
        if status is not None:
            return status
    return find_status(text)


def _found(status: tuple[str, int], text: str) -> Found:
    name, code = status
    kind = _kind_for(code)
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                               "requested_bytes": _oom_bytes(text) if kind == "cuda_oom" else None}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


# "Check failed: error == cudaSuccess (2 vs. 0)  out of memory", "Error: 'err == cudaSuccess' failed: failed to
# cudaMalloc N bytes (error 2 out of memory)", "Faiss assertion 'err__ == cudaSuccess' failed ... details: CUDA error
# 2 out of memory", "CHECK_EQ(cudaSuccess, err) failed"
_CHECK = re.compile(r"'?\b\w+ [=!]= cudaSuccess\b'?|\bcudaSuccess [=!]= \w+\b|\(cudaSuccess, \w+\)")
_CHECK_NUMBER = re.compile(r"\((\d+) vs\. 0\)|\(0 vs\. (\d+)\)|\berror (\d+)\b|CUDA error (\d+)|\bcode (\d+)\b")


def _check_failed(text: str) -> Found | None:
    rest = text[_CHECK.search(text).end():]  # type: ignore[union-attr]
    number = _CHECK_NUMBER.search(rest)
    status = _status(next((g for g in number.groups() if g), None) if number else None, rest)
    return _found(status, text) if status is not None else None


# OpenCV 3/4: "error: (-217:Gpu API call) out of memory in function 'setDevice'"; OpenCV 2: "OpenCV Error: Gpu
# API call (unknown error) in allocate, file ..."
_OPENCV = re.compile(r"\(-217:Gpu API call\) (?P<new>.+?) in function\b|Gpu API call \((?P<old>[^)\n]+)\)")


def _opencv(text: str) -> Found | None:
    match = _OPENCV.search(text)
    assert match is not None
    stated = (match.group("new") or match.group("old")).strip()
    status = find_status(stated)
    if status is None and stated.lower() == "unknown error":  # cudaGetErrorString(cudaErrorUnknown)
        status = status_for_code(999)
    return Found(_kind_for(status[1]), {"error_name": status[0], "error_code": status[1]},
                 gpu=_cuda_gpu(text)) if status is not None else None


# thrust's system_error: "parallel_for failed: out of memory", "for_each: failed to synchronize:
# cudaErrorIllegalAddress: an illegal memory access was encountered", "radix_sort: failed on 2nd step: ..."
_THRUST = re.compile(r"'?thrust::system::(?:system_error|detail::bad_alloc)"
                     r"|\b(?:parallel_for|for_each|transform|reduce|copy_if|radix_sort|merge_sort|scan|fill)"
                     r"(?::)? failed(?: to synchronize| on \w+ step)?: ")


def _thrust(text: str) -> Found | None:
    what = text.split("what():", 1)[-1]
    status = find_status(what)
    if status is None and "bad_alloc" in text:
        status = status_for_code(2)
    return _found(status, what) if status is not None else None


# a C++ CUDA exception, then its what() (picongpu's "CUDA::error", "what(): <file>(42):" then "error: out of memory")
_TERMINATE_CUDA = re.compile(r"terminate called after throwing an instance of '(?:CUDA|cuda|Cuda)\w*::\w+'")


def _terminate(text: str) -> Found | None:
    status = find_status(text.split("what():", 1)[-1])
    return _found(status, text) if status is not None else None


# DeepSpeed's cublas_wrappers: "!!!! kernel execution error. (m: 768, n: 4608, k: 3072, error: 13)"
_GEMM = re.compile(r"!!!! kernel execution error\. \([^)]*\berror: (\d+)\)")


def _gemm(text: str) -> Found | None:
    match = _GEMM.search(text)
    assert match is not None
    code = int(match.group(1))
    name = _CUBLAS_BY_CODE.get(code)
    if name is None:
        return None
    return Found("cuda_oom" if code == 3 else "cuda_error", {"error_name": name, "error_code": code,
                                                            "api": "cublasGemmEx"})


# CUDACHECK macros (vLLM custom all-reduce, NCCL-style): "Failed: Cuda error /workspace/csrc/x.cuh:455 'invalid
# argument'"; hand-written checks: "an illegal memory access was encountered in /path/Propagation.cu at line 1117"
_CUDACHECK = re.compile(r"\bCuda error [^\s']+:\d+ '(?P<text>[^'\n]+)'")
_AT_LINE = re.compile(r"^\s*(?P<text>[a-z][\w ,'-]{8,}?) (?:in|at) (?:file )?\S+\.cuh? at line \d+")


# LAMMPS's geryon: "Cuda driver error 804 in call at file\n'/path/nvd_device.h' in line 333." (a CUresult number; below
# 100 only 1 and 2 mean the same as the runtime's codes)
_DRIVER_NUMBER = re.compile(r"\bCuda driver error (\d+) in call at file\b")


def _driver_number(text: str) -> Found | None:
    match = _DRIVER_NUMBER.search(text)
    assert match is not None
    code = int(match.group(1))
    status = status_for_code(code) if code in (1, 2) or code >= 100 else None
    if status is None:
        return Found("cuda_error", {"error_code": code, "api": "cuda driver"})
    return Found(_kind_for(status[1]), {"error_name": status[0], "error_code": status[1], "api": "cuda driver"})


_CUBLAS_TEXT = re.compile(r"\b(?:cublas runtime error|cuBLAS Error)\s*:\s*(?P<text>[a-z][a-z ]+?)\s*(?: at |$|\.|\()",
                          re.IGNORECASE)


def _cublas_text(text: str) -> Found | None:
    match = _CUBLAS_TEXT.search(text)
    status = CUBLAS_TEXTS.get(match.group("text").lower()) if match else None
    if status is None:
        return None
    return cublas_found(status, CUBLAS_STATUS[status], "cublas")


def _stated(pattern: re.Pattern[str]):  # type: ignore[no-untyped-def]
    def extract(text: str) -> Found | None:
        match = pattern.search(text)
        status = find_status(match.group("text")) if match else None
        return _found(status, text) if status is not None else None

    return extract


# the CUDA samples' checks, copied into much code: "Failed to allocate device vector A (error code out of memory)!",
# "Failed to launch vectorAdd kernel (error code no kernel image is available for execution on the device)!"
_SAMPLE = _c(r"\(error code (?P<text>[a-zA-Z][^()]{2,160})\)")


# a C++ library's check that prints where it failed, then the CUDA error text alone on the next line (Madrona's
# "Error at <file>.cpp:1829 in <function>" / "an illegal memory access was encountered"); a next line that names no
# CUDA error is not one
_ERROR_AT = _c(r"^\s*Error at \S+\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp):\d+(?: in |\s*$)")


def _error_at(text: str) -> Found | None:
    _, _, after = text.partition("\n")
    status = find_status(after) if after.strip() else None
    return _found(status, after) if status is not None else None


CHECK_FAMILIES: tuple[Family, ...] = (
    Family("cuda_check_failed", _CHECK, _check_failed),
    Family("opencv_gpu_api", _OPENCV, _opencv),
    Family("thrust_error", _THRUST, _thrust, complete=_c(r"what\(\):\s*\S"), max_lines=2, joiner="\n",
           accept=_c(r"^\s*what\(\):")),
    # complete at a what() with its text, or at the line after a what() that ends in "file(42):"
    Family("terminate_cuda", _TERMINATE_CUDA, _terminate,
           complete=_c(r"what\(\):[^\n]*[^:\s]\s*$|what\(\):[^\n]*:\s*\n[^\n]*\S"), max_lines=3,
           joiner="\n", accept=_c(r"^\s*what\(\):|^\s*(?:error|CUDA error)\b")),
    Family("deepspeed_gemm", _GEMM, _gemm),
    Family("cudacheck", _CUDACHECK, _stated(_CUDACHECK)),
    Family("cuda_driver_number", _DRIVER_NUMBER, _driver_number),
    Family("cublas_text", _CUBLAS_TEXT, _cublas_text),
    Family("cuda_at_line", _AT_LINE, _stated(_AT_LINE)),
    Family("cuda_sample_check", _SAMPLE, _stated(_SAMPLE)),
    Family("cuda_error_at", _ERROR_AT, _error_at, complete=_c(r"\n[^\n]*\S"), max_lines=2, joiner="\n",
           accept=_c(r"^\s*[a-z]")),
)
"""Tried after the CUDA status families (which read these lines' "CUDA error: ..." first when they have one)."""
NEEDS: dict[str, tuple[str, ...]] = {
    "cuda_check_failed": (" cudaSuccess", "(cudaSuccess"), "opencv_gpu_api": ("Gpu API call",),
    "thrust_error": ("thrust::system::", " failed"), "terminate_cuda": ("terminate called after throwing",),
    "deepspeed_gemm": ("!!!! kernel execution error",), "cudacheck": ("Cuda error ",), "cuda_at_line": (" at line ",),
    "cuda_driver_number": ("Cuda driver error ",), "cuda_sample_check": ("(error code ",),
    "cuda_error_at": ("Error at ",),
    "cublas_text": ("cublas runtime error", "cuBLAS Error", "CUBLAS RUNTIME ERROR", "cuBLAS error", "CUBLAS Error"),
}
# the prefilter's words for these lines (catalog.py): each led by a byte that is rare in log text
# ("'thrust::" is on the terminate line a thrust what() follows; a what() alone is not read)
TRIGGERS: tuple[bytes, ...] = (b"Success", b"Gpu API", b"'thrust::", b"!!!! kernel", b"Cuda ", b".cu at line",
                               b"(error code ")
