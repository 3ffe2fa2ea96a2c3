/* Stall-attribution signals of the serving processes: runnable-but-not-running intervals (sched), on-CPU time
 * of the serving threads (slices merged in the kernel), uninterruptible sleeps, long system calls, socket send
 * gaps (the server side of a token stream), blocking CUDA calls (uprobes), TCP retransmits on the serving port,
 * long block I/O, and page faults (counted in a map, and merged into fault bursts). Everything short is decided in the kernel:
 * only intervals above the thresholds (#defines prepended by bpf.py) cross the ring buffer.
 * Only tracepoint fields (from the running kernel's format files) are read: no task_struct offsets, which the
 * generic kernel headers BCC compiles against would get wrong on another kernel. */
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

#define AT_RUNNABLE 1
#define AT_SYSCALL 2
#define AT_CUDA 3
#define AT_SEND_GAP 4
#define AT_RETRANSMIT 5
#define AT_BLOCK_IO 6
#define AT_ONCPU 7
#define AT_BLOCKED 8
#define AT_FAULTS 9
#define AT_SAMPLE 10
#define AT_SEND_STALL 11
#define AT_ZERO_WINDOW 12

struct at_record {
    u64 start_ns;   /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
    u64 end_ns;
    u64 arg;        /* syscall nr, CUDA function id, bytes, sport << 16 | dport, slices or faults */
    u32 pid;        /* thread group of the serving process (0 where not known: retransmits, block I/O) */
    u32 tid;
    u32 other_pid;  /* the thread that ran on the CPU before this one got it back (AT_RUNNABLE) */
    u32 cpu;
    u32 kind;
    u32 pad;
    char other_comm[16];
    u64 frames[3];  /* AT_SAMPLE: the next user frames (the top one is arg) */
};

struct at_start {
    u64 ts;
    u64 arg;
};

struct at_ckey {
    u32 tid;
    u32 func;
};

BPF_RINGBUF_OUTPUT(records, AT_RINGBUF_PAGES);
BPF_HASH(watched_pids, u32, u8, 1024);        /* serving processes (tgid), set by user space */
BPF_HASH(watched_tids, u32, u32, 65536);      /* their threads -> tgid, learnt at syscalls and from /proc */
BPF_HASH(watched_cgroups, u64, u8, 4096);     /* cgroup v2 ids whose processes serve (set by user space) */
struct at_runnable {
    u64 ts;          /* when it became runnable */
    u32 other;       /* who preempted it (0: it was woken, not preempted) */
    u32 pad;
    char comm[16];
};
BPF_HASH(runnable_since, u32, struct at_runnable, 65536);
BPF_HASH(sys_start, u32, struct at_start, 65536);
BPF_HASH(last_send, u32, u64, 65536);         /* tid -> its previous send */
/* (tid << 32 | fd) -> the thread's previous write or writev to that fd: user space keeps the gaps on sockets */
BPF_TABLE("lru_hash", u64, u64, last_write, 65536);
BPF_HASH(cuda_start, struct at_ckey, u64, 65536);
/* Allocation and free calls come in bursts of short calls (a cache flush frees thousands of segments, each under
 * a millisecond): calls of one thread less than AT_BURST_GAP_NS apart are merged here, and a burst crosses the
 * ring buffer when the next one starts, if it reached AT_CUDA_NS. User space also reads the open bursts. */
struct at_burst {
    u64 start;
    u64 end;
    u32 func;   /* the last call of the burst */
    u32 calls;
};
BPF_HASH(bursts, u32, struct at_burst, 65536);
BPF_HASH(io_start, u64, u64, 65536);          /* sector -> issue time */
BPF_HASH(faults, u32, u64, 1024);             /* tgid -> user page faults */
/* On-CPU time of the serving threads: slices less than AT_ONCPU_GAP_NS apart are merged into one span, which
 * crosses the ring buffer when the next span starts, if it reached AT_ONCPU_NS. User space also reads the open
 * spans and the slice running now (switched_in). Fault bursts are merged the same way (AT_FAULT_GAP_NS). */
