/* Uprobes/uretprobes on CUDA driver, runtime and NCCL entry points.
 * probe.py prepends the #defines (GS_NFUNCS, GS_FILTER_PIDS, GS_SEND_SUCCESS, GS_RINGBUF_PAGES) and appends one
 * entry/return stub pair per hooked function, each calling the inline helpers below with its constants. */
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
#include "record.h"

/* What an entry leaves for its return. Keyed by (tid, function) so cudaMalloc -> cuMemAlloc_v2 on one thread keeps
 * two separate states; a recursive call of the same function on one thread would share a slot (none of ours do). */
struct gs_key {
    u32 tid;
    u32 func_id;
};

struct gs_entry {
    u64 start_ns;
    u64 size;
    u64 out_ptr;
    u32 depth;
    u32 pad;
};

BPF_RINGBUF_OUTPUT(events, GS_RINGBUF_PAGES);
/* LRU: slots of exited threads, and entries whose return never fired, age out instead of filling the map. */
BPF_TABLE("lru_hash", struct gs_key, struct gs_entry, entries, 16384);
BPF_TABLE("lru_hash", u32, u32, depths, 16384);
BPF_PERCPU_ARRAY(ok_calls, u64, GS_NFUNCS);
BPF_PERCPU_ARRAY(dropped, u64, 1);
#if GS_FILTER_PIDS
BPF_HASH(watched_pids, u32, u8, 4096);
#endif

static __always_inline int gs_wanted(u32 pid)
{
#if GS_FILTER_PIDS
    return watched_pids.lookup(&pid) != NULL;
#else
    return 1;
#endif
}

/* size_mode: 0 none, 1 the argument is the size, 2 the argument points to the size. */
static __always_inline int gs_enter(u32 func_id, u64 arg, int size_mode, u64 out_ptr)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32, tid = (u32)id;
    if (!gs_wanted(pid))
        return 0;
    u64 size = 0;
    if (size_mode == 1)
        size = arg;
    else if (size_mode == 2)
        bpf_probe_read_user(&size, sizeof(size), (void *)arg);
    /* Steady state writes both maps in place through lookup pointers: an update costs several lookups. */
    u32 depth = 0;
    u32 *d = depths.lookup(&tid);
    if (d) {
        depth = *d;
        *d = depth + 1;
    } else {
        u32 one = 1;
        depths.update(&tid, &one);
    }
    struct gs_key k = {.tid = tid, .func_id = func_id};
    struct gs_entry *slot = entries.lookup(&k);
    if (slot) {
        slot->size = size;
        slot->out_ptr = out_ptr;
        slot->depth = depth;
        slot->start_ns = bpf_ktime_get_ns();
    } else {
        struct gs_entry e = {.size = size, .out_ptr = out_ptr, .depth = depth};
        e.start_ns = bpf_ktime_get_ns();
        entries.update(&k, &e);
    }
    return 0;
}

/* always_send: report even a success (ncclCommAbort). has_out: read a 32-bit result through out_ptr. */
static __always_inline int gs_leave(u32 func_id, s32 ret, int always_send, int has_out)
{
    u64 now = bpf_ktime_get_ns();
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32, tid = (u32)id;
    struct gs_key k = {.tid = tid, .func_id = func_id};
    struct gs_entry *e = entries.lookup(&k);
    if (!e || !e->start_ns)
        return 0;
    struct gs_entry st = *e;
    e->start_ns = 0; /* consumed; the slot stays for this thread's next call (LRU evicts dead threads) */
    u32 *d = depths.lookup(&tid);
    if (d)
        *d = st.depth;
    s32 out = 0;
    if (has_out && st.out_ptr)
        bpf_probe_read_user(&out, sizeof(out), (void *)st.out_ptr);
    if (ret == 0 && out == 0 && !always_send) {
        u32 slot = func_id;
        u64 *n = ok_calls.lookup(&slot);
        if (n)
            *n += 1;
        if (!GS_SEND_SUCCESS)
            return 0;
    }
    struct gs_record *r = events.ringbuf_reserve(sizeof(struct gs_record));
    if (!r) {
        u32 zero = 0;
        u64 *n = dropped.lookup(&zero);
        if (n)
            *n += 1;
        return 0;
    }
    r->ts_ns = now;
    r->duration_ns = now - st.start_ns;
    r->size = st.size;
    r->out_value = out;
    r->pid = pid;
    r->tid = tid;
    r->ret = ret;
    r->func_id = func_id;
    r->depth = st.depth;
    r->flags = has_out ? GS_FLAG_HAS_OUT : 0;
    bpf_get_current_comm(&r->comm, sizeof(r->comm));
    events.ringbuf_submit(r, 0);
    return 0;
}
