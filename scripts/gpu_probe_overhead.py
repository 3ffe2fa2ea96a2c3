"""Overhead of the attribution probe (eBPF + NVML) on ITL p50 and on a training step: an interleaved A/B in one run.

    python3 scripts/gpu_probe_overhead.py --out DIR [--until EPOCH_S]

The probe is compiled and loaded once. Each block then runs with every attachment in place (arm `on`: the
tracepoints, the CUDA uprobes, the 199 Hz perf-event sampler, the NVML sampler thread and the ring-buffer drain)
or with all of them detached (arm `off`: programs loaded but attached to nothing, sampler stopped, drain idle:
the honest unprobed). Rounds hold one block of each arm, in the order AB BA AB ... (ABBA). The same streaming server
(scripts/gpu_token_workloads.py) and the same training loop (a subprocess, steps timed with CUDA events) serve both
arms. Overhead = pooled median(on) / pooled median(off) - 1, with a 95 % bootstrap interval that resamples rounds
(paired). If an overhead reaches its target and time is left, single-group arms (one attachment group at a time)
say which part costs it. Writes DIR/probe-overhead.json (figures and every block) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e import GPUSLO, PY, ROOT, Api, start, stop, wait_for  # noqa: E402
from gpu_tokens import _get  # noqa: E402

from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe  # noqa: E402
from gpuslo.probes.attribution.bpf import TIMED_CALLS  # noqa: E402
from gpuslo.probes.attribution.gpu import GpuSampler  # noqa: E402
from gpuslo.probes.ebpf.libraries import from_process  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
MODEL = "tiny-llama-random"
TARGET = {"itl": 2.0, "train": 1.0}  # per cent
TRAIN = r"""
import os, sys, json, time, torch
dev = sys.argv[1]
dim, batch, dtype = (4096, 1024, torch.bfloat16) if dev == "cuda" else (256, 64, torch.float32)
m = torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(8)]).to(dev).to(dtype)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
x = torch.randn(batch, dim, device=dev, dtype=dtype)
def step():
    opt.zero_grad(set_to_none=True); m(x).float().square().mean().backward(); opt.step()
for _ in range(30): step()
if dev == "cuda": torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    n = int(line)
    if dev != "cuda":  # the dry run: wall time
        ts = []
        for _ in range(n):
            t = time.perf_counter(); step(); ts.append((time.perf_counter() - t) * 1e3)
        print(json.dumps(ts), flush=True)
        continue
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record(); step(); b.record()
    torch.cuda.synchronize()
    print(json.dumps([a.elapsed_time(b) for a, b in ev]), flush=True)