struct at_span {
    u64 start;
    u64 end;
    u64 count;  /* slices or faults */
};
BPF_HASH(switched_in, u32, u64, 65536);
BPF_HASH(oncpu, u32, struct at_span, 65536);
BPF_HASH(dsleep, u32, u64, 65536);           /* tid -> when it went to uninterruptible sleep */
BPF_HASH(fault_burst, u32, struct at_span, 65536);
BPF_PERCPU_ARRAY(lost, u64, 1);

static __always_inline void at_emit(u32 kind, u64 start, u64 end, u64 arg, u32 pid, u32 tid, u32 other,
                                    const char *other_comm)
{
    struct at_record *r = records.ringbuf_reserve(sizeof(struct at_record));
    if (!r) {
        u32 zero = 0;
        u64 *n = lost.lookup(&zero);
        if (n)
            *n += 1;
        return;
    }
    r->start_ns = start;
    r->end_ns = end;
    r->arg = arg;
    r->pid = pid;
    r->tid = tid;
    r->other_pid = other;
    r->cpu = bpf_get_smp_processor_id();
    r->kind = kind;
    r->pad = 0;
    __builtin_memset(r->other_comm, 0, sizeof(r->other_comm));
    __builtin_memset(r->frames, 0, sizeof(r->frames));
    if (other_comm)
        bpf_probe_read_kernel(r->other_comm, sizeof(r->other_comm), other_comm);
    records.ringbuf_submit(r, 0);
}

/* AT_COMM (a thread-name prefix, "" for all) picks the serving threads among the process's threads: their sends,
 * runnable intervals and system calls are the stream's; CUDA calls count for every thread of the process (an
 * allocator flush on another thread holds the engine thread's allocations too). */
static __always_inline int at_comm_is(const char *comm)
{
    const char want[] = AT_COMM;
#pragma unroll
    for (int i = 0; i < sizeof(want) - 1 && i < 16; i++)
        if (comm[i] != want[i])
            return 0;
    return 1;
}

static __always_inline int at_comm_self(void)
{
    char comm[16] = {};
    bpf_get_current_comm(comm, sizeof(comm));
    return at_comm_is(comm);
}

static __always_inline u32 at_watched_self(u32 *tid_out)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    *tid_out = tid;
    if (!watched_pids.lookup(&tgid)) {
#if AT_CGROUPS
        /* A process of a watched cgroup is learnt at its first system call (or CUDA call) there. */
        u64 cg = bpf_get_current_cgroup_id();
        if (!watched_cgroups.lookup(&cg))
            return 0;
        u8 one = 1;
        watched_pids.update(&tgid, &one);
#else
        return 0;
#endif
    }
    /* Learnt once: an update at every system call of a watched thread took the map's bucket lock each time. */
    if (!watched_tids.lookup(&tid))
        watched_tids.update(&tid, &tgid);
    return tgid;
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
    u32 tid = args->pid;
    if (!watched_tids.lookup(&tid) || !at_comm_is(args->comm))
        return 0;
    struct at_runnable r = {.ts = bpf_ktime_get_ns()};
    runnable_since.update(&tid, &r);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
    u32 tid = args->pid;
    if (!watched_tids.lookup(&tid) || !at_comm_is(args->comm))
        return 0;
    struct at_runnable r = {.ts = bpf_ktime_get_ns()};
    runnable_since.update(&tid, &r);
    return 0;
}

/* A watched serving thread leaves the CPU: its slice joins the open on-CPU span (or closes it and opens one). */
static __always_inline void at_oncpu_out(u32 prev, u32 tgid, u64 now)
{
    u64 *in = switched_in.lookup(&prev);
    if (!in)
        return;
    u64 start = *in;
    switched_in.delete(&prev);
    struct at_span *span = oncpu.lookup(&prev);
    if (span && start <= span->end + AT_ONCPU_GAP_NS) {
        span->end = now;
        span->count += 1;
        return;
    }
    if (span && span->end - span->start >= AT_ONCPU_NS)
        at_emit(AT_ONCPU, span->start, span->end, span->count, tgid, prev, 0, 0);
    struct at_span fresh = {.start = start, .end = now, .count = 1};
    oncpu.update(&prev, &fresh);
}

