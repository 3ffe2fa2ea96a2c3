"""GPU end-to-end proof: `gpuslo serve`, `gpuslo agent` (eBPF + NVML) and the allocator reporter against real
PyTorch workloads; asserts the stored violations through the JSON API and saves the recorded events.

Run by scripts/gpu-e2e.sh on the GPU machine (root, BCC set up):  python3 scripts/gpu_e2e.py --out DIR
Writes DIR/h200-{oom,graph,fragmentation}.jsonl, DIR/h200-violations.json, DIR/h200-summary.json and prints
one PASS/FAIL line per expectation; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
GPUSLO = [PY, "-c", "import sys; from gpuslo.cli.main import main; sys.exit(main())"]
WORKLOADS = ROOT / "scripts" / "gpu_workloads.py"
OOM_BYTES = 2 << 40
FRAG_BIG_REQUEST = 6 << 30
FR_TOLERANCE = 0.01


class Checks:
    """PASS/FAIL lines as they are decided, kept for the summary."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def __call__(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.items.append({"check": name, "ok": bool(ok), "detail": str(detail)[:600]})
        print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f" -- {str(detail)[:600]}" if detail != "" else ""),
              flush=True)
        return bool(ok)

    @property
    def all_ok(self) -> bool:
        return all(i["ok"] for i in self.items)


class Api:
    """The server's JSON API."""

    def __init__(self, url: str):
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def pages(self, path: str, **params: Any) -> list[dict[str, Any]]:
        items, page = [], 1
        while True:
            body = self.http.get(path, params={**params, "page": page, "page_size": 500}).raise_for_status().json()
            items += body["items"]
            if not body["has_next"]:
                return items
            page += 1

    def events(self, **params: Any) -> list[dict[str, Any]]:
        """Stored events in their canonical form (the store's own timestamps dropped)."""
        return [{k: v for k, v in e.items() if k not in ("received_at", "processed_at")}
                for e in self.pages("/api/v1/events", **params)]

    def violations(self) -> list[dict[str, Any]]:
        return self.pages("/api/v1/violations")


