"""Sizes and CUDA status strings as GPU software prints them, turned into bytes and (name, code) pairs."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# PyTorch's format_size divides by 1024**n and prints KiB/MiB/GiB; older builds and TF/Ray print "GB" or "GiB"
# for the same powers of two, so every prefix here is binary.
_UNIT_BYTES = {"": 1, "B": 1, "BYTE": 1, "BYTES": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20,
               "MB": 2**20, "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40,
               "TIB": 2**40}
SIZE = r"(\d+(?:\.\d+)?)\s*((?:[KMGT]i?B)|bytes?|B\b|[KMGT]\b)"
_SIZE_RE = re.compile(SIZE, re.IGNORECASE)


def to_bytes(number: str, unit: str) -> int | None:
    """`("1.50", "GiB")` → 1610612736; None when the number or unit is not a size."""
    factor = _UNIT_BYTES.get(unit.upper())
    if factor is None:
        return None
    try:
        return int((Decimal(number) * factor).to_integral_value())
    except InvalidOperation:
        return None


def parse_size(text: str) -> int | None:
    """The first size in `text` in bytes, e.g. `2.00 GiB` → 2147483648."""
    match = _SIZE_RE.search(text)
    return to_bytes(match.group(1), match.group(2)) if match else None


# cudaGetErrorString texts → (cudaError_t name, value), from the CUDA runtime's driver_types.h.
CUDA_ERRORS: dict[str, tuple[str, int]] = {
    "out of memory": ("cudaErrorMemoryAllocation", 2),
    "initialization error": ("cudaErrorInitializationError", 3),
    "driver shutting down": ("cudaErrorCudartUnloading", 4),
    "invalid argument": ("cudaErrorInvalidValue", 1),
    "invalid device ordinal": ("cudaErrorInvalidDevice", 101),
    "no CUDA-capable device is detected": ("cudaErrorNoDevice", 100),
    "CUDA driver version is insufficient for CUDA runtime version": ("cudaErrorInsufficientDriver", 35),
    "uncorrectable ECC error encountered": ("cudaErrorECCUncorrectable", 214),
    "no kernel image is available for execution on the device": ("cudaErrorNoKernelImageForDevice", 209),
    "an illegal memory access was encountered": ("cudaErrorIllegalAddress", 700),
    "the launch timed out and was terminated": ("cudaErrorLaunchTimeout", 702),
    "device-side assert triggered": ("cudaErrorAssert", 710),
    "an illegal instruction was encountered": ("cudaErrorIllegalInstruction", 715),
    "misaligned address": ("cudaErrorMisalignedAddress", 716),
    "unspecified launch failure": ("cudaErrorLaunchFailure", 719),
    "operation not permitted when stream is capturing": ("cudaErrorStreamCaptureUnsupported", 900),
    "operation failed due to a previous error during capture": ("cudaErrorStreamCaptureInvalidated", 901),
    "operation would result in a merge of two independent capture sequences":
        ("cudaErrorStreamCaptureMerge", 902),
    "capture was not initiated in this stream": ("cudaErrorStreamCaptureUnmatched", 903),
    "capture sequence contains a fork that was not joined to the primary stream":
        ("cudaErrorStreamCaptureUnjoined", 904),
    "dependency created on uncaptured work in another stream": ("cudaErrorStreamCaptureIsolation", 905),
    "operation would make the legacy stream depend on a capturing blocking stream":
        ("cudaErrorStreamCaptureImplicit", 906),
    "operation not permitted on an event last recorded in a capturing stream": ("cudaErrorCapturedEvent", 907),
    "attempt to terminate a thread-local capture sequence from another thread":
        ("cudaErrorStreamCaptureWrongThread", 908),
    "the graph update was not performed because it included changes which violated constraints specific to "
    "instantiated graph update": ("cudaErrorGraphExecUpdateFailure", 910),
    "capturing stream has unjoined work": ("cudaErrorStreamCaptureUnjoined", 904),  # newer drivers' wording
    "too many resources requested for launch": ("cudaErrorLaunchOutOfResources", 701),
    "invalid device function": ("cudaErrorInvalidDeviceFunction", 98),
    "invalid resource handle": ("cudaErrorInvalidResourceHandle", 400),
    "invalid configuration argument": ("cudaErrorInvalidConfiguration", 9),
    "operation not supported": ("cudaErrorNotSupported", 801),
    "operation not permitted": ("cudaErrorNotPermitted", 800),
    "system not yet initialized": ("cudaErrorSystemNotReady", 802),
    "uncorrectable NVLink error detected during the execution": ("cudaErrorNvlinkUncorrectable", 220),
    "hardware stack error": ("cudaErrorHardwareStackError", 714),
    "CUDA-capable device(s) is/are busy or unavailable": ("cudaErrorDevicesUnavailable", 46),
    "peer access is not supported between these two devices": ("cudaErrorPeerAccessUnsupported", 217),
    "invalid pitch argument": ("cudaErrorInvalidPitchValue", 12),
    "invalid device pointer": ("cudaErrorInvalidDevicePointer", 17),
    "invalid memcpy direction": ("cudaErrorInvalidMemcpyDirection", 21),
    "all CUDA-capable devices are busy or unavailable": ("cudaErrorDevicesUnavailable", 46),
    "forward compatibility was attempted on non supported HW": ("cudaErrorCompatNotSupportedOnDevice", 804),
    "the provided PTX was compiled with an unsupported toolchain.": ("cudaErrorUnsupportedPtxVersion", 222),
    "the operation cannot be performed in the present state": ("cudaErrorIllegalState", 401),
    "device kernel image is invalid": ("cudaErrorInvalidKernelImage", 200),
    "invalid device context": ("cudaErrorDeviceUninitialized", 201),
    "a PTX JIT compilation failed": ("cudaErrorInvalidPtx", 218),
    "PTX JIT compiler library not found": ("cudaErrorJitCompilerNotFound", 221),
    "context is destroyed": ("cudaErrorContextIsDestroyed", 709),
    "invalid program counter": ("cudaErrorInvalidPc", 718),
    "too many blocks in cooperative launch": ("cudaErrorCooperativeLaunchTooLarge", 720),
    "system has unsupported display driver / cuda driver combination": ("cudaErrorSystemDriverMismatch", 803),
    "CUDA driver is a stub library": ("cudaErrorStubLibrary", 34),
    "unknown error": ("cudaErrorUnknown", 999),
}
_CUDA_ERRORS_LOWER = {text.lower(): value for text, value in CUDA_ERRORS.items()}
_BY_NAME = {name: (name, code) for name, code in CUDA_ERRORS.values()}
_BY_CODE = {code: (name, code) for name, code in CUDA_ERRORS.values()}
CUBLAS_STATUS = {"NOT_INITIALIZED": 1, "ALLOC_FAILED": 3, "INVALID_VALUE": 7, "ARCH_MISMATCH": 8,
                 "MAPPING_ERROR": 11, "EXECUTION_FAILED": 13, "INTERNAL_ERROR": 14, "NOT_SUPPORTED": 15,
                 "LICENSE_ERROR": 16}
GRAPH_CODES = range(900, 911)

# cuBLAS's own status strings (cublasGetStatusString), as THC ("cublas runtime error : the GPU program failed to
# execute at THCBlas.cu:278") and TransformerEngine ("cublas_gemm: cuBLAS Error: the requested functionality is not
# supported") print them
CUBLAS_TEXTS = {
    "the library was not initialized": "NOT_INITIALIZED", "resource allocation failed": "ALLOC_FAILED",
    # cublasGetStatusString's wording of two of them (TransformerEngine's "cuBLAS Error: ...")
    "the resource allocation failed": "ALLOC_FAILED",
    "an unsupported value or parameter was passed to the function": "INVALID_VALUE",
    "an invalid numeric value was used as an argument": "INVALID_VALUE",
    "an absent device architectural feature is required": "ARCH_MISMATCH",
    "an access to gpu memory space failed": "MAPPING_ERROR", "the gpu program failed to execute": "EXECUTION_FAILED",
    # the older cublasGetStatusString wording of EXECUTION_FAILED (ggml: "CUDA error: the function failed to launch
    # on the GPU" over a cublasSgemm_v2 call; the cuSPARSE and hipBLAS tables print it too)
    "the function failed to launch on the gpu": "EXECUTION_FAILED",
    "an internal operation failed": "INTERNAL_ERROR", "the requested functionality is not supported": "NOT_SUPPORTED",
    "the functionnality requested requires some license and an error was detected when trying to check the current "
    "licensing": "LICENSE_ERROR",
}


def cuda_status(text: str) -> tuple[str, int | None]:
    """The (name, code) of a CUDA error string, name, or driver enum (`CUDA_ERROR_ILLEGAL_ADDRESS`)."""
    cleaned = text.strip().rstrip(".").strip()
    known = _CUDA_ERRORS_LOWER.get(cleaned.lower())
    if known:
        return known
    for phrase, value in _CUDA_ERRORS_LOWER.items():
        if cleaned.lower().startswith(phrase):
            return value
    if cleaned in _BY_NAME:
        return _BY_NAME[cleaned]
    if cleaned in _DRIVER_ENUMS:
        return _BY_NAME[_DRIVER_ENUMS[cleaned]]
    return cleaned[:200], None


# CUresult names (driver API, as JAX/XLA print them) → the runtime's name for the same fault.
_DRIVER_ENUMS = {
    "CUDA_ERROR_OUT_OF_MEMORY": "cudaErrorMemoryAllocation", "CUDA_ERROR_ILLEGAL_ADDRESS": "cudaErrorIllegalAddress",
    "CUDA_ERROR_LAUNCH_FAILED": "cudaErrorLaunchFailure", "CUDA_ERROR_ASSERT": "cudaErrorAssert",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "cudaErrorECCUncorrectable",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "cudaErrorIllegalInstruction",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "cudaErrorMisalignedAddress",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "cudaErrorLaunchTimeout",
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": "cudaErrorStreamCaptureUnsupported",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": "cudaErrorStreamCaptureInvalidated",
    "CUDA_ERROR_UNKNOWN": "cudaErrorUnknown",
    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED": "cudaErrorStreamCaptureUnjoined",
    "CUDA_ERROR_STREAM_CAPTURE_MERGE": "cudaErrorStreamCaptureMerge",
    "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED": "cudaErrorStreamCaptureUnmatched",
    "CUDA_ERROR_STREAM_CAPTURE_ISOLATION": "cudaErrorStreamCaptureIsolation",
    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT": "cudaErrorStreamCaptureImplicit",
    "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD": "cudaErrorStreamCaptureWrongThread",
    "CUDA_ERROR_CAPTURED_EVENT": "cudaErrorCapturedEvent",
    "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE": "cudaErrorGraphExecUpdateFailure",
    "CUDA_ERROR_NOT_PERMITTED": "cudaErrorNotPermitted", "CUDA_ERROR_NOT_SUPPORTED": "cudaErrorNotSupported",
    "CUDA_ERROR_INVALID_VALUE": "cudaErrorInvalidValue", "CUDA_ERROR_NOT_INITIALIZED": "cudaErrorInitializationError",
    "CUDA_ERROR_NO_DEVICE": "cudaErrorNoDevice", "CUDA_ERROR_INVALID_DEVICE": "cudaErrorInvalidDevice",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE": "cudaErrorNvlinkUncorrectable",
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "cudaErrorHardwareStackError",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "cudaErrorLaunchOutOfResources",
    "CUDA_ERROR_INVALID_HANDLE": "cudaErrorInvalidResourceHandle",
    "CUDA_ERROR_SYSTEM_NOT_READY": "cudaErrorSystemNotReady",
}
_NAMED = re.compile(r"\b(?:cuda|hip)Error[A-Z]\w*|\bCUDA_ERROR_[A-Z_]+")


def status_for_code(code: int) -> tuple[str, int] | None:
    """The cudaError_t (name, code) a bare number stands for ("CUDA initialization failure with error 35")."""
    return _BY_CODE.get(code)


def find_status(text: str) -> tuple[str, int] | None:
    """A CUDA (or HIP) error named or worded anywhere in `text`: `cudaErrorIllegalAddress`,
    `CUDA_ERROR_ILLEGAL_ADDRESS`, `hipErrorStreamCaptureUnsupported` or a cudaGetErrorString text."""
    for match in _NAMED.finditer(text):
        name = "cuda" + match.group(0)[3:] if match.group(0).startswith("hip") else match.group(0)
        if name in _BY_NAME:
            return _BY_NAME[name]
        if name in _DRIVER_ENUMS:
            return _BY_NAME[_DRIVER_ENUMS[name]]
    lowered = text.lower()
    hits = [(lowered.find(phrase), phrase) for phrase in _CUDA_ERRORS_LOWER if phrase in lowered]
    if hits:  # the earliest phrase; the longest at one position ("operation not permitted when ..." over its head)
        at, phrase = min(hits, key=lambda hit: (hit[0], -len(hit[1])))
        return _CUDA_ERRORS_LOWER[phrase]
    return _cut_status(lowered.rstrip())


_CUT = 20  # the shortest head of a cudaGetErrorString text that a cut line may end with


def _cut_status(lowered: str) -> tuple[str, int] | None:
    """A text cut off at the end of the line (an issue title, a console's width): "... failed with error an illegal
    memory access was encounte" ends with the first 37 characters of "an illegal memory access was encountered"."""
    for phrase, value in _CUDA_ERRORS_LOWER.items():
        for size in range(len(phrase) - 1, _CUT - 1, -1):
            if lowered.endswith(phrase[:size]):
                return value
    return None


def _squash(name: str) -> str:
    return name.replace("_", "").lower()


# a status's own words without its naming scheme: "outofmemory" for cudaErrorMemoryAllocation's driver twin
# CUDA_ERROR_OUT_OF_MEMORY, ManagedCuda's ErrorOutOfMemory and CUDAdrv's ERROR_OUT_OF_MEMORY alike
_BY_SUFFIX = {
    **{_squash(name[len("cudaError"):]): (name, code) for name, code in CUDA_ERRORS.values()},
    **{_squash(enum[len("CUDA_ERROR_"):]): _BY_NAME[runtime] for enum, runtime in _DRIVER_ENUMS.items()},
}


def status_by_suffix(suffix: str) -> tuple[str, int] | None:
    """The cudaError_t (name, code) whose words are `suffix` in any naming scheme: `OutOfMemory`,
    `OUT_OF_MEMORY`, `IllegalAddress`, `ILLEGAL_ADDRESS`."""
    return _BY_SUFFIX.get(_squash(suffix))


# a status word under another naming scheme: ManagedCuda's `ErrorOutOfMemory`, CUDAdrv's `ERROR_OUT_OF_MEMORY`
SCHEME = re.compile(r"\bError([A-Z][a-z]+(?:[A-Z][a-z]+)+)\b|(?<![A-Z_])ERROR_([A-Z]+(?:_[A-Z]+)+)\b")


def find_scheme_status(text: str) -> tuple[str, int] | None:
    """The first status in `text` written under another naming scheme (`SCHEME`) that names a CUDA status."""
    for match in SCHEME.finditer(text):
        status = status_by_suffix(match.group(1) or match.group(2))
        if status is not None:
            return status
    return None