/* A serving thread seen running (at a system call or an on-CPU sample) with no slice open: it got the CPU before
 * it was watched (watch() after its start) or before it took the serving name (prctl(PR_SET_NAME) mid-slice), so
 * sched_switch never opened its slice. It opens now; without this a thread that keeps its CPU (an idle core, a
 * busy loop) would have no on-CPU time until its first switch out and in. */
static __always_inline void at_running(u32 tid, u64 now)
{
    switched_in.lookup_or_try_init(&tid, &now);
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid, next = args->next_pid;
    u32 *prev_tgid = watched_tids.lookup(&prev);
    if (prev_tgid && at_comm_is(args->prev_comm)) {
        u32 ptgid = *prev_tgid;
        at_oncpu_out(prev, ptgid, now);
        /* Preempted while running (no sleep-state bit): it is runnable from now on. */
        if ((args->prev_state & 0xff) == 0) {
            struct at_runnable r = {.ts = now, .other = next};
            bpf_probe_read_kernel(r.comm, sizeof(r.comm), args->next_comm);
            runnable_since.update(&prev, &r);
        } else if (args->prev_state & 0x2) { /* TASK_UNINTERRUPTIBLE: I/O or another kernel wait */
            dsleep.update(&prev, &now);
        }
    }
    u32 *tgid = watched_tids.lookup(&next);
    if (!tgid)
        return 0;
    if (at_comm_is(args->next_comm)) {
        switched_in.update(&next, &now);
        u64 *d = dsleep.lookup(&next);
        if (d) {
            u64 since = *d;
            dsleep.delete(&next);
            if (now - since >= AT_BLOCKED_NS)
                at_emit(AT_BLOCKED, since, now, 0, *tgid, next, 0, 0);
        }
    }
    struct at_runnable *since = runnable_since.lookup(&next);
    if (!since)
        return 0;
    struct at_runnable r = *since;
    runnable_since.delete(&next);
    if (now - r.ts >= AT_RUNNABLE_NS) {
        if (r.other)
            at_emit(AT_RUNNABLE, r.ts, now, 1, *tgid, next, r.other, r.comm);
        else
            at_emit(AT_RUNNABLE, r.ts, now, 0, *tgid, next, prev, args->prev_comm);
    }
    return 0;
}

TRACEPOINT_PROBE(raw_syscalls, sys_enter)
{
    u32 tid;
    u32 tgid = at_watched_self(&tid);
    if (!tgid || !at_comm_self())
        return 0;
    u64 now = bpf_ktime_get_ns();
    at_running(tid, now);
    long nr = args->id;
    if (nr == 44 || nr == 46) { /* sendto, sendmsg: Python's socket.send; a send gap is the server's stall */
        u64 *last = last_send.lookup(&tid);
        if (last && now - *last >= AT_SEND_GAP_NS)
            at_emit(AT_SEND_GAP, *last, now, nr, tgid, tid, 0, 0);
        last_send.update(&tid, &now);
    }
    u64 fd = (u32)args->args[0];
    if (nr == 1 || nr == 20) { /* write, writev (Go, Node, asyncio transports): a gap on a socket is a send gap */
        u64 key = (u64)tid << 32 | fd;
        u64 *last = last_write.lookup(&key);
        if (last && now - *last >= AT_SEND_GAP_NS)
            at_emit(AT_SEND_GAP, *last, now, nr | fd << 32, tgid, tid, 0, 0);
        last_write.update(&key, &now);
    }
    struct at_start s = {.ts = now, .arg = nr};
    /* ioctl, write, writev: the fd rides in the upper half, so user space can name the file (/dev/nvidia*, a
     * socket) */
    if (nr == 16 || nr == 1 || nr == 20)
        s.arg |= fd << 32;
    sys_start.update(&tid, &s);
    return 0;
}

