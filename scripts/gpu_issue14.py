"""Issue 14's device run of h14d: why the engine thread's own CPU time dominated, GPU contention by many other
processes, and the ITL overhead A/B paired by token position.

    python3 scripts/gpu_issue14.py --out DIR --until EPOCH_S [--dry-run]

One streaming server (scripts/gpu_token_workloads.py, no allocator reporter) pinned to one CPU; this script,
its client, the probe's threads and the trainer on other CPUs; K contender processes on the rest, started beside
the server and idle until the contention part. The attribution probe (every attachment) loads once.
1. The cause: requests with PyTorch's cuDNN attention backend on and off in turn (POST /control/sdpa); per
   request its gaps and the libraries the engine thread's on-CPU samples were in, and its cuda_jit time (h14d's
   hypothesis: with cuDNN on, every token builds an attention plan with NVRTC on the engine thread).
2. GPU contention from other processes: steps "N[:cudnn]" (N contenders running bf16 products back to back in
   on/off windows; `:cudnn` with the cuDNN backend on, else off); every token_stall attributed, labelled
   `injected=gpu-process` and kept with its signals and sampled libraries. The contenders end after it.
3. The training A/B (few rounds), then the ITL A/B over the time left: every attachment on or off per block,
   ABBA, one request of the same prompt per block. Pre-registered primary figure: the per-position paired
   estimate (scripts/gpu_ab_stats.py) and its 95 % interval; the pooled p50 and the per-round ratio beside it.
Writes DIR/issue14.json (everything but the stalls), DIR/gpu-process-stalls.jsonl and
DIR/gpu-process-signals.jsonl.

h14e (`--parts costs,train,itl`): 0. the probe's cost per attachment, measured directly (scripts/gpu_probe_costs.py)
over a timed serving run with every hook, then again with the runtime hooks their driver counterpart covers left
out (bpf.covered_calls of the first run's hits), and per training step; the A/Bs then compare that reduced probe
with no probe, the client in a process of its own (the probe's Python threads do not share its GIL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_ab_stats import paired_positions  # noqa: E402
from gpu_e2e import PY, ROOT, start, stop, wait_for  # noqa: E402
from gpu_overhead_contention import STAND_IN_SERVER, Contenders, StandInTrainer, _cpus, record, sm_clock  # noqa: E402
from gpu_probe_costs import ClientProc, markdown, measure, syscall_slow_path  # noqa: E402
from gpu_probe_overhead import MODEL, Toggle, Trainer, ab, itl_block, overhead  # noqa: E402
from gpu_tokens import _get  # noqa: E402

from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe  # noqa: E402
from gpuslo.probes.attribution.bpf import covered_calls  # noqa: E402
from gpuslo.probes.attribution.costs import libc_call, trap_cost  # noqa: E402
from gpuslo.probes.ebpf.libraries import from_process  # noqa: E402
from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
# A light contender (no pinned host buffers: many of them fit): four N^2 bf16 products back to back, then a
# blocking sync (no CPU spent waiting), while among the first `active` and inside an `on` window.
CONTENDER = r"""
import json, os, sys, time
index, control, dev, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
if dev == "cuda":
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    done = torch.cuda.Event(blocking=True)
    def work():
        for _ in range(4):
            c = a @ b
        done.record(); done.synchronize()
    work()
else:
    def work():
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
        work(); bursts += 1
    else:
        time.sleep(0.02)
