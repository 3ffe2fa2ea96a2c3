"""Labelled stall-attribution run on the GPU machine (root, BCC set up): one injected cause per phase, each
stall attributed by the attribution probe (probes/attribution) and stored through a real `gpuslo serve`.

    python3 scripts/gpu_stall_attribution.py --out DIR

Phases, in order: quiet (probes off), a training step (probes off), the attribution probe starts on the LLM
server's pid, quiet again and the training step again (the overhead: probed vs unprobed in one run), then one
cause each: cpu (a SCHED_FIFO hog pinned to the server's CPU), network (a proxy holding the server's bytes),
gpu (another process's matrix products), kernel (write+fsync storms on the engine thread), alloc (the
server's allocator fragmented and forced to flush and retry mid-stream, beside a process holding most of the
GPU). Every token_stall is labelled `labels.injected` with its phase before it is posted.
Writes DIR/h200-stall-attribution.jsonl (the stored token_stall events), DIR/h200-stall-signals.jsonl (the
signals behind each stall, so a test can recompute every attribution) and DIR/h200-attribution-summary.json
(confusion matrix, coverage, overheads, clock alignment, checks).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e import GPUSLO, PY, ROOT, Api, Checks, save, start, stop, wait_for  # noqa: E402
from gpu_tokens import Squeezer, _get  # noqa: E402
from stall_injectors import DelayProxy, cpu_hog, gpu_contender, pin_threads  # noqa: E402

from gpuslo.engine.events import parse_event  # noqa: E402
from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe  # noqa: E402
from gpuslo.probes.ebpf.libraries import from_process  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
MODEL = "tiny-llama-random"
STALL_MS = 200.0
CAUSE = {"warmup": None, "quiet": None, "cpu": "scheduler", "network": "network", "gpu": "gpu", "gpu-spin": "gpu",
         "gpu-process": "gpu", "kernel": "kernel", "alloc": "driver"}
REQUIRED = ("cpu", "network", "gpu", "kernel", "alloc")  # phases that must give stalls (gpu-spin: a fallback;
# gpu-process: another process's kernels are time-sliced with the server's, measured, not required)
LAYERS = ("network", "scheduler", "kernel", "driver", "gpu", "compute", "unattributed")
TRAIN = r"""
import os, sys, time, statistics, torch
m = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
def step():
    opt.zero_grad(set_to_none=True); m(x).float().square().mean().backward(); opt.step()
