"""h14f: the ITL overhead of every probe attachment, probed vs unprobed in one run, in tight pairs with an A/A
control in the same cycles, and the client inside vs outside the probe's process.

    python3 scripts/gpu_itl_ab.py --out DIR --until EPOCH_S [--dry-run]

Three processes on distinct CPUs: the streaming server (scripts/gpu_token_workloads.py, cuDNN attention off:
no per-token plan compile) on --server-cpus, the client (gpu_probe_costs.ClientProc) on --client-cpus, and this
process, the probe (every attachment: tracepoints, CUDA uprobes, the 199 Hz sampler, NVML at 20 Hz, the drain),
on --probe-cpus.

Why cycles and not ABBA rounds: on the H200, attaching every group takes ~0.02 s but detaching takes ~4.1 s
(the kernel unregisters the uprobes one after another; h14e's blocks). In h14d/h14e one block of each ABBA pair
lay 4 s after the other, longer than the host states in which block medians swing 5-10.6 ms. Here the only A/B
pair is the one across the fast switch. One cycle, starting detached:

    W  X1  ~  X2  [attach all]  Y1  ~  Y2  [NVML off]  Z1  [sampler off]  V1  [detach, ~4 s]
    W: a warm-up request after the idle detach (kept, not used). X: probe off, Y: every attachment on, Z: all but
    the NVML sampler thread, V: all but NVML and the 199 Hz perf sampler. `~` is a sleep as long as the last
    attach plus its settle, so that every pair is spaced alike. Switching a group off inside the probed state is
    fast (NVML: a thread joins; the sampler: perf fds close); only the uprobes are slow to leave.

Pre-registered (before the run): per cycle, the median over token positions of log(gap / gap) of
    AB = Y1 / X2 (the probe's cost), AA = X2 / X1 (off vs off: the A/A floor, and the order effect),
    BB = Y2 / Y1 (on vs on); DiD = AB - (AA + BB) / 2 (a drift within the cycle cancels);
    NVML = Y2 / Z1 (the NVML thread's share), PERF = Z1 / V1 (the perf sampler's share), both next to BB.
Each is reported as the median over cycles with a 95 % bootstrap interval over cycles (scripts/gpu_ab_stats.py).
Cycles alternate the client in its own process (`out`) and inside this process (`in`, sharing the GIL with the
drain and NVML threads, as in h14d) in the pattern --pattern. **< 2 % is shown iff the upper bound of AB's
interval with the client outside is below 2 %, and AA's interval holds 0; if AA's does not, the DiD's upper
bound decides.** The GIL hypothesis: in - out of AB (cycles resampled per client) with its interval.
Writes DIR/itl-ab.json (every block, every figure) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_ab_stats import contrast, paired_positions, round_log_ratios  # noqa: E402
from gpu_e2e import PY, ROOT, start, stop, wait_for  # noqa: E402
from gpu_overhead_contention import STAND_IN_SERVER, _cpus, sm_clock  # noqa: E402
from gpu_probe_costs import ClientProc  # noqa: E402
from gpu_probe_overhead import Toggle, itl_block  # noqa: E402
from gpu_tokens import _get  # noqa: E402

from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe  # noqa: E402
from gpuslo.probes.ebpf.libraries import from_process  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
PAIRS = {"ab": ("Y1", "X2"), "aa": ("X2", "X1"), "bb": ("Y2", "Y1"),  # (arm, base) slots of one cycle
         "nvml": ("Y2", "Z1"), "perf": ("Z1", "V1")}
ON_SLOTS = ("Y1", "Y2")  # every attachment on


def pair_blocks(blocks: list[dict[str, Any]], arm_slot: str, base_slot: str, client: str) -> list[dict[str, Any]]:
    """The blocks of two slots of each cycle of one client, as gpu_ab_stats' {"round", "arm", "values"}."""
    return [{"round": b["cycle"], "arm": "on" if b["slot"] == arm_slot else "off", "values": b["values"]}
            for b in blocks if b["client"] == client and b["slot"] in (arm_slot, base_slot)]