print("bursts", bursts, flush=True)
"""


def sdpa(llm: str, cudnn: bool) -> Any:
    return httpx.post(f"{llm}/control/sdpa", json={"cudnn": cudnn}, timeout=10).json().get("cudnn")


def cause(probe: AttributionProbe, llm: str, rounds: int, tokens: int) -> list[dict[str, Any]]:
    """Requests with the cuDNN attention backend on and off in turn: gaps, sampled libraries, cuda_jit time."""
    found = []
    collector = probe.collector
    assert collector is not None
    for i in range(2 * rounds):
        cudnn = i % 2 == 0
        state = sdpa(llm, cudnn)
        itl_block(llm, 1, 4)  # a first request on this setting (its thread's first plans) is not the one kept
        t0 = time.monotonic_ns()
        gaps = itl_block(llm, 1, tokens)
        t1 = time.monotonic_ns()
        time.sleep(0.3)
        probe.drain()
        with probe._lock:  # the toggle's drain thread polls the same BPF object
            seen = list(collector.intervals) + collector.open_oncpu()
        jit = [iv for iv in seen if iv.kind == "cuda_jit" and iv.end_ns > t0 and iv.start_ns < t1]
        jit_ms = sum(min(iv.end_ns, t1) - max(iv.start_ns, t0) for iv in jit) / 1e6
        found.append({"cudnn": cudnn, "server_says": state, "gaps_ms": [round(g, 3) for g in gaps],
                      "p50_ms": round(sorted(gaps)[len(gaps) // 2], 3) if gaps else None,
                      "window_ms": round((t1 - t0) / 1e6, 1), "cuda_jit_ms": round(jit_ms, 1),
                      "modules": collector.cuda_samples.modules_between(t0, t1)})
        print("CAUSE " + json.dumps({k: v for k, v in found[-1].items() if k != "gaps_ms"}), flush=True)
    return found


def contention(args: argparse.Namespace, probe: AttributionProbe, llm: str, cont: Contenders,
               until: float) -> dict[str, Any]:
    summary: dict[str, Any] = {"k": args.contenders, "pids": cont.pids, "steps": args.steps, "n": args.matrix}
    config = ActiveProbeConfig(url=llm, model=MODEL, api="completions", max_tokens=args.contend_tokens,
                               stall_threshold_ms=100.0, timeout_s=120.0, gpu=0)
    phases: list[dict[str, Any]] = []
    with open(args.out / "gpu-process-stalls.jsonl", "w") as stalls_out, \
            open(args.out / "gpu-process-signals.jsonl", "w") as signals_out, \
            ActiveTokenProbe(config, host="h200") as tokens:
        try:
            for step in args.steps:
                n, _, flag = step.partition(":")
                cudnn = flag == "cudnn"
                state = sdpa(llm, cudnn)
                cont.set(int(n), args.on_s, args.off_s, "sm")
                time.sleep(0.5)
                for _ in range(args.contend_requests):
                    if time.time() > until:
                        summary["cut_short"] = True
                        break
                    events = tokens.run_once()
                    time.sleep(probe.config.delay_s + 0.2)
                    phases.append(record(probe, events, int(n), "sm", cont.pids, stalls_out, signals_out,
                                         {"sdpa_cudnn": str(bool(state)).lower()}))
                    print("REQUEST " + json.dumps(phases[-1])[:1500], flush=True)
        finally:
            cont.set(0)
            sdpa(llm, False)
    summary["requests"] = phases
    return summary


def costs(args: argparse.Namespace, probe: AttributionProbe, toggle: Toggle, client: ClientProc, libcuda: str | None,
          server_pid: int, trainer: Any) -> dict[str, Any]:
    """The cost table with every hook, then with the covered runtime hooks left out (the probe stays so for the
    A/Bs), and per training step; reference: h14d's 0.6 ms per token, and 1 % of the step."""
    bpf = probe.collector._bpf  # type: ignore[union-attr]
    found: dict[str, Any] = {}
    trap = None
    if libcuda:  # cuDriverGetVersion: a cheap driver call, no context needed, not one the probe hooks
        trap = trap_cost(libcuda, "cuDriverGetVersion", libc_call(libcuda, "cuDriverGetVersion"))
        found["trap"] = {**asdict(trap), "uprobe_trap_ns": round(trap.uprobe_trap_ns, 1),
                         "pair_trap_ns": round(trap.pair_trap_ns, 1)}
    found["syscall"] = syscall_slow_path()
    print("TRAP " + json.dumps({k: found.get(k) for k in ("trap", "syscall")}), flush=True)
    slow = found["syscall"]["slow_path_ns"]
    gaps: list[float] = []

    def tokens() -> int:
        n = 0
        for _ in range(args.cost_requests):
            g = client.gaps(1, args.itl_tokens)
            gaps.extend(g)
            n += len(g)
        return n

    found["full"] = measure(bpf, tokens, server_pid, 600.0, trap, slow)
    found["full"]["itl_p50_ms"] = round(sorted(gaps)[len(gaps) // 2], 3) if gaps else None
    skip = covered_calls(found["full"]["hits_by_symbol"])
    found["skip"] = sorted(skip)
    print("COSTS full\n" + markdown(found["full"]["rows"]) + "\n" + json.dumps(
        {k: v for k, v in found["full"].items() if k != "rows"}), flush=True)
    everything = set(toggle.groups)
    toggle.set(everything - {"uprobes"})
    toggle.uprobes = [u for u in toggle.uprobes if u[1] not in skip]
    toggle.set(everything)
    probe.collector.attached = [s for s in probe.collector.attached if s not in skip]  # type: ignore[union-attr]
    gaps.clear()
    found["reduced"] = measure(bpf, tokens, server_pid, 600.0, trap, slow)
    found["reduced"]["itl_p50_ms"] = round(sorted(gaps)[len(gaps) // 2], 3) if gaps else None
    print("COSTS reduced (skip " + ",".join(sorted(skip)) + ")\n" + markdown(found["reduced"]["rows"]) + "\n"
          + json.dumps({k: v for k, v in found["reduced"].items() if k != "rows"}), flush=True)
    if trainer is not None:
        steps: list[float] = []

        def train() -> int:
            steps.extend(trainer.block(args.cost_train_steps))
            return len(steps)

        step_ms = sorted(trainer.block(20))[10]
        found["train"] = measure(bpf, train, trainer.pid, step_ms * 10, trap, slow)  # share of 1 % of a step
        found["train"]["step_p50_ms"] = round(sorted(steps)[len(steps) // 2], 4) if steps else None
        print("COSTS train (share of 1 % of a step)\n" + markdown(found["train"]["rows"], "step"), flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--until", type=float, default=0.0, help="epoch seconds by which the run must end")
    parser.add_argument("--llm-port", type=int, default=8004)
    parser.add_argument("--engine-cpu", default="2")
    parser.add_argument("--client-cpus", default="4-7")
    parser.add_argument("--contender-cpus", default="8-15")
    parser.add_argument("--contenders", type=int, default=48)
    parser.add_argument("--matrix", type=int, default=12288, help="contenders' product size N (N^2 bf16)")
    parser.add_argument("--steps", type=lambda v: v.split(","), default=["24", "48", "48:cudnn"],
                        help="contention steps N[:cudnn]: N contenders, cuDNN attention on with :cudnn")
    parser.add_argument("--on-s", type=float, default=2.0)
    parser.add_argument("--off-s", type=float, default=0.5)
    parser.add_argument("--contend-requests", type=int, default=2)
    parser.add_argument("--contend-tokens", type=int, default=24)
    parser.add_argument("--cause-rounds", type=int, default=3)
    parser.add_argument("--cause-tokens", type=int, default=24)
    parser.add_argument("--train-rounds", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--itl-tokens", type=int, default=16)
    parser.add_argument("--min-rounds", type=int, default=6)
    parser.add_argument("--max-rounds", type=int, default=400)
    parser.add_argument("--reserve-s", type=float, default=150.0, help="seconds kept for the A/Bs")
    parser.add_argument("--dry-run", action="store_true", help="stand-in server and contenders, no NVML")
    parser.add_argument("--parts", type=lambda v: set(v.split(",")), default={"cause", "contention", "train", "itl"},
                        help="of cause,contention,costs,train,itl")
    parser.add_argument("--client-proc-cpus", default="4-5", help="with costs: the client process's CPUs")
    parser.add_argument("--probe-cpus", default="6-7", help="with costs: this process's (the probe's) CPUs")
    parser.add_argument("--cost-requests", type=int, default=20)
    parser.add_argument("--cost-train-steps", type=int, default=200)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    until = args.until or time.time() + 400
    pin = (os.cpu_count() or 1) >= 16
    if pin:
        os.sched_setaffinity(0, set(_cpus(args.client_cpus)))
    work = Path(tempfile.mkdtemp(prefix="gpuslo-i14-"))
    llm = f"http://127.0.0.1:{args.llm_port}"
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "pinned": pin,
                              "loadavg_start": os.getloadavg()}
    out = args.out / "issue14.json"

    def save() -> None:
        out.write_text(json.dumps(result, indent=1, default=str))

    server = [PY, "-c", STAND_IN_SERVER, str(args.llm_port)] if args.dry_run else [
        PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", "", "--sdpa", "no-cudnn"]
    taskset = pin and shutil.which("taskset") is not None
    procs = [start("llm", (["taskset", "-c", args.engine_cpu] if taskset else []) + server, work)]
    probe = toggle = trainer = cont = client = None
    try:
        t0 = time.monotonic()
        if "contention" in args.parts:
            cont = Contenders(args.contenders, args.contender_cpus if pin else None,
                              "cpu" if args.dry_run else "cuda", work, CONTENDER, (str(args.matrix),))
            result["contenders"] = {"pids": cont.pids, "ready_s": round(time.monotonic() - t0, 1)}
            print("CONTENDERS " + json.dumps(result["contenders"]), flush=True)
        trainer = (StandInTrainer() if args.dry_run else Trainer("cuda")) if args.train_rounds else None
        wait_for(lambda: _get(f"{llm}/healthz"), 240, 0.5)
        state = _get(f"{llm}/control/state") or {}
        libs = from_process(state["pid"])
        result["server"] = {"pid": state["pid"], "affinity": sorted(os.sched_getaffinity(state["pid"])),
                            "sdpa_cudnn_at_start": state.get("sdpa_cudnn")}
        probe = AttributionProbe(AttributionConfig(pids=(state["pid"],), port=args.llm_port, hz=20.0,
                                                   comm="gs-engine", nvml=not args.dry_run,
                                                   libraries=tuple(p for p in (libs.cuda, libs.cudart) if p)), "h200")
        t1 = time.monotonic()
        probe.start()
        if trainer is not None:
            probe.watch(trainer.pid)
        toggle = Toggle(probe)
        everything = set(toggle.groups)
        result["probe"] = {"load_s": round(time.monotonic() - t1, 2), "groups": sorted(everything),
                           "uprobes": [s for _, s, _ in toggle.uprobes], "unavailable": probe.unavailable}
        print("PROBE " + json.dumps(result["probe"]), flush=True)
        itl_block(llm, 2, args.itl_tokens)
        if "cause" in args.parts:
            result["cause"] = cause(probe, llm, args.cause_rounds, args.cause_tokens)
            save()
        if cont is not None:
            result["contention"] = contention(args, probe, llm, cont, until - args.reserve_s)
            save()
            result["contenders"]["exit"] = cont.close()
            cont = None
        run_itl = lambda: itl_block(llm, 1, args.itl_tokens)  # noqa: E731
        if "costs" in args.parts:
            client = ClientProc(llm, set(_cpus(args.client_proc_cpus)) if pin else None)
            if pin:
                os.sched_setaffinity(0, set(_cpus(args.probe_cpus)))
            run_itl = lambda: client.gaps(1, args.itl_tokens)  # noqa: E731
            result["costs"] = costs(args, probe, toggle, client, libs.cuda, state["pid"], trainer)
            save()
        arms = {"on": everything, "off": set()}
        if trainer is not None and "train" in args.parts:
            result["train_blocks"] = ab(toggle, arms, lambda: trainer.block(args.train_steps), 0.0,
                                        args.train_rounds, 16, "train", max_rounds=args.train_rounds)
            result["train"] = {**overhead(result["train_blocks"], "on"),
                               "paired": paired_positions(result["train_blocks"])}
            save()
            print("TRAIN " + json.dumps({k: v for k, v in result["train"].items() if k != "per_round_pct"}),
                  flush=True)
            trainer.close()
            trainer = None
        itl_block(llm, 2, args.itl_tokens)  # cuDNN off again since the contention part: warm
        itl_s = until - time.time() - 25
        result["itl_blocks"] = []
        ab(toggle, arms, run_itl, itl_s, args.min_rounds, 15, "itl",
           covariate=sm_clock(), max_rounds=args.max_rounds, blocks=result["itl_blocks"], on_round=save)
        result["itl"] = {**overhead(result["itl_blocks"], "on"), "paired": paired_positions(result["itl_blocks"])}
        save()
        print("ITL " + json.dumps({k: v for k, v in result["itl"].items() if k != "per_round_pct"}), flush=True)
        toggle.set(everything)
        result["lost"] = probe.collector.lost()  # type: ignore[union-attr]
        result["clock"] = asdict(probe.alignment.current) if probe.alignment else None
        result["drift_ppm"] = probe.alignment.drift_ppm if probe.alignment else None
    finally:
        result["loadavg_end"] = os.getloadavg()
        save()
        if client is not None:
            client.close()
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
    stalls = [s for req in (result.get("contention") or {}).get("requests", []) for s in req["stalls"]]
    big = [s for s in stalls if s["gap_ms"] >= 200]
    print(f"contention: {len(stalls)} stalls, {len(big)} of 200 ms or more; dominant of those: "
          f"{sorted((d, [s['dominant'] for s in big].count(d)) for d in {s['dominant'] for s in big})}", flush=True)
    for key in ("train", "itl"):
        r = result.get(key) or {}
        print(f"{key}: paired {r.get('paired')}; pooled {r.get('overhead_pct')} % CI {r.get('ci95_pct')}; "
              f"per round {r.get('per_round_median_pct')} % CI {r.get('per_round_ci95_pct')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
