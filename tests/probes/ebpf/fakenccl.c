/* A stand-in for libnccl.so.2 with NCCL's real signatures (a 128-byte ncclUniqueId passed by value, the
 * 7th and 8th arguments of ncclReduce on the stack); no GPU, every call succeeds at once. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default"), noinline))
typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct fake_comm { int rank, nranks; } *ncclComm_t;
typedef int ncclDataType_t, ncclRedOp_t;
typedef void *cudaStream_t;
volatile int fake_nccl_sink;

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    struct fake_comm *c = malloc(sizeof *c);
    c->rank = rank;
    c->nranks = nranks + id.internal[0] * 0;
    *comm = c;
    return 0;
}
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config)
{
    return ncclCommInitRank(comm, nranks, id, rank) + (config ? 0 : 0);
}
EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream)
{
    fake_nccl_sink += (int)count + t + op + (s != r) + (stream != 0);
    return comm ? 0 : 4;
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                                  cudaStream_t stream)
{
    fake_nccl_sink += (int)count + t + root + (s != r) + (stream != 0);
    return comm ? 0 : 4;
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                               ncclComm_t comm, cudaStream_t stream)
{
    fake_nccl_sink += (int)count + t + op + root + (s != r) + (stream != 0);
    return comm ? 0 : 4;
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t comm,
                                  cudaStream_t stream)
{
    fake_nccl_sink += (int)count + t + (s != r) + (stream != 0);
    return comm ? 0 : 4;
}
EXPORT ncclResult_t ncclGroupStart(void) { fake_nccl_sink++; return 0; }
EXPORT ncclResult_t ncclGroupEnd(void) { fake_nccl_sink--; return 0; }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return comm ? 0 : 4; }
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    *err = comm && comm->rank == 1 ? 6 : 0; /* rank 1 reports ncclRemoteError */
    return 0;
}