for _ in range(20): step()
torch.cuda.synchronize()
print("ready", os.getpid(), flush=True); sys.stdin.readline()
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); step(); torch.cuda.synchronize(); times.append((time.perf_counter() - t) * 1e3)
print("RESULT", statistics.median(times), flush=True)
"""


class Stream:
    """`gpuslo probe tokens` for one phase; token_stalls are attributed (once their signals are in), labelled
    with the phase, posted to gpuslo, and their signals kept."""

    def __init__(self, api: Api, probe: AttributionProbe | None, sink: Any, signals: Any, args: argparse.Namespace):
        self.api, self.probe, self.sink, self.signals, self.args = api, probe, sink, signals, args
        self.events: list[dict[str, Any]] = []
        self.restart: Any = None  # brings a dead LLM server back (logged: the phase says it was dead)

    def _post(self, event: dict[str, Any]) -> None:
        try:
            self.api.http.post("/api/v1/events", json=[event])
        except httpx.HTTPError as exc:
            print(f"post failed: {exc}", flush=True)

    def _stall(self, body: dict[str, Any], phase: str) -> dict[str, Any]:
        body["labels"] = {**body.get("labels", {}), "injected": phase}
        if self.probe is None:
            return body
        event = parse_event(body)
        while not self.probe.ready(event):
            time.sleep(0.05)
        inputs = self.probe.inputs(event)
        enriched = self.probe.enrich(event, inputs)
        self.signals.write(json.dumps({  # the signals the attribution saw, for the replay test
            "stall_id": body["id"], "window": [inputs.start_ns, inputs.end_ns],
            "own_pids": sorted(self.probe.collector.pids),  # type: ignore[union-attr]
            "clock_error_ns": inputs.clock_error_ns, "intervals": [asdict(i) for i in inputs.intervals],
            "samples": [asdict(s) for s in inputs.samples]}) + "\n")
        return enriched.to_dict()

    def run(self, phase: str, url: str, count: int) -> dict[str, Any]:
        alive = _get(f"{self.args.llm}/healthz") is not None
        if not alive and self.restart is not None:
            self.restart()
        print(f"--- phase {phase}: {count} requests (LLM server alive: {alive}) ---", flush=True)
        started = time.time_ns()
        proc = subprocess.Popen([*GPUSLO, "probe", "tokens", url, "--model", MODEL, "--api", "completions",
                                 "--max-tokens", str(self.args.max_tokens), "--count", str(count), "--interval",
                                 str(self.args.interval), "--timeout", "60", "--stall-ms", "100", "--gpu", "0"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None
        for line in proc.stdout:
            body = json.loads(line)
            if body["kind"] == "token_stall":
                body = self._stall(body, phase)
            elif body["kind"] == "token_latency":  # the request's worst gap, attributed as a stall is
                body["labels"] = {**body.get("labels", {}), "injected": phase}
                if self.probe is not None:
                    body = self.probe.enrich_when_ready(parse_event(body), 5.0).to_dict()
            self.sink.write(json.dumps({"phase": phase, **body}) + "\n")
            self.events.append({"phase": phase, **body})
            self._post(body)
        proc.wait(30)
        if self.probe is not None and self.probe.collector is not None:  # where the serving threads' CPU went
            modules = self.probe.collector.cuda_samples.modules
            summary_modules = dict(modules.most_common(8))
            modules.clear()
        else:
            summary_modules = {}
        mine = [e for e in self.events if e["phase"] == phase]
        lat = [e["attrs"] for e in mine if e["kind"] == "token_latency"]
        summary = {"phase": phase, "server_alive_before": alive, "start_ns": started, "end_ns": time.time_ns(),
                   "requests": len(lat), "sampled_modules": summary_modules,
                   "itl_p50_ms": statistics.median([a["itl_p50_ms"] for a in lat if a.get("itl_p50_ms")] or [0]),
                   "stalls_ge_200": [round(e["attrs"]["gap_ms"], 1) for e in mine
                                     if e["kind"] == "token_stall" and e["attrs"]["gap_ms"] >= STALL_MS]}
        print("PHASE " + json.dumps(summary), flush=True)
        return summary


def train_step_ms(probe: AttributionProbe | None, steps: int) -> float:
    if steps <= 0:  # the dry run: no GPU
        return 1.0
    proc = subprocess.Popen([PY, "-c", TRAIN, str(steps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    pid = int(proc.stdout.readline().split()[1])
    if probe is not None:
        probe.watch(pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    result = next(line for line in proc.stdout if line.startswith("RESULT"))
    proc.wait(60)
    return float(result.split()[1])


def confusion(stalls: list[dict[str, Any]]) -> dict[str, Any]:
    """Injected cause x dominant layer of the stalls >= STALL_MS, accuracy per phase and per layer, coverage
    (mean, min, how many reach 95 %) over the probed stalls."""
    matrix = {phase: dict.fromkeys(LAYERS, 0) for phase in CAUSE}
    coverage: list[float] = []
    for s in stalls:
        if s["attrs"]["gap_ms"] < STALL_MS:
            continue
        phase = s.get("labels", {}).get("injected")
        if phase not in matrix:
            continue
        matrix[phase][s["attrs"].get("attribution.dominant", "unattributed")] += 1
        if phase != "warmup":  # the warm-up phase runs before the probe starts
            coverage.append(s["attrs"].get("attribution.coverage", 0.0))
    caused = {p: row for p, row in matrix.items() if CAUSE[p]}
    total = sum(sum(row.values()) for row in caused.values())
    right = sum(row[CAUSE[p]] for p, row in caused.items())  # type: ignore[index]
    per_phase = {p: {"stalls": sum(row.values()), "right": row[CAUSE[p]],  # type: ignore[index]
                     "accuracy": round(row[CAUSE[p]] / sum(row.values()), 4) if sum(row.values()) else None}
                 for p, row in caused.items()}
    per_layer: dict[str, dict[str, Any]] = {}
    for p, row in caused.items():
        layer = per_layer.setdefault(CAUSE[p], {"stalls": 0, "right": 0})  # type: ignore[arg-type]
        layer["stalls"] += sum(row.values())
        layer["right"] += row[CAUSE[p]]  # type: ignore[index]
    for layer in per_layer.values():
        layer["accuracy"] = round(layer["right"] / layer["stalls"], 4) if layer["stalls"] else None
    return {"matrix": matrix, "attributed_to_injected": right, "stalls_with_a_cause": total,
            "accuracy": round(right / total, 4) if total else None, "per_phase": per_phase, "per_layer": per_layer,
            "coverage_mean": round(statistics.mean(coverage), 4) if coverage else None,
            "coverage_min": round(min(coverage), 4) if coverage else None,
            "coverage_ge_95": sum(c >= 0.95 for c in coverage), "stalls": len(coverage)}


def phases(args: argparse.Namespace, api: Api, llm: str, llm_pid: int, check: Checks, out: Path,
           work: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    with open(out / "h200-stall-probe.jsonl", "w") as sink, open(out / "h200-stall-signals.jsonl", "w") as sig:
        stream = Stream(api, None, sink, sig, args)
        summary["warmup"] = stream.run("warmup", llm, args.requests)  # first calls, caches: not a baseline
        train_step_ms(None, args.train_steps)
        summary["quiet_unprobed"] = stream.run("warmup", llm, args.requests)
        summary["train_unprobed_ms"] = train_step_ms(None, args.train_steps)
        libs = from_process(llm_pid)
        probe = AttributionProbe(AttributionConfig(pids=(llm_pid,), port=args.llm_port, hz=args.hz, comm="gs-engine",
                                                   libraries=tuple(p for p in (libs.cuda, libs.cudart) if p)),
                                 "h200")
        probe.start()
        summary["probe"] = {"attached": probe.collector.attached, "unavailable": probe.unavailable,  # type: ignore[union-attr]
                            "sampling": probe.collector.sampling,  # type: ignore[union-attr]
                            "gpm": bool(probe.sampler and probe.sampler.gpm),
                            "clock": asdict(probe.alignment.current)}  # type: ignore[union-attr]
        stop_drain = threading.Event()
        threading.Thread(target=lambda: [probe.drain() for _ in iter(lambda: stop_drain.wait(0.1), True)],
                         daemon=True).start()
        stream.probe = probe

        def restart() -> None:
            print("LLM SERVER DIED: restarting it", flush=True)
            proc = start(f"llm-{time.monotonic_ns()}", [PY, str(WORKLOADS), "serve", "--port", str(args.llm_port),
                                                        "--gpuslo", api.url], work, {"PYTHONFAULTHANDLER": "1"})
            wait_for(lambda: _get(f"{llm}/healthz"), 240, 1.0)
            state = _get(f"{llm}/control/state") or {}
            summary.setdefault("restarts", []).append({"pid": state.get("pid"), "proc": proc.pid})
            nonlocal llm_pid
            llm_pid = state["pid"]
            probe.watch(llm_pid)

        stream.restart = restart
        try:
            summary["quiet_probed"] = stream.run("quiet", llm, args.requests)
            summary["train_probed_ms"] = train_step_ms(probe, args.train_steps)
            core = 1 if args.dry_run else 3
            pinned = pin_threads(llm_pid, {core}, nice=19)
            hog = cpu_hog(core)
            summary["cpu"] = {**stream.run("cpu", llm, args.requests), "pinned_threads": pinned, "hog": hog.ready}
            hog.stop()
            pin_threads(llm_pid, set(range(os.cpu_count() or 1)))
            proxy = DelayProxy(args.llm_port)
            proxy.start()
            summary["network"] = stream.run("network", f"http://127.0.0.1:{proxy.port}", args.requests)
            summary["network"]["holds"] = len(proxy.holds)
            proxy.close()
            if not args.dry_run:
                attempt(summary, "gpu_phases", lambda: gpu_phases(args, stream, llm, summary))
            httpx.post(f"{llm}/control/kernel", json={"on": True, "every_s": 1.0, "mib": args.storm_mib}, timeout=10)
            summary["kernel"] = stream.run("kernel", llm, args.requests)
            summary["kernel"]["storms"] = httpx.post(f"{llm}/control/kernel", json={"on": False}, timeout=30).json()
            if not args.dry_run:
                attempt(summary, "alloc", lambda: alloc_phase(args, stream, llm, work, summary))
            summary["probe"]["lost"] = probe.collector.lost()  # type: ignore[union-attr]
            summary["probe"]["clock_end"] = asdict(probe.alignment.current)  # type: ignore[union-attr]
            summary["probe"]["drift_ppm"] = probe.alignment.drift_ppm  # type: ignore[union-attr]
        finally:
            stop_drain.set()
            probe.stop()
    return summary


def alloc_phase(args: argparse.Namespace, stream: Stream, llm: str, work: Path, summary: dict[str, Any]) -> None:
    """The server's allocator fragmented and forced to flush and retry mid-stream, beside a squeezing tenant."""
    squeezer = Squeezer(work, 40.0)
    try:
        summary["squeezer"] = squeezer.result()
        httpx.post(f"{llm}/control/fragment", json={}, timeout=10)
        summary["alloc"] = stream.run("alloc", llm, args.alloc_requests)
        state = httpx.post(f"{llm}/control/fragment", json={"stop": True}, timeout=90).json()
        summary["alloc"]["cycles"] = [{k: c.get(k) for k in ("retry_ms", "alloc_retries", "mid_stream")}
                                      for c in (state.get("fragmenter") or {}).get("cycles", [])]
    finally:
        stop(squeezer.proc)  # type: ignore[arg-type]


