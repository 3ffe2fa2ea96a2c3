"""CudaProbe: BCC uprobes on CUDA/NCCL functions, read from a ring buffer and turned into Events."""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.ebpf.convert import to_event
from gpuslo.probes.ebpf.functions import FUNCTIONS, Function
from gpuslo.probes.ebpf.gpu_resolve import GpuResolver
from gpuslo.probes.ebpf.libraries import LibrarySet
from gpuslo.probes.ebpf.preflight import PreflightPaths, preflight
from gpuslo.probes.ebpf.record import CallRecord, decode_record

log = logging.getLogger(__name__)
_HERE = Path(__file__).parent


@dataclass(frozen=True)
class AttachPoint:
    """Where one function was hooked, and which fallback found it."""

    symbol: str
    path: str
    how: str  # "own library" or "fallback: other library"


def _stub(func_id: int, function: Function) -> str:
    """The entry/return pair for one function, passing its constants to the inline helpers."""
    size_arg = f"PT_REGS_PARM{function.size_arg}(ctx)" if function.size_arg else "0"
    out_arg = f"PT_REGS_PARM{function.out_arg}(ctx)" if function.out_arg else "0"
    return (
        f"int gs_enter_{func_id}(struct pt_regs *ctx) {{ /* {function.symbol} */\n"
        f"    return gs_enter({func_id}, {size_arg}, {function.size_mode.value}, {out_arg});\n}}\n"
        f"int gs_leave_{func_id}(struct pt_regs *ctx) {{\n"
        f"    return gs_leave({func_id}, (s32)PT_REGS_RC(ctx), {int(function.always_send)}, "
        f"{int(function.out_arg is not None)});\n}}\n"
    )


def bpf_text(functions: tuple[Function, ...] = FUNCTIONS, filter_pids: bool = False,
             send_success: bool = False, ringbuf_pages: int = 64) -> str:
    """The complete BPF C program, record.h inlined (what `--print-bpf` prints)."""
    header = (_HERE / "record.h").read_text()
    body = (_HERE / "cuda_probe.bpf.c").read_text().replace('#include "record.h"\n', header)
    defines = (f"#define GS_NFUNCS {len(functions)}\n#define GS_FILTER_PIDS {int(filter_pids)}\n"
               f"#define GS_SEND_SUCCESS {int(send_success)}\n#define GS_RINGBUF_PAGES {ringbuf_pages}\n")
    return defines + body + "\n" + "".join(_stub(i, f) for i, f in enumerate(functions))


@dataclass(frozen=True)
class ProgramStats:
    """Kernel-measured runs of one BPF program (counted only while sysctl kernel.bpf_stats_enabled=1)."""

    runs: int
    run_time_ns: int


def _fdinfo_stats(fd: int) -> ProgramStats:
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
                  if ":\t" in line)
    return ProgramStats(int(fields.get("run_cnt", 0)), int(fields.get("run_time_ns", 0)))


