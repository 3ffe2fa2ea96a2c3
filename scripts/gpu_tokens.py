"""Token-stream GPU proof: stalls of a streaming LLM endpoint, the allocator fragmentation behind them, and the
`fragmentation-then-stall` rule that joins the two, all through a real `gpuslo serve`.

Run by scripts/gpu-tokens.sh on the GPU machine:  python3 scripts/gpu_tokens.py --out DIR
  1. `gpuslo serve` (SQLite, the shipped rules), then the LLM server (scripts/gpu_token_workloads.py serve:
     random-weight Llama, SSE, the allocator reporter in-process), then the squeezer in another process.
  2. Phase "crowded": `gpuslo probe tokens --gpu 0` while only the squeezer crowds the GPU.
  3. Phase "fragmenting": the same, while the server fragments its own allocator and forces flush-and-retry
     mid-stream. The probe's JSON lines are posted to gpuslo as each request ends (and saved).
  4. PASS/FAIL per expectation through the JSON API; each stall is matched to the server's timed windows.
Writes DIR/h200-token-stalls.jsonl (what gpuslo stored), DIR/h200-tokens-probe.jsonl (what the probe printed),
DIR/h200-tokens-violations.json and DIR/h200-tokens-summary.json. `--dry-run` runs the plumbing on the CPU.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e import GPUSLO, PY, ROOT, Api, Checks, save, start, stop, wait_for  # noqa: E402

WORKLOADS = ROOT / "scripts" / "gpu_token_workloads.py"
MODEL = "tiny-llama-random"
FR_TOLERANCE = 0.01
RULE_GAP_MS = 200.0  # fragmentation-then-stall's gap; the probe reports from --stall-ms up, to show smaller ones
SLACK_NS = 30_000_000  # a stall "overlaps" a window when the two intervals meet within 30 ms


def time_ns(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class Probe:
    """`gpuslo probe tokens` in a subprocess; each JSON line is saved and posted to gpuslo as it arrives."""

    def __init__(self, api: Api, llm_url: str, sink: Any, max_tokens: int, stall_ms: float):
        self.api, self.llm_url, self.sink, self.max_tokens = api, llm_url, sink, max_tokens
        self.stall_ms = stall_ms
        self.events: list[dict[str, Any]] = []
        self.statuses: dict[str, int] = {}

    def _pump(self, proc: subprocess.Popen[str], phase: str) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            self.events.append({"phase": phase, **event})
            self.sink.write(line)
            try:
                results = self.api.http.post("/api/v1/events", json=[event]).json()["results"]
                status = results[0]["status"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                status = f"error: {exc}"
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def run(self, phase: str, count: int, interval: float, deadline_s: float) -> dict[str, Any]:
        print(f"--- phase {phase}: {count} requests of {self.max_tokens} tokens ---", flush=True)
        started = time.time_ns()
        proc = subprocess.Popen([*GPUSLO, "probe", "tokens", self.llm_url, "--model", MODEL, "--api", "completions",
                                 "--max-tokens", str(self.max_tokens), "--count", str(count), "--interval",
                                 str(interval), "--timeout", "60", "--stall-ms", str(self.stall_ms), "--gpu", "0"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        pump = threading.Thread(target=self._pump, args=(proc, phase))
        pump.start()
        try:
            proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            print(f"phase {phase}: deadline {deadline_s}s passed, stopping the probe", flush=True)
            stop(proc, 10)
        pump.join(30)
        mine = [e for e in self.events if e["phase"] == phase]
        latencies = [e["attrs"] for e in mine if e["kind"] == "token_latency"]
        summary = {"phase": phase, "start_ns": started, "end_ns": time.time_ns(), "requests": len(latencies),
                   "errors": [a["error"] for a in latencies if a.get("error")],
                   "stall_gaps_ms": [e["attrs"]["gap_ms"] for e in mine if e["kind"] == "token_stall"],
                   "itl_p50_ms": [a.get("itl_p50_ms") for a in latencies],
                   "itl_max_ms": [a.get("itl_max_ms") for a in latencies], "probe_exit": proc.returncode}
        print("PHASE " + json.dumps(summary), flush=True)
        return summary


class Squeezer:
    """The crowding tenant in its own process; its stdout lines are kept as they come."""

    def __init__(self, work: Path, leave_gib: float):
        self.proc = subprocess.Popen([PY, str(WORKLOADS), "squeeze", "--leave-gib", str(leave_gib)],
                                     stdout=subprocess.PIPE, stderr=open(work / "squeezer.err", "wb"),  # noqa: SIM115
                                     text=True, cwd=ROOT)
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            print("squeezer: " + line.rstrip(), flush=True)
            if line.startswith("READY"):
                self.ready.set()
        self.ready.set()  # it died: nobody waits the full timeout

    def result(self, timeout: float = 180) -> dict[str, Any]:
        """Its RESULT once it holds its memory (empty if it failed or took longer than `timeout`)."""
        self.ready.wait(timeout)
        return next((json.loads(line[7:]) for line in self.lines if line.startswith("RESULT ")), {})


class Escalation(threading.Thread):
    """If the server's first flushes are all short (< 250 ms), have the squeezer give back its large block once,
    so that the server's next fills, and so its flushes, are about twice as large. Logged, never silent."""

    def __init__(self, llm: str, squeezer: Squeezer | None):
        super().__init__(name="escalation", daemon=True)
        self.llm, self.squeezer = llm, squeezer
        self.done = threading.Event()
        self.record: dict[str, Any] = {"escalated": False}

    def run(self) -> None:
        while self.squeezer is not None and not self.done.wait(2.0):
            cycles = ((_get(f"{self.llm}/control/state") or {}).get("fragmenter") or {}).get("cycles", [])
            retried = [c for c in cycles if c.get("alloc_retries", 0) >= 1]
            if len(retried) >= 3 and max(c["retry_ms"] for c in retried) < 250:
                self.squeezer.proc.send_signal(signal.SIGUSR1)
                self.record = {"escalated": True, "at_ns": time.time_ns(), "after_cycles": len(cycles),
                               "retry_ms_before": [c["retry_ms"] for c in retried]}
                print("ESCALATION " + json.dumps(self.record), flush=True)
                return