"""


class Toggle:
    """Detaches and re-attaches the probe's attachment groups; the BPF programs stay loaded."""

    def __init__(self, probe: AttributionProbe):
        self.probe = probe
        self.collector = probe.collector
        assert self.collector is not None
        bpf = self.collector._bpf
        self.tracepoints = sorted(bpf.tracepoint_fds)
        self.uprobes = [(self.collector.libraries.path(c.library), c.symbol, i) for i, c in enumerate(TIMED_CALLS)
                        if c.symbol in self.collector.attached]
        self.groups: dict[str, bool] = {tp.decode().split(":")[0]: True for tp in self.tracepoints}
        self.groups.update({"uprobes": bool(self.uprobes), "perf_sample": self.collector.sampling,
                            "nvml": probe.sampler is not None, "drain": True})
        self.groups = {g: True for g, present in self.groups.items() if present}
        self.switch_s: dict[str, float] = {}  # the last switch of each group, seconds
        self.draining = threading.Event()
        self.draining.set()
        self._stop = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while not self._stop.wait(0.1):
            if self.draining.is_set():
                self.probe.drain()

    def set(self, wanted: set[str]) -> float:
        """Attach exactly the groups in wanted; returns the seconds the switch took."""
        t0 = time.perf_counter()
        with self.probe._lock:  # the drain thread polls the same BPF object
            for group in self.groups:
                if (group in wanted) != self.groups[group]:
                    t1 = time.perf_counter()
                    self._switch(group, group in wanted)
                    self.groups[group] = group in wanted
                    self.switch_s[group] = round(time.perf_counter() - t1, 4)
        return time.perf_counter() - t0

    def _switch(self, group: str, on: bool) -> None:
        from bcc import PerfSWConfig, PerfType

        bpf = self.collector._bpf  # type: ignore[union-attr]
        if group == "uprobes":
            for path, sym, i in self.uprobes:
                if on:
                    bpf.attach_uprobe(name=path.encode(), sym=sym.encode(), fn_name=f"at_enter_{i}".encode())
                    bpf.attach_uretprobe(name=path.encode(), sym=sym.encode(), fn_name=f"at_leave_{i}".encode())
            if not on:  # by event name, no second symbol lookup; in parallel: each removal waits for the
                # kernel's uprobe unregistering (0.1-0.5 s apiece, 4.9 s for the 32 in a row on the H200)
                with ThreadPoolExecutor(len(bpf.uprobe_fds) or 1) as pool:
                    list(pool.map(bpf.detach_uprobe_event, list(bpf.uprobe_fds)))
        elif group == "perf_sample":
            if on:
                self.collector._start_sampling()  # type: ignore[union-attr]
            else:
                bpf.detach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK)
        elif group == "nvml":
            if on:
                sampler = GpuSampler(self.probe.config.gpu, self.probe.config.hz)
                sampler.start()
                self.probe.sampler = sampler
            elif self.probe.sampler is not None:
                self.probe.sampler.stop()
                self.probe.sampler = None
        elif group == "drain":
            (self.draining.set if on else self.draining.clear)()
        else:
            for tp in self.tracepoints:
                if tp.decode().split(":")[0] != group:
                    continue
                if on:
                    bpf.attach_tracepoint(tp=tp, fn_name=b"tracepoint__" + tp.replace(b":", b"__"))
                else:
                    bpf.detach_tracepoint(tp=tp)

    def close(self) -> None:
        self._stop.set()