def analyse(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The pre-registered figures (module docstring) per client, and in - out."""
    found: dict[str, Any] = {}
    ratios: dict[str, dict[str, dict[int, float]]] = {}
    for client in sorted({b["client"] for b in blocks}):
        r = {k: round_log_ratios(pair_blocks(blocks, a, b, client)) for k, (a, b) in PAIRS.items()}
        ratios[client] = r
        fig: dict[str, Any] = {k: paired_positions(pair_blocks(blocks, a, b, client)) for k, (a, b) in PAIRS.items()}
        fig["did"] = contrast([(1.0, r["ab"]), (-0.5, r["aa"]), (-0.5, r["bb"])], paired=True)
        off = [v for b in blocks if b["client"] == client and b["slot"] in ("X1", "X2") for v in b["values"]]
        on = [v for b in blocks if b["client"] == client and b["slot"] in ON_SLOTS for v in b["values"]]
        if on and off:
            fig["pooled_p50_ms"] = {"on": round(statistics.median(on), 4), "off": round(statistics.median(off), 4),
                                    "pct": round((statistics.median(on) / statistics.median(off) - 1) * 100, 3)}
        medians = [b["median_ms"] for b in blocks if b["client"] == client and b["slot"] in ("X1", "X2", *ON_SLOTS)]
        if medians:
            fig["block_median_range_ms"] = [min(medians), max(medians)]
        found[client] = fig
    if "in" in ratios and "out" in ratios:
        found["in_minus_out"] = {
            "ab": contrast([(1.0, ratios["in"]["ab"]), (-1.0, ratios["out"]["ab"])], paired=False),
            "aa": contrast([(1.0, ratios["in"]["aa"]), (-1.0, ratios["out"]["aa"])], paired=False)}
    out = found.get("out", {})
    ab, aa, did = out.get("ab", {}), out.get("aa", {}), out.get("did", {})
    if ab.get("ci95_pct") and aa.get("ci95_pct"):
        floor_holds_zero = aa["ci95_pct"][0] <= 0 <= aa["ci95_pct"][1]
        decider = ab if floor_holds_zero else did
        found["verdict"] = {"aa_holds_zero": floor_holds_zero, "decided_by": "ab" if floor_holds_zero else "did",
                            "upper_pct": decider["ci95_pct"][1], "below_2pct_shown": decider["ci95_pct"][1] < 2.0}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--until", type=float, default=0.0, help="epoch seconds by which the run must end")
    parser.add_argument("--llm-port", type=int, default=8004)
    parser.add_argument("--server-cpus", default="2-3")
    parser.add_argument("--client-cpus", default="4")
    parser.add_argument("--probe-cpus", default="6-7")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per request (one request per block)")
    parser.add_argument("--pattern", type=lambda v: v.split(","), default=["out", "in", "out"],
                        help="the clients of successive cycles, repeated: out (own process), in (this process)")
    parser.add_argument("--settle-s", type=float, default=0.1, help="after the attach, as gpu_probe_overhead.ab")
    parser.add_argument("--max-cycles", type=int, default=1000)
    parser.add_argument("--reserve-s", type=float, default=15.0, help="seconds kept after the last cycle")
    parser.add_argument("--dry-run", action="store_true", help="stand-in server, no NVML")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    until = args.until or time.time() + 120
    pin = (os.cpu_count() or 1) >= 8
    if pin:
        os.sched_setaffinity(0, set(_cpus(args.probe_cpus)))
    work = Path(tempfile.mkdtemp(prefix="gpuslo-itl-"))
    llm = f"http://127.0.0.1:{args.llm_port}"
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "pinned": pin,
                              "loadavg_start": os.getloadavg(), "blocks": []}
    out = args.out / "itl-ab.json"

    def save() -> None:
        out.write_text(json.dumps(result, indent=1, default=str))

    server = [PY, "-c", STAND_IN_SERVER, str(args.llm_port)] if args.dry_run else [
        PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", "", "--sdpa", "no-cudnn"]
    taskset = pin and shutil.which("taskset") is not None
    procs = [start("llm", (["taskset", "-c", args.server_cpus] if taskset else []) + server, work)]
    probe = toggle = client = None
    try:
        wait_for(lambda: _get(f"{llm}/healthz"), 240, 0.5)
        state = _get(f"{llm}/control/state") or {}
        libs = from_process(state["pid"])
        client = ClientProc(llm, set(_cpus(args.client_cpus)) if pin else None)
        result["processes"] = {
            "server": {"pid": state["pid"], "affinity": sorted(os.sched_getaffinity(state["pid"])),
                       "sdpa_cudnn_at_start": state.get("sdpa_cudnn")},
            "client": {"pid": client.proc.pid, "affinity": sorted(os.sched_getaffinity(client.proc.pid))},
            "probe": {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0))}}
        print("PROCESSES " + json.dumps(result["processes"]), flush=True)
        probe = AttributionProbe(AttributionConfig(pids=(state["pid"],), port=args.llm_port, hz=20.0,
                                                   comm="gs-engine", nvml=not args.dry_run,
                                                   libraries=tuple(p for p in (libs.cuda, libs.cudart) if p)), "h200")
        t1 = time.monotonic()
        probe.start()
        toggle = Toggle(probe)
        everything = set(toggle.groups)
        result["probe"] = {"load_s": round(time.monotonic() - t1, 2), "groups": sorted(everything),
                           "uprobes": [s for _, s, _ in toggle.uprobes], "unavailable": probe.unavailable}
        print("PROBE " + json.dumps(result["probe"]), flush=True)
        for _ in range(3):  # warm both clients' paths and the server
            client.gaps(1, args.tokens)
            itl_block(llm, 1, args.tokens)
        clock = sm_clock()
        detach_s = toggle.set(set())
        attach_s = 0.03
        t0 = time.monotonic()
        cycle = 0
        steps: list[tuple[str, set[str] | None]] = [
            ("W", set()), ("X1", set()), ("X2", None), ("Y1", everything), ("Y2", None),
            ("Z1", everything - {"nvml"}), ("V1", everything - {"nvml", "perf_sample"})]
        while cycle < args.max_cycles and time.time() + 2 * (detach_s + 2.0) < until - args.reserve_s:
            kind = args.pattern[cycle % len(args.pattern)]

            def run(kind: str = kind) -> list[float]:
                return client.gaps(1, args.tokens) if kind == "out" else itl_block(llm, 1, args.tokens)

            row: dict[str, Any] = {"cycle": cycle, "client": kind}
            for slot, wanted in steps:
                if wanted is None:
                    time.sleep(attach_s + args.settle_s)  # spaced as the pair across the attach
                else:
                    row[f"to_{slot}_s"] = round(switched := toggle.set(wanted), 4)
                    if slot == "Y1":
                        attach_s = switched
                    time.sleep(args.settle_s)
                start_s = time.monotonic() - t0
                values = run()
                result["blocks"].append({"cycle": cycle, "client": kind, "slot": slot,
                                         "probe": sorted(k for k, v in toggle.groups.items() if v),
                                         "t_s": round(start_s, 3), "block_s": round(time.monotonic() - t0 - start_s, 3),
                                         "median_ms": round(statistics.median(values), 4) if values else None,
                                         "values": [round(v, 4) for v in values]})
                row[slot] = result["blocks"][-1]["median_ms"]
            detach_s = toggle.set(set())
            row["detach_s"] = round(detach_s, 3)
            if clock is not None:
                row["clock"] = clock()
            result.setdefault("cycles", []).append(row)
            print("cycle " + json.dumps(row), flush=True)
            if cycle % 5 == 4:
                save()
            cycle += 1
        result["ab_s"] = round(time.monotonic() - t0, 1)
        result["figures"] = analyse(result["blocks"])
        toggle.set(everything)
        result["lost"] = probe.collector.lost()  # type: ignore[union-attr]
    finally:
        result["loadavg_end"] = os.getloadavg()
        save()
        if client is not None:
            client.close()
        if toggle is not None:
            toggle.close()
        if probe is not None:
            probe.stop()
        for proc in reversed(procs):
            stop(proc)
        save()
        for log in sorted(work.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            print(f"--- {log.stem} log (tail) ---\n" + "\n".join(lines[-8:]))
    print("FIGURES " + json.dumps(result.get("figures"), indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