def classify(stall: dict[str, Any], cycles: list[dict[str, Any]]) -> dict[str, Any]:
    """Which timed window of the server (allocator retry, cleanup, fill) the stall's gap overlaps."""
    end = time_ns(stall["time"])
    begin = end - int(stall["attrs"]["gap_ms"] * 1e6)
    windows = []
    for c in cycles:
        for name in ("retry", "cleanup", "fill"):
            lo, hi = c.get(f"{name}_start_ns"), c.get(f"{name}_end_ns")
            if lo is not None and begin <= hi + SLACK_NS and lo <= end + SLACK_NS:
                windows.append({"window": name, "cycle": c["cycle"], "window_ms": round((hi - lo) / 1e6, 3)})
    return {"id": stall["id"], "time": stall["time"], "gap_ms": stall["attrs"]["gap_ms"],
            "token_index": stall["attrs"]["token_index"], "windows": windows}


def why_not_fired(stalls: list[dict[str, Any]], frags: list[dict[str, Any]]) -> str:
    if not stalls:
        return f"no token_stall of {RULE_GAP_MS:g} ms or more was stored"
    if any(s.get("gpu") is None for s in stalls):
        return "token_stall events lack gpu: the join on (host, gpu) cannot happen"
    high = [f for f in frags if f["attrs"]["fragmentation_ratio"] > 0.65]
    if not high:
        return "no mem_fragmentation with FR > 0.65 was stored"
    if {(f["host"], f.get("gpu")) for f in high}.isdisjoint({(s["host"], s.get("gpu")) for s in stalls}):
        return "the fragmentation and stall events have different (host, gpu)"
    close = [(f, s) for s in stalls for f in high if 0 <= time_ns(s["time"]) - time_ns(f["time"]) <= 60e9]
    return "no stall within 60 s after an FR > 0.65 sample" if not close else "unknown: see the events"


