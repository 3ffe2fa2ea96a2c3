/* One "rank" of a fake NCCL job: init a communicator, print "ready", wait for a line, run the collectives it was
 * told (allreduce:N reduce:N allgather:N broadcast:N group abort asyncerror), print "done", wait for a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, int t, int op, ncclComm_t comm, void *stream);
ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, int t, int root, ncclComm_t comm, void *stream);
ncclResult_t ncclReduce(const void *s, void *r, size_t count, int t, int op, int root, ncclComm_t comm, void *st);
ncclResult_t ncclAllGather(const void *s, void *r, size_t count, int t, ncclComm_t comm, void *stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);

int main(int argc, char **argv)
{
    char line[64];
    ncclUniqueId id;
    ncclComm_t comm;
    int rank = atoi(getenv("RANK") ? getenv("RANK") : "0"), world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
    memset(&id, 7, sizeof id);
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    if (ncclCommInitRank(&comm, world, id, rank) != 0)
        return 2;
    for (int i = 1; i < argc; i++) {
        int n = strchr(argv[i], ':') ? atoi(strchr(argv[i], ':') + 1) : 1;
        for (int k = 0; k < n; k++) {
            if (!strncmp(argv[i], "allreduce", 9))
                ncclAllReduce(&id, &id, 1024 + k, 7, 0, comm, NULL);
            else if (!strncmp(argv[i], "reduce", 6))
                ncclReduce(&id, &id, 2048, 7, 0, 0, comm, NULL);
            else if (!strncmp(argv[i], "allgather", 9))
                ncclAllGather(&id, &id, 4096, 7, comm, NULL);
            else if (!strncmp(argv[i], "broadcast", 9))
                ncclBroadcast(&id, &id, 512, 7, 0, comm, NULL);
            else if (!strcmp(argv[i], "group")) {
                ncclGroupStart();
                ncclAllReduce(&id, &id, 8, 7, 0, comm, NULL);
                ncclGroupEnd();
            } else if (!strcmp(argv[i], "abort"))
                ncclCommAbort(comm);
            else if (!strcmp(argv[i], "asyncerror")) {
                ncclResult_t err;
                ncclCommGetAsyncError(comm, &err);
            }
        }
    }
    printf("done\n");
    fflush(stdout);
    return fgets(line, sizeof line, stdin) ? 0 : 3;
}