TRACEPOINT_PROBE(raw_syscalls, sys_exit)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct at_start *s = sys_start.lookup(&tid);
    if (!s)
        return 0;
    u64 now = bpf_ktime_get_ns();
    struct at_start st = *s;
    sys_start.delete(&tid);
    if (now - st.ts >= AT_SYSCALL_NS)
        at_emit(AT_SYSCALL, st.ts, now, st.arg, bpf_get_current_pid_tgid() >> 32, tid, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(exceptions, page_fault_user)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!watched_pids.lookup(&tgid))
        return 0;
    u64 zero = 0;
    u64 *n = faults.lookup_or_try_init(&tgid, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    if (!at_comm_self())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 now = bpf_ktime_get_ns();
    struct at_span *b = fault_burst.lookup(&tid);
    if (b && now <= b->end + AT_FAULT_GAP_NS) {
        b->end = now;
        b->count += 1;
        return 0;
    }
    if (b && b->count >= AT_FAULT_MIN && b->end - b->start >= AT_FAULT_NS)
        at_emit(AT_FAULTS, b->start, b->end, b->count, tgid, tid, 0, 0);
    struct at_span fresh = {.start = now, .end = now, .count = 1};
    fault_burst.update(&tid, &fresh);
    return 0;
}

TRACEPOINT_PROBE(tcp, tcp_retransmit_skb)
{
    u16 sport = args->sport, dport = args->dport;
    if (AT_PORT && sport != AT_PORT && dport != AT_PORT)
        return 0;
    u64 now = bpf_ktime_get_ns();
    at_emit(AT_RETRANSMIT, now, now, ((u64)sport << 16) | dport, 0, 0, 0, 0);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_issue)
{
    u64 sector = args->sector, now = bpf_ktime_get_ns();
    io_start.update(&sector, &now);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete)
{
    u64 sector = args->sector;
    u64 *t = io_start.lookup(&sector);
    if (!t)
        return 0;
    u64 start = *t, now = bpf_ktime_get_ns();
    io_start.delete(&sector);
    if (now - start >= AT_BLOCK_NS)
        at_emit(AT_BLOCK_IO, start, now, (u64)args->nr_sector * 512, 0, 0, 0, 0);
    return 0;
}

static __always_inline int at_cuda_enter(u32 func)
{
    u32 tid;
    if (!at_watched_self(&tid))
        return 0;
    struct at_ckey k = {.tid = tid, .func = func};
    u64 now = bpf_ktime_get_ns();
    cuda_start.update(&k, &now);
    return 0;
}

static __always_inline int at_cuda_leave(u32 func, int is_alloc)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    struct at_ckey k = {.tid = tid, .func = func};
    u64 *t = cuda_start.lookup(&k);
    if (!t)
        return 0;
    u64 start = *t, now = bpf_ktime_get_ns();
    cuda_start.delete(&k);
    if (!is_alloc) {
        if (now - start >= AT_CUDA_NS)
            at_emit(AT_CUDA, start, now, func, id >> 32, tid, 0, 0);
        return 0;
    }
    struct at_burst *b = bursts.lookup(&tid);
    if (b && start <= b->end + AT_BURST_GAP_NS) {
        if (now > b->end)
            b->end = now;
        b->func = func;
        b->calls += 1;
        return 0;
    }
    if (b && b->end - b->start >= AT_CUDA_NS)
        at_emit(AT_CUDA, b->start, b->end, ((u64)b->calls << 32) | b->func, id >> 32, tid, 0, 0);
    struct at_burst fresh = {.start = start, .end = now, .func = func, .calls = 1};
    bursts.update(&tid, &fresh);
    return 0;
}

/* On-CPU samples of the serving threads (a software cpu-clock perf event): the top user-space frames, so user
 * space can tell time spent inside the CUDA libraries (spinning in a launch or a wait, maybe in the vDSO's clock
 * under it) from the thread's own work. */