def check_fragmenting(check: Checks, state: dict[str, Any], stored: list[dict[str, Any]],
                      violations: list[dict[str, Any]], phase: dict[str, Any]) -> dict[str, Any]:
    pid, cycles = state.get("pid"), (state.get("fragmenter") or {}).get("cycles", [])
    retried = [c for c in cycles if c.get("alloc_retries", 0) >= 1]
    check("server fragmenter: a big request made the serving process's allocator flush and retry mid-stream",
          any(c.get("mid_stream") for c in retried),
          [{k: c.get(k) for k in ("cycle", "freed_segments", "expected_fr", "retry_ms", "alloc_retries",
                                  "mid_stream", "cleanup_ms", "oom")} for c in cycles])
    stalls = [e for e in stored if e["kind"] == "token_stall"]
    in_phase = [s for s in stalls if phase["start_ns"] <= time_ns(s["time"]) <= phase["end_ns"]
                and s["attrs"]["gap_ms"] >= RULE_GAP_MS]
    frags = [e for e in stored if e["kind"] == "mem_fragmentation" and e.get("pid") == pid]
    hosts = {f["host"] for f in frags}
    check("token_stall events stored (gap >= 200 ms) with gpu 0 and the allocator reporter's host",
          bool(in_phase) and all(s.get("gpu") == 0 and s["host"] in hosts for s in in_phase),
          [(s["attrs"]["gap_ms"], s["attrs"]["token_index"], s.get("gpu"), s["host"]) for s in stalls])
    matched = [classify(s, cycles) for s in stalls]
    big = [m for m in matched if m["gap_ms"] >= RULE_GAP_MS]
    on_retry = [m for m in big if any(w["window"] == "retry" for w in m["windows"])]
    check(f"stalls >= {RULE_GAP_MS:g} ms that overlap a timed allocator flush-and-retry of the server: "
          f"{len(on_retry)}/{len(big)}", bool(on_retry), big)
    expected = [c["expected_fr"] for c in cycles]
    high = [f for f in frags if f["attrs"]["fragmentation_ratio"] > 0.65]
    close = [f for f in high if any(abs(f["attrs"]["fragmentation_ratio"] - x) <= FR_TOLERANCE for x in expected)]
    check(f"allocator probe: mem_fragmentation FR > 0.65 from the server pid, within {FR_TOLERANCE} of a cycle's "
          "expected FR", bool(close),
          [(f["attrs"]["fragmentation_ratio"], f["attrs"]["free_bytes"], f["attrs"]["alloc_retries"]) for f in high])
    fired = [v for v in violations if v["rule_id"] == "fragmentation-then-stall"]
    evidence = {e for v in fired for e in v["explanation"]["evidence"]}
    cites = bool(evidence & {f["id"] for f in high}) and bool(evidence & {s["id"] for s in stalls})
    reason = why_not_fired([s for s in stalls if s["attrs"]["gap_ms"] >= RULE_GAP_MS], frags)
    check("fragmentation-then-stall fired, citing the server's FR > 0.65 sample and a token_stall",
          cites, [v["summary"] for v in fired] or f"not fired: {reason}")
    check("fragmentation-high fired for the server's fragmentation",
          any(v["rule_id"] == "fragmentation-high" for v in violations))
    return {"stalls": matched, "on_retry": len(on_retry), "cycles": cycles}


def check_requests(check: Checks, stored: list[dict[str, Any]], violations: list[dict[str, Any]]) -> dict[str, Any]:
    """Every streamed request sent token_request start then first_token (the first-token absence's input), each
    finished one its done and a token_latency, and first-token-missing stayed quiet. A request the phase
    deadline cut off has no done and no token_latency."""
    requests = [e for e in stored if e["kind"] == "token_request"]
    phases: dict[str, set[str]] = {}
    for event in requests:
        phases.setdefault(event["attrs"]["request_id"], set()).add(event["attrs"]["phase"])
    latencies = [e for e in stored if e["kind"] == "token_latency"]
    answered = [rid for rid, seen in phases.items() if {"start", "first_token"} <= seen]
    finished = [rid for rid, seen in phases.items() if "done" in seen or "error" in seen]
    check(f"token_request start and first_token stored for every streamed request ({len(answered)} of "
          f"{len(phases)}), done for each of the {len(latencies)} with a token_latency",
          bool(latencies) and len(answered) == len(phases) and len(finished) == len(latencies),
          {rid: sorted(seen) for rid, seen in phases.items() if rid not in answered or rid not in finished})
    missing = [v["summary"] for v in violations if v["rule_id"] == "first-token-missing"]
    check("first-token-missing did not fire (every first token arrived)", not missing, missing)
    ttft = sorted(e["attrs"]["ttft_ms"] for e in requests if e["attrs"]["phase"] == "first_token")
    return {"requests": len(phases), "finished": len(finished), "ttft_ms_max": ttft[-1] if ttft else None}


