/* A stand-in for libcuda/libcudart/libnccl: the real signatures and result codes, no GPU.
 * Sizes >= 1 TiB fail with out-of-memory (2). cudaMalloc calls this library's exported cuMemAlloc_v2 through the
 * PLT, as the real runtime calls the driver, so the probe sees nested calls on one thread. */
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int cudaError_t;
typedef int ncclResult_t;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUgraphExec;
typedef void *ncclComm_t;

#define FAKE_TIB (1ull << 40)
#define EXPORT __attribute__((visibility("default"), noinline))

static CUdeviceptr next_ptr = 0x100000;

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (bytesize == 0)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (bytesize >= FAKE_TIB)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *dptr = next_ptr;
    next_ptr += bytesize;
    return 0;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
    (void)stream;
    return cuMemAlloc_v2(dptr, bytesize);
}

EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags)
{
    (void)prop;
    (void)flags;
    return cuMemAlloc_v2(handle, size);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    (void)flags;
    return cuMemAlloc_v2(dptr, bytesize);
}

EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, CUstream stream)
{
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocAsync(&p, size, stream);
    *devPtr = (void *)(uintptr_t)p;
    return r == 2 ? 2 : r;
}

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, size);
    *devPtr = (void *)(uintptr_t)p;
    return r == 2 ? 2 /* cudaErrorMemoryAllocation */ : r;
}

/* hGraphExec == NULL fails like a launch of a destroyed graph: CUDA_ERROR_INVALID_HANDLE (400). */
EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    (void)hStream;
    return hGraphExec ? 0 : 400;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, void *graph, unsigned long long flags)
{
    (void)flags;
    *exec = graph;
    return graph ? 0 : 1;
}

EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, void *graph, void *resultInfo)
{
    (void)resultInfo;
    return exec && graph ? 0 : 910; /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */
}

/* A NULL stream stands for a capture that was invalidated by a forbidden call. */
EXPORT CUresult cuStreamEndCapture(CUstream stream, void **graph)
{
    *graph = stream;
    return stream ? 0 : 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
}

EXPORT cudaError_t cudaStreamEndCapture(CUstream stream, void **graph)
{
    return cuStreamEndCapture(stream, graph);
}

EXPORT cudaError_t cudaGraphLaunch(CUgraphExec exec, CUstream stream)
{
    return cuGraphLaunch(exec, stream);
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm ? 0 : 4; /* ncclInvalidArgument */
}

/* The fake communicator's address encodes the async error it reports. */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!asyncError)
        return 4;
    *asyncError = (ncclResult_t)((uintptr_t)comm & 0xff);
    return 0;
}
