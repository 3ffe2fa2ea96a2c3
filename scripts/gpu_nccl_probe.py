"""Issue 20 on one H200 (the two-GPU kind is not lent): the NCCL eBPF probe on the libnccl a real PyTorch job
loads, and the cost of its hooks on an all-reduce loop, probed vs unprobed in one run.

A one-rank NCCL process group (world size 1: NCCL runs its real code path on one GPU) does, in phases driven from
here: (A) probed from before its first collective, so ncclCommInitRank is seen; (B) unprobed; (C) probed again.
Each phase runs N all-reduces of a small and of a large tensor and reports µs per call. The probe's
`nccl_progress` events are saved as JSON lines.
Usage (GPU machine, root, BCC set up): python3 scripts/gpu_nccl_probe.py OUT
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gpuslo.probes.ebpf.nccl_probe import NcclProbe, libnccl_in_use

JOB = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.FileStore(sys.argv[1], 1), world_size=1, rank=0)
    print("ready", flush=True)
    for line in sys.stdin:
        n, numel = (int(x) for x in line.split())
        t = torch.ones(numel, device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        print("%d %d %.3f" % (n, numel, (time.perf_counter() - start) / n * 1e6), flush=True)
    dist.destroy_process_group()
""")
SMALL, LARGE = 1, 16 * 1024 * 1024  # 4 B (latency-bound) and 64 MiB (bandwidth-bound)


def phase(job: subprocess.Popen[str], n: int, numel: int) -> float:
    job.stdin.write(f"{n} {numel}\n")  # type: ignore[union-attr]
    job.stdin.flush()  # type: ignore[union-attr]
    return float(job.stdout.readline().split()[2])  # type: ignore[union-attr]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/nccl-probe")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "h200-nccl-probe",
           "NCCL_NVLS_ENABLE": "0"}
    job = subprocess.Popen([sys.executable, "-u", "-c", JOB, str(out / "store")], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env)
    assert job.stdout is not None and job.stdout.readline().strip() == "ready"
    summary: dict[str, object] = {"pid": job.pid}
    events = []
    # libnccl is loaded with torch (a dependency of libtorch_cuda): it is in the job's maps before any collective.
    found = libnccl_in_use(pids=[job.pid])
    summary["libnccl"] = found
    print("libnccl mapped by the job:", found, flush=True)
    symbols = subprocess.run(["sh", "-c", f"nm -D --defined-only {next(iter(found))} | grep -c ' nccl'"],
                             capture_output=True, text=True).stdout.strip() if found else "0"
    summary["exported_nccl_symbols"] = symbols
    host = socket.gethostname()
    times: dict[str, dict[str, float]] = {}

    def probed(name: str, first: bool = False) -> None:
        probe = NcclProbe(list(found), host, idle_after_s=2.0)
        probe.start()
        summary.setdefault("attached", [s for s, _ in probe.attached])
        try:
            runs = {"small": phase(job, 200 if first else 20000, SMALL), "large": phase(job, 200, LARGE)}
            times[name] = runs
            events.extend(e.to_dict() for e in probe.poll())
            time.sleep(2.5)
            events.extend(e.to_dict() for e in probe.poll())
            summary[f"{name}_states"] = [s.__dict__ for s in probe.states()]
        finally:
            probe.close()

    probed("A_probed_from_init", first=True)
    phase(job, 2000, SMALL)  # warm, unprobed
    times["B_unprobed"] = {"small": phase(job, 20000, SMALL), "large": phase(job, 200, LARGE)}
    probed("C_probed")
    times["D_unprobed"] = {"small": phase(job, 20000, SMALL), "large": phase(job, 200, LARGE)}
    job.stdin.close()  # type: ignore[union-attr]
    job.wait(60)
    unprobed = {k: min(times["B_unprobed"][k], times["D_unprobed"][k]) for k in ("small", "large")}
    summary["times_us_per_call"] = times
    summary["overhead_ratio"] = {k: round(times["C_probed"][k] / unprobed[k], 4) for k in ("small", "large")}
    summary["overhead_us_per_call"] = {k: round(times["C_probed"][k] - unprobed[k], 3) for k in ("small", "large")}
    (out / "h200-nccl-progress.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
    (out / "h200-nccl-summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    a_states = summary.get("A_probed_from_init_states") or []
    checks = {
        "libnccl found in the job's maps": bool(found),
        "ncclAllReduce hooked": "ncclAllReduce" in (summary.get("attached") or []),
        "communicator init seen (rank 0 of 1)": any(s["rank"] == 0 and s["nranks"] == 1 for s in a_states),
        "phase A collectives counted": any(s["calls"] >= 400 for s in a_states),
        "idle event after the phase": any(e["attrs"]["state"] == "idle" for e in events),
    }
    for name, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + name, flush=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