def run_phases(args: argparse.Namespace, api: Api, llm: str, check: Checks, out: Path,
               squeezer: Squeezer | None) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    with open(out / "h200-tokens-probe.jsonl", "w") as sink:
        probe = Probe(api, llm, sink, args.max_tokens, args.stall_ms)
        crowded = probe.run("crowded", args.crowded_requests, args.interval, args.crowded_requests * 5 + 30)
        check("phase crowded: requests streamed without error",
              crowded["requests"] >= 1 and not crowded["errors"], crowded)
        check(f"phase crowded: no stall of {RULE_GAP_MS:g} ms or more while only the other process crowds the GPU",
              all(gap < RULE_GAP_MS for gap in crowded["stall_gaps_ms"]), crowded["stall_gaps_ms"])
        started = httpx.post(f"{llm}/control/fragment", json={}, timeout=10)
        check("LLM server started fragmenting its allocator", started.status_code == 200, started.text[:300])
        escalation = Escalation(llm, squeezer)
        escalation.start()
        summary["fragmenting"] = probe.run("fragmenting", args.frag_requests, args.interval, args.frag_deadline_s)
        escalation.done.set()
        summary["escalation"] = escalation.record
        stopped = httpx.post(f"{llm}/control/fragment", json={"stop": True}, timeout=90)
        summary["llm_state"] = stopped.json() if stopped.status_code == 200 else httpx.get(
            f"{llm}/control/state", timeout=10).json()
        summary.update(crowded=crowded, posted=probe.statuses)
    time.sleep(3)  # the reporter ships every second
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--llm-port", type=int, default=8000)
    parser.add_argument("--leave-gib", type=float, default=40.0, help="What the squeezer leaves to the server.")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--stall-ms", type=float, default=100.0)
    parser.add_argument("--crowded-requests", type=int, default=8)
    parser.add_argument("--frag-requests", type=int, default=80)
    parser.add_argument("--frag-deadline-s", type=float, default=90.0)
    parser.add_argument("--dry-run", action="store_true", help="CPU model, no squeezer: the plumbing only.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuslo-tokens-"))
    check, api, llm = Checks(), Api(f"http://127.0.0.1:{args.port}"), f"http://127.0.0.1:{args.llm_port}"
    procs = [start("gpuslo", [*GPUSLO, "serve", "--port", str(args.port), "--rules", str(ROOT / "rules")], work,
                   {"GPUSLO_DATABASE_URL": f"sqlite:///{work / 'gpuslo.db'}", "GPUSLO_AUTH_REQUIRED": "false",
                    "GPUSLO_SECRET_KEY_FILE": str(work / "secret_key")})]
    summary: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        check("gpuslo serve answers /healthz", wait_for(api.healthy, 60), api.url)
        device = "cpu" if args.dry_run else "cuda"
        procs.append(start("llm", [PY, str(WORKLOADS), "serve", "--port", str(args.llm_port), "--gpuslo", api.url,
                                   "--device", device] + (["--layers", "2", "--hidden", "256"] if args.dry_run
                                                          else []), work))
        up = wait_for(lambda: _get(f"{llm}/healthz"), 240, 1.0)
        state = _get(f"{llm}/control/state") or {}
        check(f"LLM server up on {device} with the allocator reporter", bool(up) and state.get("device") == device
              and (args.dry_run or state.get("reporter") is not None), state)
        squeezer = None
        if not args.dry_run:
            squeezer = Squeezer(work, args.leave_gib)
            procs.append(squeezer.proc)  # type: ignore[arg-type]
            summary["squeezer"] = result = squeezer.result()
            check("squeezer (another process) fragmented, retried and holds most of the GPU",
                  result.get("num_alloc_retries", 0) >= 1 and result.get("fr_before_retry", 0) > 0.65
                  and result.get("held_bytes", 0) >= 0.55 * result.get("device_total", 1), result)
        summary.update(run_phases(args, api, llm, check, args.out, squeezer))
        stored = sorted(api.events(), key=lambda e: (e["time"], e["id"]))
        violations = api.violations()
        summary["analysis"] = check_fragmenting(check, summary["llm_state"], stored, violations,
                                                summary["fragmenting"])
        summary["requests"] = check_requests(check, stored, violations)
        save(args.out, "h200-token-stalls.jsonl", stored)
        details = [api.http.get(f"/api/v1/violations/{v['id']}").json() for v in violations]
        (args.out / "h200-tokens-violations.json").write_text(json.dumps(details, indent=1))
    finally:
        for proc in reversed(procs):
            stop(proc)
        summary["checks"] = check.items
        (args.out / "h200-tokens-summary.json").write_text(json.dumps(summary, indent=1, default=str))
        for name in ("llm", "gpuslo"):
            lines = (work / f"{name}.log").read_text(errors="replace").splitlines()
            quiet = "\n".join(line for line in lines if "apscheduler" not in line)  # its per-job lines are noise
            print(f"--- {name} log (tail) ---\n" + quiet[-5000:])
    print(f"{sum(i['ok'] for i in check.items)}/{len(check.items)} checks passed", flush=True)
    return 0 if check.all_ok else 1


def _get(url: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(url, timeout=10)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(main())