int at_sample(struct bpf_perf_event_data *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    u32 *tgid = watched_tids.lookup(&tid);
    if (!tgid || !at_comm_self())
        return 0;
    at_running(tid, bpf_ktime_get_ns());
    u64 stack[4] = {};
    if (bpf_get_stack(ctx, stack, sizeof(stack), BPF_F_USER_STACK) <= 0)
        return 0;
    struct at_record *r = records.ringbuf_reserve(sizeof(struct at_record));
    if (!r)
        return 0;
    __builtin_memset(r, 0, sizeof(*r));
    r->start_ns = r->end_ns = bpf_ktime_get_ns();
    r->arg = stack[0];
    r->frames[0] = stack[1];
    r->frames[1] = stack[2];
    r->frames[2] = stack[3];
    r->pid = *tgid;
    r->tid = tid;
    r->cpu = bpf_get_smp_processor_id();
    r->kind = AT_SAMPLE;
    records.ringbuf_submit(r, 0);
    return 0;
}

#if AT_SEND_LENGTH
struct at_sq {
    u64 since;  /* the first send that found the queue full */
    u32 tgid;
    u32 tid;
};
BPF_HASH(send_full, u64, struct at_sq, 4096);  /* socket -> its open send-queue stall */
#if AT_PORT
/* Sockets whose local port is AT_PORT, with their receive-side history: tcp_probe fires for each segment they
 * receive, before it is processed, so the window it shows is the one the previous segment advertised. A zero
 * window (the client does not read) began at the segment before the first that shows it, and ended at the
 * segment before the first that shows it open again. */
struct at_win {
    u64 last;        /* the previous segment's arrival */
    u64 zero_since;  /* 0: the window is open */
};
BPF_TABLE("lru_hash", u64, struct at_win, port_socks, 16384);

TRACEPOINT_PROBE(tcp, tcp_probe)
{
    if (args->sport != AT_PORT)
        return 0;
    u64 sk = (u64)args->skaddr, now = bpf_ktime_get_ns();
    struct at_win *w = port_socks.lookup(&sk);
    if (!w) {
        struct at_win fresh = {.last = now};
        port_socks.update(&sk, &fresh);
        return 0;
    }
    if (args->snd_wnd == 0) {
        if (!w->zero_since)
            w->zero_since = w->last;
    } else if (w->zero_since) {
        if (w->last - w->zero_since >= AT_SEND_STALL_NS)
            at_emit(AT_ZERO_WINDOW, w->zero_since, w->last, AT_PORT, 0, 0, 0, 0);
        w->zero_since = 0;
    }
    w->last = now;
    return 0;
}
#endif

/* A socket leaving ESTABLISHED (or CLOSE_WAIT) ends what is tracked of it: a stall open when it closed would
 * otherwise stay open (in user space's open stalls) for good, and its address may be reused. */
TRACEPOINT_PROBE(sock, inet_sock_set_state)
{
    if (args->protocol != 6 || (args->oldstate != 1 && args->oldstate != 8))
        return 0;
    u64 sk = (u64)args->skaddr;
    send_full.delete(&sk);
#if AT_PORT
    port_socks.delete(&sk);
#endif
    return 0;
}

TRACEPOINT_PROBE(sock, sock_send_length)
{
    if (args->protocol != 6) /* IPPROTO_TCP */
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    if (!watched_tids.lookup(&tid) || !at_comm_self())
        return 0;
    u64 sk = (u64)args->sk;
#if AT_PORT
    if (!port_socks.lookup(&sk))
        return 0;
#endif
    int ret = args->ret;
    u64 now = bpf_ktime_get_ns();
    if (ret == -11) { /* EAGAIN: no room in the send queue; the first one opens the stall */
        struct at_sq fresh = {.since = now, .tgid = id >> 32, .tid = tid};
        send_full.lookup_or_try_init(&sk, &fresh);
        return 0;
    }
    struct at_sq *open = send_full.lookup(&sk);
    if (!open)
        return 0;
    struct at_sq st = *open;
    send_full.delete(&sk);
    if (ret >= 0 && now - st.since >= AT_SEND_STALL_NS)
        at_emit(AT_SEND_STALL, st.since, now, AT_PORT, st.tgid, st.tid, 0, 0);
    return 0;
}
#endif
