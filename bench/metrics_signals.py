"""Cost of the metrics ingest now feeds (SignalMetrics.observe: token histogram, stall counter, fragmentation
gauges) against the event validation ingest already does for the same events (parse_event, the baseline).

Run: .venv/bin/python bench/metrics_signals.py [--events N]. The last line is observe/parse in CPU time
(target <= 0.25: the metrics add at most a quarter of what validation costs).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Any

from prometheus_client import CollectorRegistry

from gpuslo.engine.events import parse_event
from gpuslo.engine.metrics_signals import SignalMetrics


def workload(count: int) -> list[dict[str, Any]]:
    """The fleet mix of bench/engine.py: token windows, stalls, allocator samples, probe status; 64 hosts × 8 GPUs."""
    rng = random.Random(7)
    items = []
    for n in range(count):
        host, gpu = f"gpu-node-{rng.randrange(64)}", rng.randrange(8)
        roll = rng.random()
        base = {"id": f"e-{n}", "time": f"2025-01-01T00:{n // 60000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}Z",
                "host": host, "gpu": gpu}
        if roll < 0.36:
            items.append({**base, "kind": "token_latency", "attrs": {
                "endpoint": "/v1/chat/completions", "model": "llama", "itl_p50_ms": rng.uniform(20, 60),
                "itl_p99_ms": rng.uniform(60, 400), "itl_max_ms": rng.uniform(100, 900), "tokens": 128}})
        elif roll < 0.66:
            items.append({**base, "kind": "mem_fragmentation", "attrs": {
                "scope": "allocator", "fragmentation_ratio": rng.random(), "free_bytes": 8 * 2**30,
                "largest_free_bytes": 2**30, "alloc_retries": 0}})
        elif roll < 0.78:
            items.append({**base, "kind": "token_stall", "attrs": {
                "endpoint": "/v1/chat/completions", "model": "llama", "gap_ms": rng.uniform(250, 2000),
                "token_index": 3}})
        else:
            items.append({**base, "kind": "probe_status", "attrs": {"probe": "nvml", "state": "up"}})
    return items


def best_of(runs: int, action: Any) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        action()
        best = min(best, time.thread_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000 if os.environ.get("GPUSLO_BENCH_QUICK") else 200_000)
    args = parser.parse_args()
    items = workload(args.events)
    events = [parse_event(item) for item in items]
    parse_s = best_of(3, lambda: [parse_event(item) for item in items])
    signals = SignalMetrics(CollectorRegistry())
    observe_s = best_of(3, lambda: signals.observe(events))
    print(f"events: {args.events}")
    print(f"parse_event (baseline): {parse_s / args.events * 1e6:.2f} µs/event")
    print(f"SignalMetrics.observe: {observe_s / args.events * 1e6:.2f} µs/event")
    print(f"observe/parse (CPU): {observe_s / parse_s:.3f} (target <= 0.25)")


if __name__ == "__main__":
    main()