def attempt(summary: dict[str, Any], name: str, step: Any) -> None:
    """Run one phase; an error is recorded in the summary and the run goes on with the next phase."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - one broken phase must not cost the others (device time is scarce)
        print(f"PHASE {name} FAILED: {type(exc).__name__}: {exc}", flush=True)
        summary.setdefault("failed_phases", {})[name] = f"{type(exc).__name__}: {exc}"


def _side_stream(stream: Stream, llm: str, phase: str, mode: str, requests: int) -> dict[str, Any]:
    httpx.post(f"{llm}/control/gpu", json={"on": True, "mode": mode, "hold_ms": 300, "every_s": 1.0}, timeout=30)
    time.sleep(3)  # the side stream's set-up (operands, a timed product) before the phase
    result = stream.run(phase, llm, requests)
    state = httpx.post(f"{llm}/control/gpu", json={"on": False}, timeout=60).json()
    return {**result, "mode": mode, "holds": len(state["holds"]), "setup": state["setup"], "error": state["error"]}


def gpu_phases(args: argparse.Namespace, stream: Stream, llm: str, summary: dict[str, Any]) -> None:
    """GPU contention: products on a side stream of the server (gpu); a spinning kernel filling every SM if
    those gave fewer than 3 stalls (gpu-spin); another process's products (gpu-process, time-sliced)."""
    summary["gpu"] = _side_stream(stream, llm, "gpu", "matmul", args.requests)
    if len(summary["gpu"]["stalls_ge_200"]) < 3:
        summary["gpu-spin"] = _side_stream(stream, llm, "gpu-spin", "spin", args.requests)
    contender = gpu_contender()
    summary["gpu-process"] = {**stream.run("gpu-process", llm, args.requests), "contender_pid": contender.pid}
    contender.stop()


