"""Issue 14's last device run: the probe's overhead on ITL p50 with the server's engine pinned, and stalls caused
by other processes' GPU kernels, attributed to the GPU layer with the contending pid named.

    python3 scripts/gpu_overhead_contention.py --out DIR --until EPOCH_S [--dry-run]

One streaming server (scripts/gpu_token_workloads.py, no allocator reporter), pinned with taskset to one CPU
that nothing else here uses (its per-request engine threads inherit it); this script, its client, the probe's
drain and NVML threads and the trainer on other CPUs; the contenders on the rest.
1. GPU contention from other processes: K contender processes (bf16 16384^2 products, blocking syncs, pinned
   away from the server; started beside the server, idle until then) run in wall-clock bursts while the token
   probe streams, first products alone, then products plus 2 GiB PCIe copies each way; every token_stall is
   attributed by the probe (all attached), labelled `injected=gpu-process`, the number of contenders and the
   mode, and kept with the signals it was computed from. The contenders end before the A/B.
2. Optionally (--train-rounds) a training A/B (the 1 % target is met already).
3. ITL A/B over the time left: the attribution probe loaded once, every attachment on or off per block
   (scripts/gpu_probe_overhead.py Toggle), ABBA over many short rounds, one request per block; the GPU's SM
   clock read after each block (a covariate for the server's two speeds seen before). Per-round ratio with its
   median and interval, and the pooled figure.
Writes DIR/overhead.json, DIR/gpu-process-stalls.jsonl (token_stall and token_latency events),
DIR/gpu-process-signals.jsonl and DIR/contention-summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e import PY, ROOT, start, stop, wait_for  # noqa: E402
from gpu_probe_overhead import MODEL, Toggle, Trainer, ab, itl_block, overhead  # noqa: E402
from gpu_tokens import _get  # noqa: E402
from stall_injectors import pin_threads  # noqa: E402

from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe  # noqa: E402
from gpuslo.probes.ebpf.libraries import from_process  # noqa: E402
from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
# A contender: products back to back while it is among the first `active` of the control file and the wall clock
# is inside an `on` window (every contender keeps the same windows); blocking syncs, so it takes no CPU waiting.
CONTENDER = r"""
import json, os, sys, time
index, control, dev = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if dev == "cuda":
    import torch
    a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
    host = torch.empty(2 << 30, dtype=torch.uint8, pin_memory=True)   # 2 GiB each way over PCIe (mode copy)
    devbuf = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    side = torch.cuda.Stream()
    done, copied = torch.cuda.Event(blocking=True), torch.cuda.Event(blocking=True)
    def work(copy):
        if copy:
            with torch.cuda.stream(side):
                devbuf.copy_(host, non_blocking=True); host.copy_(devbuf, non_blocking=True)
            copied.record(side)
        for _ in range(4):
            c = a @ b
        done.record(); done.synchronize()
        if copy:
            copied.synchronize()
    work(True)
else:  # the dry run: the protocol only
    def work(copy):
        time.sleep(0.05)
print("ready", os.getpid(), flush=True)
bursts = 0
while True:
    try:
        c = json.loads(open(control).read() or "{}")
    except (OSError, ValueError):
        c = {}
    if c.get("stop"):
        break
    on, off = c.get("on_s", 1.0), c.get("off_s", 1.0)
    if index < c.get("active", 0) and (time.time() % (on + off)) < on:
        work(c.get("mode") == "copy"); bursts += 1
    else:
        time.sleep(0.02)
