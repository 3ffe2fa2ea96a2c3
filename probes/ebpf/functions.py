"""The table of hooked CUDA/NCCL functions and how a call's outcome maps to an event kind."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

LIBCUDA = "libcuda"
LIBCUDART = "libcudart"
LIBNCCL = "libnccl"
LIBRARIES = (LIBCUDA, LIBCUDART, LIBNCCL)

# Both CUDA_ERROR_OUT_OF_MEMORY (driver) and cudaErrorMemoryAllocation (runtime) are 2.
OUT_OF_MEMORY = 2


class SizeMode(Enum):
    """How the requested size reaches the function."""

    NONE = 0
    VALUE = 1
    POINTER = 2  # the argument points to the size; read at entry


class Role(Enum):
    """What a function does, which decides the event kind of a failure."""

    ALLOC = "alloc"
    GRAPH = "graph"
    NCCL_ABORT = "nccl_abort"
    NCCL_ASYNC_ERROR = "nccl_async_error"


@dataclass(frozen=True)
class Function:
    """One hooked symbol: its library, where its size and out-value live (1-based argument numbers)."""

    library: str
    symbol: str
    role: Role
    size_arg: int | None = None
    size_mode: SizeMode = SizeMode.NONE
    out_arg: int | None = None  # a 32-bit result written through this pointer, read at return

    @property
    def api(self) -> str:
        """Which error-code table the return value belongs to: driver, runtime or nccl."""
        return {LIBCUDA: "driver", LIBCUDART: "runtime", LIBNCCL: "nccl"}[self.library]

    @property
    def always_send(self) -> bool:
        """Reported even when it returns success (an abort is news whatever it returns)."""
        return self.role is Role.NCCL_ABORT


def _alloc(library: str, symbol: str, size_arg: int = 2) -> Function:
    return Function(library, symbol, Role.ALLOC, size_arg, SizeMode.VALUE)


def _graph(library: str, symbol: str) -> Function:
    return Function(library, symbol, Role.GRAPH)


# The index in this tuple is the function id the BPF program records; append only.
FUNCTIONS: tuple[Function, ...] = (
    _alloc(LIBCUDA, "cuMemAlloc_v2"),        # (CUdeviceptr*, size_t)
    _alloc(LIBCUDA, "cuMemAllocAsync"),      # (CUdeviceptr*, size_t, CUstream)
    _alloc(LIBCUDA, "cuMemCreate"),          # (handle*, size_t, const prop*, unsigned long long flags)
    _alloc(LIBCUDA, "cuMemAllocManaged"),    # (CUdeviceptr*, size_t, unsigned int flags)
    _graph(LIBCUDA, "cuGraphInstantiateWithFlags"),
    _graph(LIBCUDA, "cuGraphLaunch"),
    _graph(LIBCUDA, "cuGraphExecUpdate_v2"),
    _graph(LIBCUDA, "cuStreamEndCapture"),
    _alloc(LIBCUDART, "cudaMalloc"),         # (void**, size_t)
    _alloc(LIBCUDART, "cudaMallocAsync"),    # (void**, size_t, cudaStream_t)
    _graph(LIBCUDART, "cudaGraphLaunch"),
    _graph(LIBCUDART, "cudaStreamEndCapture"),
    Function(LIBNCCL, "ncclCommAbort", Role.NCCL_ABORT),
    Function(LIBNCCL, "ncclCommGetAsyncError", Role.NCCL_ASYNC_ERROR, out_arg=2),  # (comm, ncclResult_t*)
)

FUNCTION_IDS: dict[str, int] = {f.symbol: i for i, f in enumerate(FUNCTIONS)}


def classify(function: Function, ret: int, out_value: int = 0) -> str | None:
    """The event kind of one call's outcome, or None for a success (counted, not reported)."""
    if function.role is Role.NCCL_ABORT:
        return "nccl_error"
    if function.role is Role.NCCL_ASYNC_ERROR:
        return "nccl_error" if ret or out_value else None
    if ret == 0:
        return None
    if function.role is Role.ALLOC:
        return "cuda_oom" if ret == OUT_OF_MEMORY else "cuda_error"
    return "cuda_graph_error"
