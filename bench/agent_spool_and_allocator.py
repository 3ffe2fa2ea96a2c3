"""Costs of the agent's spool and of the allocator maths, each as a ratio to a baseline run alongside.

- spool: events appended one per transaction (WAL + synchronous=FULL, what a sampler does) and in batches of
  100, against the baseline of json-encoding the same events (the work that cannot be avoided).
- allocator maths: device_states over a large recorded-shape snapshot, against a bare loop over the same blocks.

Run: .venv/bin/python bench/agent_spool_and_allocator.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from gpuslo.engine.events import parse_event
from gpuslo.probes.spool import Spool
from gpuslo.probes.torch_allocator import device_states

N_EVENTS = 2000


def _events(prefix: str) -> list:
    return [parse_event({"id": f"{prefix}-{i}", "kind": "gpu_xid", "time": "2025-01-01T00:00:00Z",
                         "host": "node", "gpu": 0, "attrs": {"xid": 79}}) for i in range(N_EVENTS)]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_spool(folder: Path) -> None:
    base_events = _events("b")
    base = _timed(lambda: [json.dumps(e.to_dict(), sort_keys=True) for e in base_events])
    single_spool, batch_spool = Spool(folder / "one.db"), Spool(folder / "batch.db")
    one_events, batch_events = _events("o"), _events("p")
    single = _timed(lambda: [single_spool.append([e]) for e in one_events])
    batched = _timed(lambda: [batch_spool.append(batch_events[i:i + 100]) for i in range(0, N_EVENTS, 100)])
    read_ack = _timed(lambda: [batch_spool.ack([s.seq for s in batch_spool.read_batch(500)]) for _ in range(4)])
    print(f"spool: baseline json encode {base / N_EVENTS * 1e6:.1f} us/event")
    print(f"spool: append 1/txn {single / N_EVENTS * 1e6:.1f} us/event ({single / base:.0f}x baseline)")
    print(f"spool: append 100/txn {batched / N_EVENTS * 1e6:.1f} us/event ({batched / base:.1f}x baseline)")
    print(f"spool: read+ack 500/batch {read_ack / N_EVENTS * 1e6:.1f} us/event ({read_ack / base:.1f}x baseline)")
    single_spool.close()
    batch_spool.close()


def bench_allocator() -> None:
    segments = [{"device": s % 8, "total_size": 50 * 2 * 1024 * 1024,
                 "blocks": [{"size": 2 * 1024 * 1024, "state": "inactive" if b % 2 else "active_allocated"}
                            for b in range(50)]} for s in range(2000)]
    blocks = 2000 * 50
    base = _timed(lambda: sum(b["size"] for seg in segments for b in seg["blocks"]))
    maths = _timed(lambda: device_states(segments))
    print(f"allocator maths: {blocks} blocks in {maths * 1e3:.1f} ms ({maths / blocks * 1e9:.0f} ns/block, "
          f"{maths / base:.1f}x a bare sum over the blocks)")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        bench_spool(Path(tmp))
    bench_allocator()
