"""Names of CUDA driver (CUresult), runtime (cudaError_t) and NCCL (ncclResult_t) result codes."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

DRIVER_ERRORS: Mapping[int, str] = MappingProxyType({
    0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 5: "CUDA_ERROR_PROFILER_DISABLED",
    34: "CUDA_ERROR_STUB_LIBRARY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE", 102: "CUDA_ERROR_DEVICE_NOT_LICENSED", 200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT", 205: "CUDA_ERROR_MAP_FAILED", 206: "CUDA_ERROR_UNMAP_FAILED",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    215: "CUDA_ERROR_UNSUPPORTED_LIMIT", 217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    218: "CUDA_ERROR_INVALID_PTX", 219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", 220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND",
    400: "CUDA_ERROR_INVALID_HANDLE", 401: "CUDA_ERROR_ILLEGAL_STATE", 500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT", 704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
    708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED", 710: "CUDA_ERROR_ASSERT",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION", 716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    719: "CUDA_ERROR_LAUNCH_FAILED", 720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", 904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", 906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    907: "CUDA_ERROR_CAPTURED_EVENT", 908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", 909: "CUDA_ERROR_TIMEOUT",
    910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", 999: "CUDA_ERROR_UNKNOWN",
})

RUNTIME_ERRORS: Mapping[int, str] = MappingProxyType({
    0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError", 4: "cudaErrorCudartUnloading", 9: "cudaErrorInvalidConfiguration",
    34: "cudaErrorStubLibrary", 35: "cudaErrorInsufficientDriver", 46: "cudaErrorDevicesUnavailable",
    100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 201: "cudaErrorDeviceUninitialized",
    209: "cudaErrorNoKernelImageForDevice", 214: "cudaErrorECCUncorrectable", 400: "cudaErrorInvalidResourceHandle",
    401: "cudaErrorIllegalState", 500: "cudaErrorSymbolNotFound", 600: "cudaErrorNotReady",
    700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources", 702: "cudaErrorLaunchTimeout",
    710: "cudaErrorAssert", 719: "cudaErrorLaunchFailure", 800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported", 900: "cudaErrorStreamCaptureUnsupported",
    901: "cudaErrorStreamCaptureInvalidated", 902: "cudaErrorStreamCaptureMerge",
    903: "cudaErrorStreamCaptureUnmatched", 904: "cudaErrorStreamCaptureUnjoined",
    905: "cudaErrorStreamCaptureIsolation", 906: "cudaErrorStreamCaptureImplicit",
    907: "cudaErrorCapturedEvent", 908: "cudaErrorStreamCaptureWrongThread", 909: "cudaErrorTimeout",
    910: "cudaErrorGraphExecUpdateFailure", 999: "cudaErrorUnknown",
})

NCCL_ERRORS: Mapping[int, str] = MappingProxyType({
    0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
    4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
})

_TABLES: Mapping[str, Mapping[int, str]] = MappingProxyType(
    {"driver": DRIVER_ERRORS, "runtime": RUNTIME_ERRORS, "nccl": NCCL_ERRORS})


def error_name(api: str, code: int) -> str:
    """The symbolic name of a result code of api ("driver", "runtime" or "nccl"); unknown codes say so."""
    return _TABLES[api].get(code, f"unknown {api} error {code}")