def wait_for(what: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """The first truthy value of what() within timeout (else its last value)."""
    end = time.monotonic() + timeout
    while True:
        value = what()
        if value or time.monotonic() > end:
            return value
        time.sleep(interval)


def run_workload(name: str, *args: str) -> dict[str, Any]:
    print(f"--- workload {name} ---", flush=True)
    started = time.monotonic()
    proc = subprocess.run([PY, str(WORKLOADS), name, *args], capture_output=True, text=True, timeout=420)
    lines = proc.stdout.splitlines()
    print("\n".join(line[:2000] for line in lines), proc.stderr[-3000:], sep="\n", flush=True)
    result = next((json.loads(line[7:]) for line in lines if line.startswith("RESULT ")), {})
    result["returncode"], result["wall_s"] = proc.returncode, round(time.monotonic() - started, 2)
    return result


def start(name: str, cmd: list[str], work: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process at exit
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            cwd=ROOT)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def probe_states(api: Api) -> dict[str, dict[str, Any]]:
    """The latest probe_status attrs per probe."""
    states: dict[str, dict[str, Any]] = {}
    for event in sorted(api.events(kind="probe_status"), key=lambda e: e["time"]):
        states[event["attrs"]["probe"]] = event["attrs"]
    return states


def of_pid(events: list[dict[str, Any]], pid: int) -> list[dict[str, Any]]:
    return sorted((e for e in events if e.get("pid") == pid), key=lambda e: (e["time"], e["id"]))


def violation(api: Api, rule: str, evidence_ids: set[str]) -> dict[str, Any] | None:
    """The violation of `rule` whose latest explanation cites one of these events."""
    return next((v for v in api.violations() if v["rule_id"] == rule
                 and evidence_ids & set(v["explanation"]["evidence"])), None)


def observed(found: dict[str, Any] | None, field: str) -> Any:
    conditions = (found or {}).get("explanation", {}).get("conditions", [])
    return next((c["observed"] for c in conditions if c["field"] == field), None)


def phase_oom(api: Api, check: Checks) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """torch.empty(2 TiB): the driver's and the runtime's OOM, and the violations they raise."""
    r = run_workload("oom")
    check("oom workload: torch raised OutOfMemoryError", r.get("raised") is not None, r.get("raised"))

    def driver_ooms() -> list[dict[str, Any]]:
        return [e for e in of_pid(api.events(kind="cuda_oom"), r.get("pid", -1))
                if e["attrs"].get("api") == "cuMemAlloc_v2"]

    driver = wait_for(driver_ooms, 20)
    first = driver[0] if driver else {"attrs": {}}
    check("eBPF cuda_oom on cuMemAlloc_v2 for 2199023255552 bytes, CUDA_ERROR_OUT_OF_MEMORY",
          first["attrs"].get("requested_bytes") == OOM_BYTES
          and first["attrs"].get("error_name") == "CUDA_ERROR_OUT_OF_MEMORY"
          and first["attrs"].get("error_code") == 2, first.get("message"))
    check("eBPF cuda_oom event carries the workload's pid and GPU 0", first.get("gpu") == 0, first.get("gpu"))
    def cited(rule: str) -> dict[str, Any] | None:  # the runtime's record may be the latest evidence
        return violation(api, rule, {e["id"] for e in of_pid(api.events(kind="cuda_oom"), r.get("pid", -1))})

    large = wait_for(lambda: cited("cuda-oom-large-request"), 20)
    check("violation cuda-oom-large-request explains requested_bytes = 2199023255552",
          observed(large, "requested_bytes") == OOM_BYTES, (large or {}).get("summary"))
    plain = wait_for(lambda: cited("cuda-oom"), 10)
    check("violation cuda-oom summary names the 2 TiB request (the `bytes` filter writes 2.00 TiB)",
          "2.00 TiB" in (plain or {}).get("summary", ""), (plain or {}).get("summary"))
    time.sleep(1.0)  # the runtime's nested cudaMalloc record may arrive a poll later
    events = of_pid(api.events(), r.get("pid", -1))
    runtime = [e for e in events if e["attrs"].get("api") == "cudaMalloc"]
    check("eBPF cuda_oom on cudaMalloc (runtime) with cudaErrorMemoryAllocation",
          any(e["attrs"].get("error_name") == "cudaErrorMemoryAllocation"
              and e["attrs"].get("requested_bytes") == OOM_BYTES for e in runtime), [e["message"] for e in runtime])
    return r, events


def phase_graph(api: Api, check: Checks) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """torch.cuda.synchronize() inside capture: the failed end of capture and its violation."""
    r = run_workload("graph")
    check("graph workload: a good capture replayed, the bad one raised", r.get("good_graph_ok") and r.get("errors"),
          r.get("errors"))
    pid = r.get("pid", -1)
    graph = wait_for(lambda: of_pid(api.events(kind="cuda_graph_error"), pid), 20)
    ends = [e for e in graph if e["attrs"].get("api") in ("cuStreamEndCapture", "cudaStreamEndCapture")]
    check("eBPF cuda_graph_error on cuStreamEndCapture/cudaStreamEndCapture",
          bool(ends) and all("capture" in e["attrs"].get("error_name", "").lower() for e in ends),
          [f"{e['attrs']['api']}: {e['attrs']['error_name']} ({e['attrs']['error_code']})" for e in graph])
    found = wait_for(lambda: violation(api, "cuda-graph-failure", {e["id"] for e in graph}), 20)
    names = {e["attrs"].get("error_name") for e in graph}
    check("violation cuda-graph-failure names the API and the error",
          bool(found) and any(n and n in found["summary"] for n in names), (found or {}).get("summary"))
    after_oom = [v for v in api.violations() if v["rule_id"] == "cuda-graph-after-oom" and v["group"].get("pid") == pid]
    check("no cuda-graph-after-oom for the graph process (it had no OOM)", not after_oom, after_oom)
    time.sleep(1.0)
    return r, of_pid(api.events(), pid)


def _frag_event_ok(event: dict[str, Any] | None, expected: float, largest: int) -> bool:
    attrs = (event or {}).get("attrs", {})
    fr = attrs.get("fragmentation_ratio", 0.0)
    return fr > 0.65 and abs(fr - expected) <= FR_TOLERANCE and attrs.get("largest_free_bytes") == largest


def phase_frag(api: Api, check: Checks) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Fill, free every other block, ask for more than is free: FR > 0.65, an allocator retry, and the rule."""
    r = run_workload("frag", "--server", api.url)
    pid = r.get("pid", -1)
    check("frag workload: the allocator flushed its cache and retried (num_alloc_retries >= 1)",
          r.get("num_alloc_retries", 0) >= 1 and r.get("big_request_bytes") == FRAG_BIG_REQUEST,
          {k: r.get(k) for k in ("num_alloc_retries", "chunks", "filled_bytes", "returncode")})
    frags = wait_for(lambda: [e for e in of_pid(api.events(kind="mem_fragmentation"), pid)
                              if e["attrs"]["fragmentation_ratio"] > 0.65], 20)
    first = next((e for e in frags if e["attrs"]["alloc_retries"] == 0), None)
    second = next((e for e in frags if e["attrs"]["alloc_retries"] >= 1), None)
    check(f"mem_fragmentation after the fill: FR > 0.65 and within {FR_TOLERANCE} of the expected "
          f"{r.get('expected_fr_1', 0):.4f}", _frag_event_ok(first, r.get("expected_fr_1", 0),
                                                             r.get("largest_free_1")), (first or {}).get("attrs"))
    check(f"mem_fragmentation after the retry: FR > 0.65 (expected {r.get('expected_fr_2', 0):.4f}) with "
          f"alloc_retries = {r.get('num_alloc_retries')}",
          _frag_event_ok(second, r.get("expected_fr_2", 0), r.get("largest_free_2"))
          and (second or {}).get("attrs", {}).get("alloc_retries") == r.get("num_alloc_retries"),
          (second or {}).get("attrs"))
    found = wait_for(lambda: violation(api, "fragmentation-high", {e["id"] for e in frags}), 20)
    fr = observed(found, "fragmentation_ratio")
    check("violation fragmentation-high explains fragmentation_ratio > 0.65 with the reported value",
          fr is not None and fr > 0.65 and str(fr) in found["summary"], (found or {}).get("summary"))
    retry_ooms = wait_for(lambda: [e for e in of_pid(api.events(kind="cuda_oom"), pid)
                                   if e["attrs"].get("requested_bytes") == FRAG_BIG_REQUEST], 10)
    check("eBPF saw the driver OOM behind the allocator's retry (6 GiB cuMemAlloc_v2/cudaMalloc)",
          bool(retry_ooms), [e["message"] for e in retry_ooms])
    time.sleep(1.0)
    return r, of_pid(api.events(), pid)


def start_stack(work: Path, port: int, libs: dict[str, Any], check: Checks) -> tuple[Api, list[Any]]:
    """The server on SQLite with the shipped rules, then the agent with the eBPF and NVML probes."""
    api = Api(f"http://127.0.0.1:{port}")
    server = start("server", [*GPUSLO, "serve", "--port", str(port), "--rules", str(ROOT / "rules")], work,
                   {"GPUSLO_DATABASE_URL": f"sqlite:///{work / 'gpuslo.db'}"})
    check("gpuslo serve answers /healthz", wait_for(api.healthy, 60), api.url)
    paths = ",".join(p for p in (libs.get("cuda"), libs.get("cudart"), libs.get("nccl")) if p)
    agent = start("agent", [*GPUSLO, "agent", "--server", api.url, "--spool", str(work / "spool.db"),
                            "--ship-interval", "0.5", "--probe", f"ebpf:{paths}", "--probe", "nvml"], work)
    states = wait_for(lambda: (lambda s: s if {"ebpf", "nvml"} <= set(s) else None)(probe_states(api)), 90)
    states = states or probe_states(api)
    for name in ("ebpf", "nvml"):
        check(f"agent: probe {name} is up", states.get(name, {}).get("state") == "up", states.get(name))
    return api, [server, agent]


def save(out: Path, name: str, events: list[dict[str, Any]]) -> None:
    with open(out / name, "w") as f:
        for event in events:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuslo-e2e-"))
    check = Checks()
    libs = run_workload("libs")
    check("a torch process maps libcuda and libcudart", bool(libs.get("cuda") and libs.get("cudart")), libs)
    api, procs = start_stack(work, args.port, libs, check)
    summary: dict[str, Any] = {"libraries": libs}
    phases: dict[str, Any] = {}
    try:
        for name, phase, file in (("oom", phase_oom, "h200-oom.jsonl"), ("graph", phase_graph, "h200-graph.jsonl"),
                                  ("fragmentation", phase_frag, "h200-fragmentation.jsonl")):
            result, events = phase(api, check)
            summary[name] = result
            save(args.out, file, events)
            phases[f"after_{name}"] = api.violations()
        summary["probe_states"] = probe_states(api)
    finally:
        summary["agent_exit"] = stop(procs[1])
        try:
            phases["final_details"] = [api.http.get(f"/api/v1/violations/{v['id']}").json()
                                       for v in api.violations()]
        except httpx.HTTPError as exc:
            check("server still answered at the end", False, exc)
        summary["server_exit"] = stop(procs[0])
        (args.out / "h200-violations.json").write_text(json.dumps(phases, indent=1))
        summary["checks"] = check.items
        (args.out / "h200-summary.json").write_text(json.dumps(summary, indent=1))
        for name in ("agent", "server"):
            print(f"--- {name} log (tail) ---\n" + (work / f"{name}.log").read_text(errors="replace")[-6000:])
    print(f"{sum(i['ok'] for i in check.items)}/{len(check.items)} checks passed", flush=True)
    return 0 if check.all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
