/* Drives fakecuda from the command line after "go" arrives on stdin (so a probe can attach first).
 * Arguments: NAME:SIZE for cuMemAlloc_v2 cuMemAllocAsync cuMemCreate cuMemAllocManaged cudaMalloc cudaMallocAsync;
 *            NAME:0|1 (0: fail) for cuGraphLaunch cudaGraphLaunch cudaStreamEndCapture ncclCommAbort;
 *            ncclCommGetAsyncError:CODE loop:N:SIZE (N cuMemAlloc_v2 calls, prints ns per call)
 *            wait (prints "waiting", then holds until the next line on stdin) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

typedef unsigned long long CUdeviceptr;
int cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
int cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, void *stream);
int cudaMalloc(void **devPtr, size_t size);
int cuGraphLaunch(void *exec, void *stream);
int ncclCommAbort(void *comm);
int cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags);
int cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
int cudaMallocAsync(void **devPtr, size_t size, void *stream);
int cudaStreamEndCapture(void *stream, void **graph);
int cudaGraphLaunch(void *exec, void *stream);
int ncclCommGetAsyncError(void *comm, int *asyncError);

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void run(const char *arg)
{
    char name[64];
    unsigned long long a = 0, b = 0;
    int n = sscanf(arg, "%63[^:]:%llu:%llu", name, &a, &b);
    CUdeviceptr p;
    void *vp;
    int rc = -1, out = -1;
    if (n < 1) {
        fprintf(stderr, "bad argument %s\n", arg);
        exit(2);
    }
    if (!strcmp(name, "cuMemAlloc_v2")) rc = cuMemAlloc_v2(&p, a);
    else if (!strcmp(name, "cuMemAllocAsync")) rc = cuMemAllocAsync(&p, a, NULL);
    else if (!strcmp(name, "cuMemCreate")) rc = cuMemCreate(&p, a, NULL, 0);
    else if (!strcmp(name, "cuMemAllocManaged")) rc = cuMemAllocManaged(&p, a, 1);
    else if (!strcmp(name, "cudaMallocAsync")) rc = cudaMallocAsync(&vp, a, NULL);
    else if (!strcmp(name, "cudaStreamEndCapture")) rc = cudaStreamEndCapture(a ? (void *)0x1 : NULL, &vp);
    else if (!strcmp(name, "cudaGraphLaunch")) rc = cudaGraphLaunch(a ? (void *)0x1 : NULL, NULL);
    else if (!strcmp(name, "cudaMalloc")) rc = cudaMalloc(&vp, a);
    else if (!strcmp(name, "cuGraphLaunch")) rc = cuGraphLaunch(a ? (void *)0x1 : NULL, NULL);
    else if (!strcmp(name, "ncclCommAbort")) rc = ncclCommAbort(a ? (void *)0x1 : NULL);
    else if (!strcmp(name, "ncclCommGetAsyncError")) rc = ncclCommGetAsyncError((void *)(uintptr_t)(0x1000 | a), &out);
    else if (!strcmp(name, "wait")) { /* hold until the test sends another line */
        char line[16];
        printf("waiting\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            exit(3);
        return;
    } else if (!strcmp(name, "loop")) {
        double t0 = now_ns();
        for (unsigned long long i = 0; i < a; i++)
            cuMemAlloc_v2(&p, b);
        printf("loop %llu %.1f\n", a, (now_ns() - t0) / (double)a);
        return;
    } else {
        fprintf(stderr, "unknown call %s\n", name);
        exit(2);
    }
    printf("%s %d %d\n", name, rc, out);
}

int main(int argc, char **argv)
{
    char line[16];
    printf("ready\n"); /* libraries are mapped: the test may read /proc/PID/maps now */
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "go", 2)) {
        fprintf(stderr, "expected go\n");
        return 2;
    }
    for (int i = 1; i < argc; i++)
        run(argv[i]);
    fflush(stdout);
    return 0;
}
