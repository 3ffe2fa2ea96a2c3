"""The function table, outcome classification and error names."""

from __future__ import annotations

import pytest

from gpuslo.probes.ebpf.errors import error_name
from gpuslo.probes.ebpf.functions import FUNCTION_IDS, FUNCTIONS, SizeMode, classify


def fn(symbol: str):
    return FUNCTIONS[FUNCTION_IDS[symbol]]


@pytest.mark.parametrize("symbol", ["cuMemAlloc_v2", "cuMemAllocAsync", "cuMemCreate", "cuMemAllocManaged",
                                    "cudaMalloc", "cudaMallocAsync"])
def test_allocators_take_the_size_by_value_in_argument_2(symbol):
    assert (fn(symbol).size_arg, fn(symbol).size_mode) == (2, SizeMode.VALUE)


def test_graph_and_nccl_functions_have_no_size_and_async_error_is_read_through_arg_2():
    assert all(fn(s).size_mode is SizeMode.NONE for s in ("cuGraphLaunch", "cudaGraphLaunch", "ncclCommAbort"))
    assert fn("ncclCommGetAsyncError").out_arg == 2
    assert {f.library for f in FUNCTIONS} == {"libcuda", "libcudart", "libnccl"}
    assert len(FUNCTION_IDS) == len(FUNCTIONS)


@pytest.mark.parametrize(("symbol", "ret", "out", "kind"), [
    ("cuMemAlloc_v2", 0, 0, None),
    ("cuMemAlloc_v2", 2, 0, "cuda_oom"),
    ("cudaMalloc", 2, 0, "cuda_oom"),
    ("cuMemAlloc_v2", 1, 0, "cuda_error"),
    ("cuGraphLaunch", 0, 0, None),
    ("cuGraphLaunch", 400, 0, "cuda_graph_error"),
    ("cudaStreamEndCapture", 901, 0, "cuda_graph_error"),
    ("ncclCommAbort", 0, 0, "nccl_error"),
    ("ncclCommGetAsyncError", 0, 0, None),
    ("ncclCommGetAsyncError", 0, 6, "nccl_error"),
    ("ncclCommGetAsyncError", 4, 0, "nccl_error"),
])
def test_classify(symbol, ret, out, kind):
    assert classify(fn(symbol), ret, out) == kind


def test_error_names_per_api():
    assert error_name("driver", 2) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert error_name("runtime", 2) == "cudaErrorMemoryAllocation"
    assert error_name("nccl", 6) == "ncclRemoteError"
    assert error_name("driver", 901) == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert error_name("runtime", 12345) == "unknown runtime error 12345"
