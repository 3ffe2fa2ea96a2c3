"""Event streams for bench/engine.py: a fleet-like mix, a paced incident stream, and never-completing events.

Events are built as JSON dicts (what probes POST) and, for the in-process parts, as Event objects built
directly (parse_event's schema validation is ingest's job, measured in the HTTP part, not the engine's).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import Event, format_time, parse_event

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC).timestamp()
HOSTS, GPUS = 64, 8
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/generate")
# (kind, share of the stream): healthy telemetry dominates; error kinds are 2 % together.
MIX = (("token_latency", 0.36), ("mem_fragmentation", 0.30), ("probe_status", 0.20), ("token_stall", 0.12),
       ("nccl_timeout", 0.004), ("cuda_oom", 0.004), ("cuda_error", 0.004), ("gpu_xid", 0.003),
       ("cuda_graph_error", 0.0025), ("nccl_error", 0.0025))
XIDS = (13, 31, 43, 45, 48, 63, 64, 79, 94, 95)
GIB = 1 << 30


def _attrs(kind: str, rng: random.Random) -> dict[str, Any]:
    """Attributes of one event; about 1-2 % of the healthy kinds cross a shipped threshold."""
    if kind == "token_latency":
        slow = rng.random() < 0.01
        return {"endpoint": rng.choice(ENDPOINTS), "model": "llama-3-70b", "tokens": rng.randint(50, 400),
                "itl_p99_ms": round(rng.uniform(210, 900) if slow else rng.uniform(20, 180), 2),
                "ttft_ms": round(rng.uniform(80, 1500), 1)}
    if kind == "mem_fragmentation":
        ratio = rng.uniform(0.66, 0.95) if rng.random() < 0.01 else rng.uniform(0.05, 0.6)
        free = rng.randint(1, 20) * GIB
        return {"scope": "allocator", "free_bytes": free, "largest_free_bytes": int(free * (1 - ratio)),
                "fragmentation_ratio": round(ratio, 4), "alloc_retries": rng.randint(0, 3)}
    if kind == "probe_status":
        dropped = rng.randint(1, 50) if rng.random() < 0.005 else 0
        return {"probe": rng.choice(("nvml", "ebpf", "logs")), "state": "up", "dropped": dropped}
    if kind == "token_stall":
        gap = rng.uniform(200, 2000) if rng.random() < 0.02 else rng.uniform(50, 190)
        return {"gap_ms": round(gap, 1), "token_index": rng.randint(1, 2000), "endpoint": rng.choice(ENDPOINTS)}
    if kind == "nccl_timeout":
        return {"op": "ALLREDUCE", "seq": rng.randint(1, 500), "timeout_ms": 600000, "elapsed_ms": 600034}
    if kind == "cuda_oom":
        return {"api": "cudaMalloc", "requested_bytes": rng.randint(1, 3 * GIB), "free_bytes": rng.randint(0, GIB)}
    if kind in ("cuda_error", "cuda_graph_error"):
        return {"api": "cudaGraphLaunch" if kind == "cuda_graph_error" else "cudaMemcpyAsync", "error_code": 700,
                "error_name": "cudaErrorIllegalAddress"}
    if kind == "gpu_xid":
        return {"xid": rng.choice(XIDS), "pci_bus": "0000:3b:00", "detail": "GPU has fallen off the bus"}
    return {"api": "ncclAllReduce", "error_name": "ncclSystemError", "detail": "socket closed"}  # nccl_error


def mixed(count: int, *, seed: int = 7, prefix: str = "ev", start: float = T0,
          step_s: float = 0.001) -> list[dict[str, Any]]:
    """`count` fleet events as JSON dicts, event time advancing `step_s` per event."""
    rng = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    out = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        host = rng.randrange(HOSTS)
        item: dict[str, Any] = {"id": f"{prefix}-{i}", "kind": kind, "host": f"node-{host}",
                                "time": format_time(datetime.fromtimestamp(start + i * step_s, UTC)),
                                "gpu": rng.randrange(GPUS), "pid": 1000 + host,
                                "attrs": _attrs(kind, rng)}
        if kind in ("nccl_timeout", "nccl_error"):
            item.update(job=f"job-{host // 8}", rank=host % 8)
        out.append(item)
    return out


def incidents(count: int, *, prefix: str = "lat", start: float = T0) -> list[dict[str, Any]]:
    """Events that each raise a violation: high fragmentation then a long stall on the same GPU, 128 GPUs."""
    out = []
    for i in range(count):
        host, gpu = (i // 2) % 16, (i // 32) % 8
        base = {"id": f"{prefix}-{i}", "host": f"node-{host}", "gpu": gpu,
                "time": format_time(datetime.fromtimestamp(start + i * 0.001, UTC))}
        if i % 2 == 0:
            out.append({**base, "kind": "mem_fragmentation",
                        "attrs": {"fragmentation_ratio": 0.8, "free_bytes": 8 * GIB, "largest_free_bytes": GIB}})
        else:
            out.append({**base, "kind": "token_stall", "attrs": {"gap_ms": 640.0, "endpoint": ENDPOINTS[0]}})
    return out


def unpaired(count: int, *, start: float = T0, step_s: float = 0.01) -> Iterator[Event]:
    """Fragmentation above 0.65 on ever-new host/GPU pairs: each opens a correlation no stall ever completes."""
    for i in range(count):
        moment = datetime.fromtimestamp(start + i * step_s, UTC)
        yield Event(id=f"mem-{i}", kind="mem_fragmentation", time=moment, host=f"mem-node-{i // 8}", gpu=i % 8,
                    attrs=MappingProxyType({"fragmentation_ratio": 0.7 + (i % 25) / 100, "free_bytes": 8 * GIB,
                                            "largest_free_bytes": GIB}))


def to_event(item: dict[str, Any]) -> Event:
    """The Event parse_event would build from a dict this module made (without re-validating it)."""
    return Event(id=item["id"], kind=item["kind"], time=datetime.fromisoformat(item["time"].replace("Z", "+00:00")),
                 host=item["host"], gpu=item.get("gpu"), pid=item.get("pid"), job=item.get("job"),
                 rank=item.get("rank"), attrs=MappingProxyType(dict(item.get("attrs") or {})))


def check_fast_build(items: list[dict[str, Any]], sample: int = 300) -> None:
    """Guard: the direct build equals parse_event on a sample, so the engine sees what ingest would give it."""
    for item in items[:sample]:
        if to_event(item) != parse_event(item):
            raise AssertionError(f"to_event differs from parse_event for {item['id']}")
