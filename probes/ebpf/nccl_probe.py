"""NcclProbe: which collective each rank of a job last entered, counted in BPF on the libnccl the job loads.

Every collective call is counted per (process, communicator) in a BPF map (nccl_collectives.bpf.c); nothing is
sent per call. Each poll reads the map and reports a communicator as a `nccl_progress` event when its state says
something a rule needs: it went idle (no collective entered for `idle_after_s` after it had some), it was
aborted or got an async error, or, while it progresses, at most once per `heartbeat_s`. `lag` is how many
collectives this rank is behind the most advanced rank of the same communicator seen on this host: a rank idle
with a lag never entered the collective the others wait in.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.ebpf.preflight import PreflightPaths, preflight
from gpuslo.probes.probe_api import new_event_id

log = logging.getLogger(__name__)
_HERE = Path(__file__).parent
NO_RANK = 0xFFFFFFFF


@dataclass(frozen=True)
class Collective:
    """A hooked collective: its symbol, the op name PyTorch's watchdog prints, where comm and count are."""

    symbol: str
    op: str
    comm_arg: int
    count_arg: int


# The index is the op id the BPF program records; append only.
COLLECTIVES: tuple[Collective, ...] = (
    Collective("ncclAllReduce", "ALLREDUCE", 6, 3),       # (send, recv, count, type, op, comm, stream)
    Collective("ncclBroadcast", "BROADCAST", 6, 3),       # (send, recv, count, type, root, comm, stream)
    Collective("ncclBcast", "BROADCAST", 5, 2),           # (buff, count, type, root, comm, stream)
    Collective("ncclReduce", "REDUCE", 7, 3),             # (send, recv, count, type, op, root, comm, stream)
    Collective("ncclAllGather", "ALLGATHER", 5, 3),       # (send, recv, sendcount, type, comm, stream)
    Collective("ncclReduceScatter", "REDUCE_SCATTER", 6, 3),  # (send, recv, recvcount, type, op, comm, stream)
    Collective("ncclSend", "SEND", 5, 2),                 # (send, count, type, peer, comm, stream)
    Collective("ncclRecv", "RECV", 5, 2),                 # (recv, count, type, peer, comm, stream)
)
# Communicator calls with a return worth reading: kind 2 init, 3 abort, 4 async error (see the BPF source).
COMM_CALLS: Mapping[str, str] = {
    "ncclCommInitRank": "gs_init_enter(ctx)", "ncclCommInitRankConfig": "gs_init_enter(ctx)",
    "ncclCommAbort": "gs_comm_call_enter(ctx, 3)", "ncclCommGetAsyncError": "gs_comm_call_enter(ctx, 4)",
}
GROUP_CALLS: Mapping[str, int] = {"ncclGroupStart": 1, "ncclGroupEnd": -1}
_LIBNCCL = re.compile(r"^libnccl\.so(\.\d+)*$")


def bpf_text(max_comms: int = 4096) -> str:
    """The complete BPF program with one stub per hooked symbol (what `--print-bpf` would print)."""
    stubs = [f"int gs_c_{i}(struct pt_regs *ctx) {{ /* {c.symbol} */\n"
             f"    return gs_collective_enter(ctx, {i}, {c.comm_arg}, {c.count_arg});\n}}\n"
             for i, c in enumerate(COLLECTIVES)]
    stubs += [f"int gs_m_{name}(struct pt_regs *ctx) {{ return {call}; }}\n" for name, call in COMM_CALLS.items()]
    stubs += [f"int gs_g_{name}(struct pt_regs *ctx) {{ return gs_group({delta}); }}\n"
              for name, delta in GROUP_CALLS.items()]
    stubs.append("int gs_ret(struct pt_regs *ctx) { return gs_leave(ctx); }\n")
    return f"#define GS_NCCL_COMMS {max_comms}\n" + (_HERE / "nccl_collectives.bpf.c").read_text() + "\n" + \
        "".join(stubs)


def libnccl_in_use(proc_root: str = "/proc", pids: Iterable[int] | None = None) -> dict[str, tuple[int, ...]]:
    """Each libnccl mapped by a running process (a wheel's nvidia/nccl/lib copy included) → those pids."""
    found: dict[str, list[int]] = {}
    candidates = pids if pids is not None else (int(p) for p in os.listdir(proc_root) if p.isdigit())
    for pid in candidates:
        try:
            text = Path(proc_root, str(pid), "maps").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and _LIBNCCL.match(os.path.basename(parts[5].strip())):
                path = parts[5].strip()
                if pid not in found.setdefault(path, []):
                    found[path].append(pid)
    return {path: tuple(pids_) for path, pids_ in found.items()}