def itl_block(url: str, requests: int, max_tokens: int) -> list[float]:
    """The inter-token gaps (ms) of `requests` streamed completions, one after another."""
    gaps: list[float] = []
    for _ in range(requests):
        times: list[int] = []
        body = {"model": MODEL, "prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    times.append(time.perf_counter_ns())
        gaps += [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
    return gaps


class Trainer:
    """The training loop in its own process: block(n) → n step times (ms, CUDA events)."""

    def __init__(self, device: str) -> None:
        self.proc = subprocess.Popen([PY, "-c", TRAIN, device], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline().split()[1])

    def block(self, n: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return [float(v) for v in json.loads(self.proc.stdout.readline())]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # CUDA teardown can hang (device run 2): the figures are saved already
            self.proc.kill()
            self.proc.wait()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def overhead(blocks: list[dict[str, Any]], arm: str, base: str = "off", n_boot: int = 2000,
             seed: int = 7) -> dict[str, Any]:
    """Pooled median of arm vs base, in per cent, with a 95 % bootstrap interval over rounds (paired)."""
    rounds: dict[int, dict[str, list[float]]] = {}
    for b in blocks:
        rounds.setdefault(b["round"], {}).setdefault(b["arm"], []).extend(b["values"])
    paired = [r for r in rounds.values() if arm in r and base in r]
    if not paired:
        return {"arm": arm, "rounds": 0}

    def pct(sample: list[dict[str, list[float]]]) -> float:
        on = [v for r in sample for v in r[arm]]
        off = [v for r in sample for v in r[base]]
        return (median(on) / median(off) - 1) * 100

    rng = random.Random(seed)
    boots = sorted(pct([rng.choice(paired) for _ in paired]) for _ in range(n_boot))
    per_round = [(median(r[arm]) / median(r[base]) - 1) * 100 for r in paired]
    # the per-round ratio: each round's two blocks are adjacent, so a slow drift or a state that lasts a round
    # cancels in it; its median over rounds, with a bootstrap interval over rounds
    round_boots = sorted(median([rng.choice(per_round) for _ in per_round]) for _ in range(n_boot))
    return {"arm": arm, "base": base, "rounds": len(paired),
            "median_ms": {arm: round(median([v for r in paired for v in r[arm]]), 4),
                          base: round(median([v for r in paired for v in r[base]]), 4)},
            "samples": {arm: sum(len(r[arm]) for r in paired), base: sum(len(r[base]) for r in paired)},
            "overhead_pct": round(pct(paired), 3),
            "ci95_pct": [round(boots[int(0.025 * n_boot)], 3), round(boots[int(0.975 * n_boot) - 1], 3)],
            "per_round_median_pct": round(median(per_round), 3),
            "per_round_ci95_pct": [round(round_boots[int(0.025 * n_boot)], 3),
                                   round(round_boots[int(0.975 * n_boot) - 1], 3)],
            "per_round_pct": [round(p, 3) for p in per_round],
            "per_round_wins": sum(p > 0 for p in per_round)}


def ab(toggle: Toggle, arms: dict[str, set[str]], run_block: Any, seconds: float, min_rounds: int,
       seed: int, label: str, covariate: Any = None, max_rounds: int = 10_000,
       blocks: list[dict[str, Any]] | None = None, on_round: Any = None) -> list[dict[str, Any]]:
    """Rounds of one block per arm (two arms: ABBA; more: a random order) until `seconds` are spent (at least
    min_rounds, at most max_rounds, an even number with two arms). covariate(), if given, is read after each block
    and kept with it (the GPU's SM clock, say)."""
    rng, end, rnd = random.Random(seed), time.monotonic() + seconds, 0
    blocks = [] if blocks is None else blocks  # a caller's list fills as the rounds go (saved by on_round)
    while (rnd < min_rounds or time.monotonic() < end or (len(arms) == 2 and rnd % 2)) and rnd < max_rounds:
        order = list(arms)
        if len(arms) == 2:  # ABBA: drift cancels, and a switch only every other block (detaching uprobes is slow)
            order = order if rnd % 2 == 0 else order[::-1]
        else:
            rng.shuffle(order)
        for arm in order:
            switch_s = toggle.set(arms[arm])
            time.sleep(0.1)  # the switch settles: NVML thread started, uprobes in
            t0 = time.monotonic()
            values = run_block()
            blocks.append({"round": rnd, "arm": arm, "switch_s": round(switch_s, 4),
                           "block_s": round(time.monotonic() - t0, 3), "median_ms": round(median(values), 4),
                           "values": [round(v, 4) for v in values]})
            if covariate is not None:
                blocks[-1]["covariate"] = covariate()
        print(f"{label} round {rnd}: " + ", ".join(f"{b['arm']} {b['median_ms']}" for b in blocks[-len(arms):]),
              flush=True)
        if on_round is not None:
            on_round()
        rnd += 1
    return blocks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--llm-port", type=int, default=8002)
    parser.add_argument("--until", type=float, default=0.0, help="epoch seconds by which the run must end")
    parser.add_argument("--itl-share", type=float, default=0.7, help="share of the A/B time given to ITL")
    parser.add_argument("--requests", type=int, default=1, help="requests per ITL block")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--train-steps", type=int, default=40, help="steps per training block")
    parser.add_argument("--min-rounds", type=int, default=10)
    parser.add_argument("--hz", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--itl-groups", action="store_true",
                        help="ITL only: arms off, on and each attachment group alone, in a random order per round")
    parser.add_argument("--dry-run", action="store_true", help="CPU model and training, no NVML: the plumbing only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    until = args.until or time.time() + 240
    work = Path(tempfile.mkdtemp(prefix="gpuslo-overhead-"))
    api, llm = Api(f"http://127.0.0.1:{args.port}"), f"http://127.0.0.1:{args.llm_port}"
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    out = args.out / "probe-overhead.json"

    def save() -> None:
        out.write_text(json.dumps(result, indent=1, default=str))

    procs = [start("gpuslo", [*GPUSLO, "serve", "--port", str(args.port), "--rules", str(ROOT / "rules")], work,
                   {"GPUSLO_DATABASE_URL": f"sqlite:///{work / 'gpuslo.db'}", "GPUSLO_AUTH_REQUIRED": "false",
                    "GPUSLO_SECRET_KEY_FILE": str(work / "secret_key")})]
    probe = toggle = trainer = None
    try:
        wait_for(api.healthy, 60)
        device = ["--device", "cpu", "--layers", "2", "--hidden", "256"] if args.dry_run else []
        procs.append(start("llm", [PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", api.url,
                                   *device], work))
        trainer = Trainer("cpu" if args.dry_run else "cuda")
        wait_for(lambda: _get(f"{llm}/healthz"), 240, 0.5)
        state = _get(f"{llm}/control/state") or {}
        libs = from_process(state["pid"])
        t0 = time.monotonic()
        probe = AttributionProbe(AttributionConfig(pids=(state["pid"],), port=args.llm_port, hz=args.hz,
                                                   comm="gs-engine", nvml=not args.dry_run,
                                                   libraries=tuple(p for p in (libs.cuda, libs.cudart) if p)), "h200")
        probe.start()
        probe.watch(trainer.pid)
        toggle = Toggle(probe)
        everything = set(toggle.groups)
        result["probe"] = {"load_s": round(time.monotonic() - t0, 2), "groups": sorted(everything),
                           "tracepoints": [t.decode() for t in toggle.tracepoints],
                           "uprobes": [s for _, s, _ in toggle.uprobes], "unavailable": probe.unavailable}
        print("PROBE " + json.dumps(result["probe"]), flush=True)
        itl_block(llm, 2, args.max_tokens)  # warm the client path
        arms = {"on": everything, "off": set()}
        if args.itl_groups:
            single = {**arms, **{g: {g} for g in sorted(everything)}}
            result["itl_blocks"] = ab(toggle, single, lambda: itl_block(llm, args.requests, args.max_tokens),
                                      until - time.time() - 20, args.min_rounds, args.seed + 3, "itl-groups")
            result["itl"] = overhead(result["itl_blocks"], "on")
            result["itl_profile"] = {g: overhead(result["itl_blocks"], g) for g in single if g != "off"}
            print("ITL-GROUPS " + json.dumps(result["itl_profile"]), flush=True)
            return 0
        left = until - time.time() - 20
        train_s = max(10.0, left * (1 - args.itl_share) * 0.6)  # the rest kept for the single-group arms
        result["train_blocks"] = ab(toggle, arms, lambda: trainer.block(args.train_steps), train_s,
                                    args.min_rounds, args.seed, "train")
        result["train"] = overhead(result["train_blocks"], "on")
        save()
        print("TRAIN " + json.dumps(result["train"]), flush=True)
        left = until - time.time() - 20
        itl_s = max(20.0, left * 0.8)
        result["itl_blocks"] = ab(toggle, arms, lambda: itl_block(llm, args.requests, args.max_tokens), itl_s,
                                  args.min_rounds, args.seed + 1, "itl")
        result["itl"] = overhead(result["itl_blocks"], "on")
        save()
        print("ITL " + json.dumps(result["itl"]), flush=True)
        # Which group costs it: the cheap training loop, one group at a time, while time is left.
        left = until - time.time() - 15
        if left > 10 and (result["train"]["overhead_pct"] >= TARGET["train"]
                          or result["itl"]["overhead_pct"] >= TARGET["itl"]):
            single = {"off": set(), **{g: {g} for g in sorted(everything)}}
            result["profile_blocks"] = ab(toggle, single, lambda: trainer.block(args.train_steps), left, 2,
                                          args.seed + 2, "profile")
            result["profile"] = {g: overhead(result["profile_blocks"], g) for g in sorted(everything)}
            print("PROFILE " + json.dumps(result["profile"]), flush=True)
        result["lost"] = probe.collector.lost()  # type: ignore[union-attr]
        result["loadavg"] = os.getloadavg()
    finally:
        save()  # first: the teardown below can outlast the run's time limit
        if toggle is not None:
            toggle.close()
        if probe is not None:
            probe.stop()
        if trainer is not None:
            trainer.close()
        for proc in reversed(procs):
            stop(proc)
        save()
        for log in sorted(work.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()
            print(f"--- {log.stem} log (tail) ---\n" + "\n".join(x for x in lines[-15:] if "apscheduler" not in x))
    for key in ("train", "itl"):
        r = result.get(key, {})
        print(f"{key}: {r.get('median_ms')} overhead {r.get('overhead_pct')} % CI95 {r.get('ci95_pct')} "
              f"over {r.get('rounds')} rounds (target < {TARGET[key]} %)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
