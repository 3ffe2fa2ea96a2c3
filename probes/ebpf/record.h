/* The record one hooked call sends through the ring buffer; mirrored by record.py (RECORD_FIELDS).
 * Fields are ordered widest first so the layout has no padding on any ABI we run on. */
#ifndef GPUSLO_RECORD_H
#define GPUSLO_RECORD_H

#define GS_COMM_LEN 16
#define GS_FLAG_HAS_OUT 1u /* out_value was read through the out-pointer at return */

struct gs_record {
    __u64 ts_ns;        /* bpf_ktime_get_ns() at return: CLOCK_MONOTONIC */
    __u64 duration_ns;  /* return minus entry */
    __u64 size;         /* requested bytes, 0 when the function takes none */
    __s64 out_value;    /* value written through an out-pointer (ncclCommGetAsyncError) */
    __u32 pid;          /* thread group id: the process */
    __u32 tid;
    __s32 ret;          /* CUresult / cudaError_t / ncclResult_t */
    __u32 func_id;      /* index into functions.FUNCTIONS */
    __u32 depth;        /* hooked calls already open on this thread at entry (0: outermost) */
    __u32 flags;        /* GS_FLAG_* */
    char comm[GS_COMM_LEN];
};

#endif