def process_identity(pid: int, proc_root: str = "/proc") -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK and the job id torchrun/Slurm give a process (its environment)."""
    try:
        raw = Path(proc_root, str(pid), "environ").read_bytes()
    except OSError:
        return {}
    env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
    job = env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or env.get("GPUSLO_JOB")
    if not job and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        job = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    out = {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if k in env}
    if job and job != "none":
        out["job"] = job[:200]
    return out


@dataclass
class _Seen:
    """What the last report of one communicator said, and when."""

    calls: int = -1
    state: str = ""
    aborts: int = 0
    async_error: int = 0
    reported_mono_ns: int = 0


@dataclass(frozen=True)
class CommState:
    """One (process, communicator) as the BPF map holds it."""

    pid: int
    comm: int
    calls: int
    last_enter_ns: int
    last_count: int
    last_op: int
    rank: int | None
    nranks: int | None
    aborts: int
    async_error: int

    @property
    def op(self) -> str:
        return COLLECTIVES[self.last_op].op if 0 <= self.last_op < len(COLLECTIVES) else "UNKNOWN"


class NcclProbe:
    """Hooks the collectives of every libnccl given; start(), then poll() for events, then close()."""

    def __init__(self, libraries: Iterable[str], host: str, *, idle_after_s: float = 10.0,
                 heartbeat_s: float = 30.0, preflight_paths: PreflightPaths | None = None,
                 proc_root: str = "/proc"):
        self.libraries = tuple(dict.fromkeys(libraries))
        self.host, self.idle_after_s, self.heartbeat_s = host, idle_after_s, heartbeat_s
        self._preflight_paths = preflight_paths or PreflightPaths()
        self._proc_root = proc_root
        self._bpf: Any = None
        self._seen: dict[tuple[int, int], _Seen] = {}
        self._identity: dict[int, dict[str, str]] = {}
        self.attached: tuple[tuple[str, str], ...] = ()

    def start(self) -> None:
        preflight(self._preflight_paths)
        from bcc import BPF

        try:
            self._bpf = BPF(text=bpf_text().encode())
        except Exception as exc:  # BCC raises bare Exception on compile/load failure
            raise ProbeError(f"NCCL probe: the BPF program did not compile or load: {str(exc)[:500]}") from exc
        for path in self.libraries:
            self.attach_library(path)
        if self.libraries and not self.attached:
            self.close()
            raise ProbeError("NCCL probe: no NCCL function could be hooked in "
                             f"{', '.join(self.libraries)}; give libnccl.so.2's path or start the job first "
                             "(its /proc/PID/maps names the library it loads)")

    def attach_library(self, path: str) -> int:
        """Hook every NCCL function `path` exports (once per path); the number hooked."""
        if any(p == path for _, p in self.attached):
            return 0
        points = [(symbol, path) for symbol, entry, has_return in self._hooks()
                  if self._attach(path, symbol, entry, has_return)]
        self.attached += tuple(points)
        log.info("NCCL probe: %d functions hooked in %s", len(points), path)
        return len(points)

    @staticmethod
    def _hooks() -> list[tuple[str, str, bool]]:
        hooks = [(c.symbol, f"gs_c_{i}", False) for i, c in enumerate(COLLECTIVES)]  # entries only: cheaper
        hooks += [(name, f"gs_m_{name}", True) for name in COMM_CALLS]
        hooks += [(name, f"gs_g_{name}", False) for name in GROUP_CALLS]
        return hooks

    def _attach(self, path: str, symbol: str, entry: str, has_return: bool) -> bool:
        try:
            self._bpf.attach_uprobe(name=path.encode(), sym=symbol.encode(), fn_name=entry.encode())
            if has_return:
                self._bpf.attach_uretprobe(name=path.encode(), sym=symbol.encode(), fn_name=b"gs_ret")
        except Exception:  # BCC: "could not determine address of symbol" (an older libnccl lacks it)
            return False
        return True

    def states(self) -> list[CommState]:
        """Every communicator the map holds now."""
        out = []
        for key, value in self._bpf[b"comms"].items():
            out.append(CommState(
                pid=int(key.pid), comm=int(key.comm), calls=int(value.calls),
                last_enter_ns=int(value.last_enter_ns), last_count=int(value.last_count),
                last_op=int(value.last_op),
                rank=None if value.rank == NO_RANK else int(value.rank), nranks=int(value.nranks) or None,
                aborts=int(value.aborts), async_error=int(value.async_error)))
        return out

    def poll(self, now_mono_ns: int | None = None) -> list[Event]:
        """The events the communicators' states call for now."""
        if self._bpf is None:
            raise ProbeError("NCCL probe: not started")
        return self.report(self.states(), time.monotonic_ns() if now_mono_ns is None else now_mono_ns)

    def report(self, states: list[CommState], now_mono_ns: int) -> list[Event]:
        """Turn map states into events (separate from polling so it can be driven by recorded states)."""
        events = []
        ahead = self._most_advanced(states)
        for state in states:
            if state.calls == 0 and not state.aborts and not state.async_error:
                continue  # an initialised communicator that has not run a collective yet
            seen = self._seen.setdefault((state.pid, state.comm), _Seen())
            idle_ns = now_mono_ns - state.last_enter_ns
            kind = self._state_of(state, seen, idle_ns, now_mono_ns)
            if kind is None:
                continue
            seen.calls, seen.state, seen.reported_mono_ns = state.calls, kind, now_mono_ns
            seen.aborts, seen.async_error = state.aborts, state.async_error
            events.append(self._event(state, kind, idle_ns, ahead.get(self._group(state), state.calls)))
        return events

    def _state_of(self, state: CommState, seen: _Seen, idle_ns: int, now_ns: int) -> str | None:
        if state.aborts > seen.aborts:
            return "aborted"
        if state.async_error and state.async_error != seen.async_error:
            return "error"
        if idle_ns >= self.idle_after_s * 1e9:
            return None if (seen.state, seen.calls) == ("idle", state.calls) else "idle"
        moved = state.calls != seen.calls
        if moved and (seen.state != "progressing" or now_ns - seen.reported_mono_ns >= self.heartbeat_s * 1e9):
            return "progressing"
        return None

    def _identity_of(self, pid: int) -> dict[str, str]:
        if pid not in self._identity:
            self._identity[pid] = process_identity(pid, self._proc_root)
        return self._identity[pid]

    def _group(self, state: CommState) -> tuple[str | None, int | None]:
        """Communicators of one job with the same world size on this host: the ranks of one process group."""
        return self._identity_of(state.pid).get("job"), state.nranks or _int(
            self._identity_of(state.pid).get("WORLD_SIZE"))

    def _most_advanced(self, states: list[CommState]) -> dict[tuple[str | None, int | None], int]:
        best: dict[tuple[str | None, int | None], int] = {}
        for state in states:
            group = self._group(state)
            best[group] = max(best.get(group, 0), state.calls)
        return best

    def _event(self, state: CommState, kind: str, idle_ns: int, most: int) -> Event:
        identity = self._identity_of(state.pid)
        rank = state.rank if state.rank is not None else _int(identity.get("RANK"))
        nranks = state.nranks or _int(identity.get("WORLD_SIZE"))
        local = _int(identity.get("LOCAL_RANK"))
        attrs: dict[str, Any] = {
            "comm": f"{state.comm:#x}", "op": state.op, "seq": state.calls,
            "count": state.last_count, "state": kind, "idle_ms": round(max(idle_ns, 0) / 1e6, 3),
            "lag": max(most - state.calls, 0), "aborts": state.aborts, "async_error": state.async_error,
        }
        if nranks:
            attrs["nranks"] = nranks
        body: dict[str, Any] = {
            "id": new_event_id("nccl"), "kind": "nccl_progress", "host": self.host, "pid": state.pid,
            "source": "ebpf", "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "attrs": attrs,
        }
        if rank is not None:
            body["rank"] = rank
        if identity.get("job"):
            body["job"] = identity["job"]
        if local is not None and 0 <= local < 1024:
            body["gpu"] = local
        if nranks:
            body["labels"] = {"world_size": str(nranks)}
        return parse_event(body)

    def close(self) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
