"""A delivery worker process for the crash test: `crash_worker.py DB_URL ALERTS_YAML TIMEOUT_S LEASE_S`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, load_alerts_config
from gpuslo.engine.store.db import Database


def main() -> None:
    url, config_path, timeout_s, lease_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    policy = DeliveryPolicy(timeout_s=timeout_s, per_receiver=1, lease_s=lease_s, base_delay_s=0.1, max_delay_s=0.5)
    worker = DeliveryWorker(Database(url), load_alerts_config(config_path), policy)
    print("ready", flush=True)
    while True:
        if worker.run_once() == 0:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
