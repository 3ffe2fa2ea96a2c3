"""Spool N events one by one while shipping to a server that is down; print each id once it is committed.

Run by test_agent_kill9.py as a subprocess and killed with SIGKILL part-way.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gpuslo.engine.events import parse_event
from gpuslo.probes.shipper import Shipper, ShipperConfig
from gpuslo.probes.spool import Spool


def main(spool_path: str, server: str, count: int) -> None:
    spool = Spool(Path(spool_path))
    shipper = Shipper(spool, ShipperConfig(server=server, host="node-k", timeout_s=1.0,
                                           backoff_base_s=0.05, backoff_max_s=0.2))
    for i in range(count):
        event_id = f"kill-{i:05d}"
        spool.append([parse_event({"id": event_id, "kind": "gpu_xid", "time": "2025-01-01T00:00:00Z",
                                   "host": "node-k", "gpu": 0, "source": "test", "attrs": {"xid": 79}})])
        print(event_id, flush=True)
        if i % 25 == 0:
            shipper.ship_once()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