print("bursts", bursts, flush=True)
"""


# The dry run's stand-ins (no torch here): a token server with the same routes and thread name, and a trainer
# with the same protocol, both busy on the CPU.
STAND_IN_SERVER = r"""
import ctypes, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def _json(self, body):
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._json({"ok": True} if self.path == "/healthz" else {"pid": os.getpid(), "device": "cpu"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.startswith("/control/"):
            self._json({"cudnn": None})
            return
        ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for i in range(int(body.get("max_tokens", 16))):
            t = time.monotonic()
            while time.monotonic() - t < (0.15 if i % 10 == 9 else 0.03):
                pass
            chunk = {"id": "x", "object": "text_completion", "model": "m", "choices": [{"index": 0, "text": "a"}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n"); self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
STAND_IN_TRAIN = r"""
import json, os, sys, time
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    ts = []
    for _ in range(int(line)):
        t = time.perf_counter(); sum(range(20000)); ts.append((time.perf_counter() - t) * 1e3)
    print(json.dumps(ts), flush=True)
"""


class StandInTrainer(Trainer):
    def __init__(self) -> None:  # noqa: D107 - Trainer's protocol, no torch
        self.proc = subprocess.Popen([PY, "-c", STAND_IN_TRAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline().split()[1])


class Contenders:
    """K contender processes pinned to `cpus`, steered through a control file: set(active, on_s, off_s)."""

    def __init__(self, k: int, cpus: str | None, device: str, work: Path, code: str = CONTENDER,
                 extra: tuple[str, ...] = ()):
        self.control = work / "contend.json"
        self.set(0)
        pin = ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []
        self.procs = [subprocess.Popen([*pin, PY, "-c", code, str(i), str(self.control), device, *extra],
                                       stdout=subprocess.PIPE, text=True) for i in range(k)]
        self.pids = []
        for p in self.procs:
            line = p.stdout.readline().split() if p.stdout else []
            self.pids.append(int(line[1]) if len(line) == 2 and line[0] == "ready" else -1)

    def set(self, active: int, on_s: float = 1.0, off_s: float = 1.0, mode: str = "sm", stop_all: bool = False) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps({"active": active, "on_s": on_s, "off_s": off_s, "mode": mode, "stop": stop_all}))
        tmp.replace(self.control)

    def close(self) -> list[str]:
        self.set(0, stop_all=True)
        tails = []
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=15)
                tails.append(out.strip())
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                tails.append("killed")
        return tails


def sm_clock() -> Any:
    """A reader of the GPU's SM clock (MHz) and utilization, or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - the dry run
        return None

    def read() -> dict[str, Any]:
        try:
            return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)}
        except Exception as exc:  # noqa: BLE001 - a covariate, never the run's end
            return {"error": str(exc)[:100]}

    return read


def contention(args: argparse.Namespace, probe: AttributionProbe, llm: str, cont: Contenders,
               until: float) -> dict[str, Any]:
    """Streams under the contenders in bursts; every stall attributed, labelled, kept with its signals."""
    summary: dict[str, Any] = {"k": args.contenders, "pids": cont.pids, "steps": args.steps}
    config = ActiveProbeConfig(url=llm, model=MODEL, api="completions", max_tokens=args.contend_tokens,
                               stall_threshold_ms=100.0, timeout_s=120.0, gpu=0)
    stalls_out = open(args.out / "gpu-process-stalls.jsonl", "w")  # noqa: SIM115 - closed below
    signals_out = open(args.out / "gpu-process-signals.jsonl", "w")  # noqa: SIM115
    phases = []
    try:
        with ActiveTokenProbe(config, host="h200") as tokens:
            for step in args.steps:  # "6:sm", "12:copy": that many contenders, products only or with copies
                n, _, mode = step.partition(":")
                active = int(n)
                cont.set(active, args.on_s, args.off_s, mode or "sm")
                time.sleep(0.5)
                for _ in range(args.contend_requests):
                    if time.time() > until:
                        summary["cut_short"] = True
                        break
                    events = tokens.run_once()
                    time.sleep(probe.config.delay_s + 0.2)
                    phases.append(record(probe, events, active, mode or "sm", cont.pids, stalls_out, signals_out))
                    print("REQUEST " + json.dumps(phases[-1]), flush=True)
        summary["requests"] = phases
    finally:
        cont.set(0)
        stalls_out.close()
        signals_out.close()
    return summary


def record(probe: AttributionProbe, events: list[Any], active: int, mode: str, pids: list[int], stalls_out: Any,
           signals_out: Any, labels_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Attributes one request's token_stalls and its token_latency, writes them and their signals (with the
    libraries the serving threads' on-CPU samples were in during each stall); a summary."""
    out: dict[str, Any] = {"active": active, "mode": mode, "stalls": [], **(labels_extra or {})}
    for event in events:
        if not probe.attributable(event):
            continue
        labels = {**event.labels, "injected": "gpu-process", "contenders": str(active), "mode": mode,
                  **(labels_extra or {})}
        while not probe.ready(event):
            time.sleep(0.05)
        inputs = probe.inputs(event)
        body = probe.enrich(event, inputs).to_dict()
        body["labels"] = labels
        stalls_out.write(json.dumps(body, sort_keys=True) + "\n")
        a = body["attrs"]
        if event.kind == "token_latency":
            out["itl_p50_ms"], out["itl_max_ms"] = a.get("itl_p50_ms"), a.get("itl_max_ms")
            continue
        signals_out.write(json.dumps({
            "stall_id": body["id"], "window": [inputs.start_ns, inputs.end_ns],
            "own_pids": sorted(probe.collector.pids),  # type: ignore[union-attr]
            "contender_pids": pids, "clock_error_ns": inputs.clock_error_ns,
            "intervals": [asdict(i) for i in inputs.intervals],
            "samples": [asdict(s) for s in inputs.samples],
            "sampled_modules": probe.collector.cuda_samples.modules_between(  # type: ignore[union-attr]
                inputs.start_ns, inputs.end_ns)}) + "\n")
        out["stalls"].append({"gap_ms": round(a["gap_ms"], 1), "dominant": a.get("attribution.dominant"),
                              "coverage": a.get("attribution.coverage"),
                              "shares": {k[12:-3]: round(v) for k, v in a.items()
                                         if k.startswith("attribution.") and k.endswith("_ms")},
                              "evidence": (a.get("attribution.evidence") or "")[:400],
                              "sampled_modules": probe.collector.cuda_samples.modules_between(  # type: ignore[union-attr]
                                  inputs.start_ns, inputs.end_ns)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--until", type=float, default=0.0, help="epoch seconds by which the run must end")
    parser.add_argument("--llm-port", type=int, default=8003)
    parser.add_argument("--engine-cpu", default="2", help="the server's CPU (taskset -c)")
    parser.add_argument("--client-cpus", default="4-7", help="this script, its client, the trainer")
    parser.add_argument("--contender-cpus", default="8-15")
    parser.add_argument("--itl-s", type=float, default=150.0, help="seconds for the ITL A/B")
    parser.add_argument("--reserve-s", type=float, default=100.0,
                        help="seconds the contention part leaves for the A/B after it")
    parser.add_argument("--itl-tokens", type=int, default=16, help="tokens per ITL block (one request)")
    parser.add_argument("--max-rounds", type=int, default=40)
    parser.add_argument("--min-rounds", type=int, default=4)
    parser.add_argument("--train-rounds", type=int, default=0, help="0: no training A/B (met already)")
    parser.add_argument("--train-steps", type=int, default=40)
    parser.add_argument("--contenders", type=int, default=12)
    parser.add_argument("--steps", type=lambda v: v.split(","), default=["12:sm", "12:copy"],
                        help="contender steps, N:sm (products) or N:copy (products and 2 GiB copies each way)")
    parser.add_argument("--on-s", type=float, default=1.5)
    parser.add_argument("--off-s", type=float, default=1.0)
    parser.add_argument("--contend-requests", type=int, default=2)
    parser.add_argument("--contend-tokens", type=int, default=24)
    parser.add_argument("--dry-run", action="store_true", help="CPU model, no NVML: the plumbing only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    until = args.until or time.time() + 360
    cpus = os.cpu_count() or 1
    pin = args.pin = cpus >= 16
    if pin:  # before any thread or child: they inherit it
        os.sched_setaffinity(0, {int(c) for c in _cpus(args.client_cpus)})
    work = Path(tempfile.mkdtemp(prefix="gpuslo-oc-"))
    llm = f"http://127.0.0.1:{args.llm_port}"
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "pinned": pin,
                              "loadavg_start": os.getloadavg()}
    out = args.out / "overhead.json"

    def save() -> None:
        out.write_text(json.dumps(result, indent=1, default=str))

    server_cmd = [PY, "-c", STAND_IN_SERVER, str(args.llm_port)] if args.dry_run else [
        PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", ""]
    taskset = shutil.which("taskset") is not None
    procs = [start("llm", (["taskset", "-c", args.engine_cpu] if pin and taskset else []) + server_cmd, work)]
    probe = toggle = trainer = cont = None
    try:
        # The contenders start now, beside the server's start-up, and idle (active 0) until the contention part:
        # their contexts hold no work meanwhile, so the GPU's scheduler never gives them a slice.
        t0 = time.monotonic()
        cont = Contenders(args.contenders, args.contender_cpus if pin else None, "cpu" if args.dry_run else "cuda",
                          work)
        result["contenders"] = {"pids": cont.pids, "ready_s": round(time.monotonic() - t0, 1)}
        print("CONTENDERS " + json.dumps(result["contenders"]), flush=True)
        if args.train_rounds:
            trainer = StandInTrainer() if args.dry_run else Trainer("cuda")
        wait_for(lambda: _get(f"{llm}/healthz"), 240, 0.5)
        state = _get(f"{llm}/control/state") or {}
        if pin and not taskset:  # its threads now; the engine threads it starts later inherit it
            pin_threads(state["pid"], set(_cpus(args.engine_cpu)))
        libs = from_process(state["pid"])
        result["server"] = {"pid": state["pid"], "affinity": sorted(os.sched_getaffinity(state["pid"]))}
        probe = AttributionProbe(AttributionConfig(pids=(state["pid"],), port=args.llm_port, hz=20.0,
                                                   comm="gs-engine", nvml=not args.dry_run,
                                                   libraries=tuple(p for p in (libs.cuda, libs.cudart) if p)), "h200")
        t0 = time.monotonic()
        probe.start()
        if trainer is not None:
            probe.watch(trainer.pid)
        toggle = Toggle(probe)
        everything = set(toggle.groups)
        result["probe"] = {"load_s": round(time.monotonic() - t0, 2), "groups": sorted(everything),
                           "uprobes": [s for _, s, _ in toggle.uprobes], "unavailable": probe.unavailable}
        print("PROBE " + json.dumps(result["probe"]), flush=True)
        itl_block(llm, 2, args.itl_tokens)  # warm the client path
        # 1. GPU contention from other processes first (every attachment on): its length depends on how slow the
        # stream gets; the A/B after it takes whatever time is left.
        result["contention"] = contention(args, probe, llm, cont, until - args.reserve_s)
        save()
        result["contenders"]["exit"] = cont.close()
        cont = None
        arms = {"on": everything, "off": set()}
        if trainer is not None:
            result["train_blocks"] = ab(toggle, arms, lambda: trainer.block(args.train_steps), 0.0,
                                        args.train_rounds, 16, "train", max_rounds=args.train_rounds)
            result["train"] = overhead(result["train_blocks"], "on")
            save()
            print("TRAIN " + json.dumps(result["train"]), flush=True)
            trainer.close()
            trainer = None
        # 2. The ITL A/B over the rest of the time.
        itl_s = min(args.itl_s, until - time.time() - 10)
        result["itl_blocks"] = []
        ab(toggle, arms, lambda: itl_block(llm, 1, args.itl_tokens), itl_s, args.min_rounds, 15, "itl",
           covariate=sm_clock(), max_rounds=args.max_rounds, blocks=result["itl_blocks"], on_round=save)
        result["itl"] = overhead(result["itl_blocks"], "on")
        save()
        print("ITL " + json.dumps(result["itl"]), flush=True)
        toggle.set(everything)
        result["lost"] = probe.collector.lost()  # type: ignore[union-attr]
        result["clock"] = asdict(probe.alignment.current) if probe.alignment else None
        result["drift_ppm"] = probe.alignment.drift_ppm if probe.alignment else None
    finally:
        result["loadavg_end"] = os.getloadavg()
        save()
        if toggle is not None:
            toggle.close()
        if probe is not None:
            probe.stop()
        if trainer is not None:
            trainer.close()
        if cont is not None:
            result["contenders"]["exit"] = cont.close()
        for proc in reversed(procs):
            stop(proc)
        save()
        for log in sorted(work.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            print(f"--- {log.stem} log (tail) ---\n" + "\n".join(lines[-12:]))
    (args.out / "contention-summary.json").write_text(json.dumps(result.get("contention"), indent=1, default=str))
    for key in ("itl", "train"):
        r = result.get(key, {})
        print(f"{key}: {r.get('median_ms')} pooled {r.get('overhead_pct')} % CI {r.get('ci95_pct')}; per round "
              f"median {r.get('per_round_median_pct')} % CI {r.get('per_round_ci95_pct')} over {r.get('rounds')}",
              flush=True)
    stalls = [s for req in (result.get("contention") or {}).get("requests", []) for s in req["stalls"]]
    print(f"contention: {len(stalls)} stalls, dominant {statistics.multimode([s['dominant'] for s in stalls] or [''])}",
          flush=True)
    return 0


def _cpus(spec: str) -> list[int]:
    found: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        found += list(range(int(lo), int(hi or lo) + 1))
    return found


if __name__ == "__main__":
    sys.exit(main())