class CudaProbe:
    """Hooks the CUDA driver/runtime and NCCL libraries; start(), then poll() for Events, then close()."""

    def __init__(self, libraries: LibrarySet, host: str, pids: Iterable[int] | None = None, *,
                 send_success: bool = False, ringbuf_pages: int = 64, gpu_resolver: GpuResolver | None = None,
                 extra_objects: tuple[str, ...] = (), preflight_paths: PreflightPaths | None = None,
                 report_nested: bool = True):
        self.libraries = libraries
        self.host = host
        self._pids = None if pids is None else set(pids)
        self._send_success = send_success
        self._ringbuf_pages = ringbuf_pages
        self._gpus = gpu_resolver or GpuResolver()
        self._extra = extra_objects
        self._preflight_paths = preflight_paths or PreflightPaths()
        # A failed cudaMalloc reports the cuMemAlloc_v2 it called (depth 1, label `depth`): the driver's failure is
        # the root cause and the runtime's its cascade, and the shipped rules group both into one incident by host
        # and GPU. report_nested=False counts nested failures instead of sending them; that was the default once,
        # and it hid the driver-level OOM from the H200 end-to-end run (16/19, issue 14), so it is opt-in now.
        self._report_nested = report_nested
        self.nested_failures = 0
        self._bpf: Any = None
        self._pending: list[bytes] = []
        self._wall_offset_ns = 0
        self.attached: tuple[AttachPoint, ...] = ()

    def bpf_text(self) -> str:
        """This probe's BPF program."""
        return bpf_text(FUNCTIONS, self._pids is not None, self._send_success, self._ringbuf_pages)

    def build(self) -> None:
        """Check the host, then compile and load the program; raises ProbeError naming what is missing."""
        preflight(self._preflight_paths)
        from bcc import BPF  # after preflight, which explains a missing bcc

        try:
            self._bpf = BPF(text=self.bpf_text().encode())  # BCC warns on str arguments
        except Exception as exc:  # BCC raises bare Exception on compile/load failure
            raise ProbeError(f"eBPF probe: the BPF program did not compile or load: {str(exc)[:500]}") from exc
        for pid in self._pids or ():
            self._set_pid(pid, True)

    def _try_attach(self, func_id: int, symbol: str, path: str) -> bool:
        name, sym = path.encode(), symbol.encode()
        try:
            self._bpf.attach_uprobe(name=name, sym=sym, fn_name=f"gs_enter_{func_id}".encode())
        except Exception:  # BCC: "could not determine address of symbol"
            return False
        try:
            self._bpf.attach_uretprobe(name=name, sym=sym, fn_name=f"gs_leave_{func_id}".encode())
        except Exception:
            self._bpf.detach_uprobe(name=name, sym=sym)
            return False
        return True

    def attach(self) -> tuple[AttachPoint, ...]:
        """Hook every function: in its own library first, else in any other known library or extra object."""
        points = []
        others = tuple(dict.fromkeys(self.libraries.found() + self._extra))
        for func_id, function in enumerate(FUNCTIONS):
            own = self.libraries.path(function.library)
            candidates = ([(own, "own library")] if own else []) + [
                (p, "fallback: other library") for p in others if p != own]
            for path, how in candidates:
                if self._try_attach(func_id, function.symbol, path):
                    points.append(AttachPoint(function.symbol, path, how))
                    log.info("eBPF probe: %s attached in %s (%s)", function.symbol, path, how)
                    break
            else:
                log.warning("eBPF probe: %s not found in %s; not hooked", function.symbol,
                            ", ".join(p for p, _ in candidates) or f"any {function.library}")
        if not points:
            raise ProbeError("eBPF probe: no CUDA/NCCL function could be hooked; give the library paths "
                             "(libcuda.so.1, libcudart.so.*, libnccl.so.2) or a pid that has them loaded")
        self.attached = tuple(points)
        return self.attached

    def start(self) -> None:
        """build(), attach() and open the ring buffer."""
        self.build()
        self.attach()
        self._bpf[b"events"].open_ring_buffer(self._on_record)
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()

    def _on_record(self, _ctx: Any, data: Any, size: int) -> None:
        self._pending.append(ctypes.string_at(data, size))

    def poll_records(self, timeout: float = 0.0) -> list[CallRecord]:
        """Decoded records that arrived, waiting up to timeout seconds for the first."""
        self._bpf.ring_buffer_poll(int(timeout * 1000))
        raw, self._pending = self._pending, []
        return [decode_record(b) for b in raw]

    def poll(self, timeout: float = 0.0) -> list[Event]:
        """Events for the failed calls (and NCCL aborts/async errors) that arrived."""
        events = []
        for record in self.poll_records(timeout):
            if record.func_id >= len(FUNCTIONS):
                log.warning("eBPF probe: record for unknown function id %d dropped", record.func_id)
                continue
            if record.depth > 0 and not self._report_nested:
                self.nested_failures += record.ret != 0
                continue
            gpu = self._gpus.gpu_of(record.pid)
            event = to_event(record, FUNCTIONS[record.func_id], self.host, self._wall_offset_ns, gpu)
            if event is not None:
                events.append(event)
        return events

    def success_counts(self) -> dict[str, int]:
        """Successful calls per symbol since start (counted in the kernel, never sent)."""
        table = self._bpf[b"ok_calls"]
        return {f.symbol: int(sum(table[table.Key(i)])) for i, f in enumerate(FUNCTIONS)}

    def dropped(self) -> int:
        """Records lost because the ring buffer was full."""
        table = self._bpf[b"dropped"]
        return int(sum(table[table.Key(0)]))

    def program_stats(self) -> dict[str, ProgramStats]:
        """Runs and run time of each attached BPF program, by program name (gs_enter_0, gs_leave_0, ...)."""
        return {name.decode(): _fdinfo_stats(func.fd) for name, func in self._bpf.funcs.items()}

    def _set_pid(self, pid: int, on: bool) -> None:
        table = self._bpf[b"watched_pids"]
        key = table.Key(pid)
        if on:
            table[key] = table.Leaf(1)
        elif key in table:
            del table[key]

    def watch_pid(self, pid: int) -> None:
        """Add pid to the filter (only for a probe built with a pid filter)."""
        if self._pids is None:
            raise ProbeError("eBPF probe: built without a pid filter; pass pids=() to filter")
        self._pids.add(pid)
        if self._bpf is not None:
            self._set_pid(pid, True)

    def unwatch_pid(self, pid: int) -> None:
        """Remove pid from the filter."""
        if self._pids is not None:
            self._pids.discard(pid)
            if self._bpf is not None:
                self._set_pid(pid, False)

    def close(self) -> None:
        """Detach every probe and free the program."""
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    def __enter__(self) -> CudaProbe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
