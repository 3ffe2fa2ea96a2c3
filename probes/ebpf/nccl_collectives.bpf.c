/* NCCL collective progress per (process, communicator), counted in BPF and read by polling the map: no record
 * crosses a ring buffer per call. nccl_probe.py prepends GS_NCCL_COMMS and appends one stub per hooked symbol.
 *
 * Each collective entry (ncclAllReduce, ncclBroadcast, ...) bumps `calls` of its communicator and remembers the
 * op, the element count and the time. Collectives get no return probe: a uretprobe doubles the trap cost (11 µs
 * against 5.5 µs per call on the H200 machine) and the count of entries is what names a rank that is behind.
 * ncclCommInitRank(Config)
 * records the rank and world size of the communicator it creates; ncclCommAbort and a non-zero
 * ncclCommGetAsyncError are counted. User space turns a communicator whose `calls` stopped moving into one
 * `nccl_progress` event: a rank whose last collective is behind the others' never entered the next one. */
#include <uapi/linux/ptrace.h>

struct gs_comm_key {
    u32 pid;
    u32 pad;
    u64 comm;
};

struct gs_comm_state {
    u64 calls;          /* collective calls entered on this communicator */
    u64 last_enter_ns;  /* CLOCK_MONOTONIC of the last entry */
    u64 last_count;     /* element count of the last collective */
    u32 last_op;        /* index into nccl_probe.COLLECTIVES */
    u32 rank;           /* from ncclCommInitRank(Config), else 0xffffffff */
    u32 nranks;         /* world size of the communicator, else 0 */
    u32 aborts;
    s32 async_error;    /* the last non-zero ncclCommGetAsyncError result */
    u32 group_depth;    /* ncclGroupStart minus ncclGroupEnd seen on this process (not per comm: NCCL's own) */
    u32 tid;            /* the thread of the last entry */
};

/* What an entry leaves for its return, per thread. */
struct gs_pending {
    u64 comm;       /* the communicator (collectives, abort, async error) or the ncclComm_t* (init) */
    u64 out_ptr;    /* ncclResult_t* of ncclCommGetAsyncError */
    u32 kind;       /* 2 init, 3 abort, 4 async error */
    u32 rank;
    u32 nranks;
    u32 pad;
};

BPF_TABLE("lru_hash", struct gs_comm_key, struct gs_comm_state, comms, GS_NCCL_COMMS);
BPF_TABLE("lru_hash", u32, struct gs_pending, pending, 16384);
BPF_TABLE("lru_hash", u32, u32, group_depth, 4096);

static __always_inline struct gs_comm_state *gs_state(u32 pid, u64 comm)
{
    struct gs_comm_key k = {.pid = pid, .comm = comm};
    struct gs_comm_state *s = comms.lookup(&k);
    if (s)
        return s;
    struct gs_comm_state fresh = {.rank = 0xffffffff};
    comms.update(&k, &fresh);
    return comms.lookup(&k);
}

/* The argument `n` (1-based) of a call stopped at its first instruction: registers 1-6, then the stack
 * (the return address sits at the stack pointer, the 7th argument above it). */
static __always_inline u64 gs_arg(struct pt_regs *ctx, int n)
{
    switch (n) {
    case 1: return PT_REGS_PARM1(ctx);
    case 2: return PT_REGS_PARM2(ctx);
    case 3: return PT_REGS_PARM3(ctx);
    case 4: return PT_REGS_PARM4(ctx);
    case 5: return PT_REGS_PARM5(ctx);
    case 6: return PT_REGS_PARM6(ctx);
    }
    u64 value = 0;
    bpf_probe_read_user(&value, sizeof(value), (void *)(PT_REGS_SP(ctx) + 8 * (n - 6)));
    return value;
}

static __always_inline int gs_collective_enter(struct pt_regs *ctx, u32 op, int comm_arg, int count_arg)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32, tid = (u32)id;
    u64 comm = gs_arg(ctx, comm_arg);
    struct gs_comm_state *s = gs_state(pid, comm);
    if (!s)
        return 0;
    s->calls += 1;
    s->last_op = op;
    s->last_count = gs_arg(ctx, count_arg);
    s->last_enter_ns = bpf_ktime_get_ns();
    s->tid = tid;
    u32 *depth = group_depth.lookup(&pid);
    s->group_depth = depth ? *depth : 0;
    return 0;
}

static __always_inline int gs_comm_call_enter(struct pt_regs *ctx, u32 kind)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct gs_pending p = {.comm = PT_REGS_PARM1(ctx), .out_ptr = PT_REGS_PARM2(ctx), .kind = kind};
    pending.update(&tid, &p);
    return 0;
}

/* ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank): the 128-byte id is passed in
 * memory, so `rank` is the third integer register; ncclCommInitRankConfig adds a config pointer after it. */
static __always_inline int gs_init_enter(struct pt_regs *ctx)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct gs_pending p = {.comm = PT_REGS_PARM1(ctx), .kind = 2, .nranks = (u32)PT_REGS_PARM2(ctx),
                           .rank = (u32)PT_REGS_PARM3(ctx)};
    pending.update(&tid, &p);
    return 0;
}

static __always_inline int gs_leave(struct pt_regs *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32, tid = (u32)id;
    struct gs_pending *found = pending.lookup(&tid);
    if (!found)
        return 0;
    struct gs_pending p = *found;
    pending.delete(&tid);
    s32 ret = (s32)PT_REGS_RC(ctx);
    u64 comm = p.comm;
    if (p.kind == 2) { /* init: the new communicator is written through the pointer */
        if (ret != 0 || !p.comm)
            return 0;
        bpf_probe_read_user(&comm, sizeof(comm), (void *)p.comm);
    }
    struct gs_comm_state *s = gs_state(pid, comm);
    if (!s)
        return 0;
    if (p.kind == 2) {
        s->rank = p.rank;
        s->nranks = p.nranks;
    } else if (p.kind == 3) {
        s->aborts += 1;
    } else if (p.kind == 4 && p.out_ptr) {
        s32 out = 0;
        bpf_probe_read_user(&out, sizeof(out), (void *)p.out_ptr);
        if (out != 0)
            s->async_error = out;
    }
    return 0;
}

static __always_inline int gs_group(int delta)
{
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    u32 *depth = group_depth.lookup(&pid);
    if (depth) {
        if (delta > 0 || *depth > 0)
            *depth += delta;
    } else if (delta > 0) {
        u32 one = 1;
        group_depth.update(&pid, &one);
    }
    return 0;
}