def judge(check: Checks, summary: dict[str, Any], stalls: list[dict[str, Any]],
          violations: list[dict[str, Any]]) -> None:
    c = summary["confusion"] = confusion(stalls)
    check(f"quiet phase (probed): no stall >= {STALL_MS:g} ms", not summary["quiet_probed"]["stalls_ge_200"],
          {"quiet": summary["quiet_probed"]["stalls_ge_200"], "warmup": summary["quiet_unprobed"]["stalls_ge_200"]})
    check(f">= 90 % of stalls >= 200 ms attributed to the injected layer: {c['attributed_to_injected']}/"
          f"{c['stalls_with_a_cause']}", (c["accuracy"] or 0) >= 0.9, c["matrix"])
    check(f">= 95 % of each stall's time attributed: {c['coverage_ge_95']}/{c['stalls']} stalls, mean "
          f"{c['coverage_mean']}, min {c['coverage_min']}", c["stalls"] > 0 and c["coverage_ge_95"] == c["stalls"])
    for phase in REQUIRED:
        rows = c["matrix"][phase] if phase != "gpu" else {
            k: c["matrix"]["gpu"][k] + c["matrix"]["gpu-spin"][k] for k in LAYERS}
        check(f"phase {phase}: stalls >= 200 ms seen ({sum(rows.values())})", sum(rows.values()) > 0, rows)
    gpu = c["per_layer"].get("gpu", {})
    check(f"GPU contention stalls attributed to the GPU layer: {gpu.get('right')}/{gpu.get('stalls')}",
          bool(gpu.get("stalls")) and (gpu.get("accuracy") or 0) >= 0.9, c["per_phase"])
    fired = sorted({v["rule_id"] for v in violations if v["rule_id"].startswith("stall-")})
    check("stall rules fired per dominant layer", bool(fired), fired)
    itl = (summary["quiet_probed"]["itl_p50_ms"] / summary["quiet_unprobed"]["itl_p50_ms"] - 1) * 100 \
        if summary["quiet_unprobed"]["itl_p50_ms"] else None
    train = (summary["train_probed_ms"] / summary["train_unprobed_ms"] - 1) * 100
    summary["overhead"] = {"itl_p50_pct": itl, "train_step_pct": train}
    check(f"probe overhead on ITL p50 < 2 %: {itl}", itl is not None and itl < 2)
    check(f"probe overhead on a training step < 1 %: {train:.3f}", train < 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--llm-port", type=int, default=8001)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--alloc-requests", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--hz", type=float, default=20.0)
    parser.add_argument("--storm-mib", type=int, default=256)
    parser.add_argument("--train-steps", type=int, default=200)
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU model, no GPU phases, no training: the plumbing only (no NVML needed).")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuslo-attr-"))
    check, api, llm = Checks(), Api(f"http://127.0.0.1:{args.port}"), f"http://127.0.0.1:{args.llm_port}"
    args.llm = llm
    procs = [start("gpuslo", [*GPUSLO, "serve", "--port", str(args.port), "--rules", str(ROOT / "rules")], work,
                   {"GPUSLO_DATABASE_URL": f"sqlite:///{work / 'gpuslo.db'}", "GPUSLO_AUTH_REQUIRED": "false",
                    "GPUSLO_SECRET_KEY_FILE": str(work / "secret_key")})]
    summary: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        check("gpuslo serve answers /healthz", wait_for(api.healthy, 60), api.url)
        device = ["--device", "cpu", "--layers", "2", "--hidden", "256"] if args.dry_run else []
        procs.append(start("llm", [PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", api.url,
                                   *device], work, {"PYTHONFAULTHANDLER": "1"}))
        wait_for(lambda: _get(f"{llm}/healthz"), 240, 1.0)
        state = _get(f"{llm}/control/state") or {}
        check("LLM server up", state.get("device") == ("cpu" if args.dry_run else "cuda"), state)
        if args.dry_run:
            args.train_steps = 0
        summary.update(phases(args, api, llm, state["pid"], check, args.out, work))
        time.sleep(2)
        stalls = sorted(api.events(kind="token_stall"), key=lambda e: (e["time"], e["id"]))
        violations = api.violations()
        save(args.out, "h200-stall-attribution.jsonl", stalls)
        judge(check, summary, stalls, violations)
    finally:
        for proc in reversed(procs):
            stop(proc)
        summary["checks"] = check.items
        (args.out / "h200-attribution-summary.json").write_text(json.dumps(summary, indent=1, default=str))
        for name in sorted(p.stem for p in work.glob("*.log")):
            lines = (work / f"{name}.log").read_text(errors="replace").splitlines()
            print(f"--- {name} log (tail) ---\n" + "\n".join(line for line in lines[-60:] if "apscheduler" not in line))
    print(json.dumps(summary.get("confusion"), indent=1))
    print(f"{sum(i['ok'] for i in check.items)}/{len(check.items)} checks passed", flush=True)
    return 0 if check.all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
