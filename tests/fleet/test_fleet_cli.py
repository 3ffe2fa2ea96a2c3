"""The three fleet commands as an operator runs them, on the real cluster and PostgreSQL: `gpuslo worker`,
`gpuslo serve --bus` (HTTP ingest → bus → worker → the replica's API) and `gpuslo agent --bus` (its spool
shipped over the bus)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from fleet_cluster_support import NatsCluster, free_port
from fleet_support import RULES, wait_for
from sqlalchemy import text

from gpuslo.engine.events import parse_event
from gpuslo.engine.fleet.bus import Bus
from gpuslo.engine.store.db import Database
from gpuslo.probes.spool import Spool

GPUSLO = str(Path(sys.executable).parent / "gpuslo")
OOM = {"kind": "cuda_oom", "gpu": 0, "time": "2026-12-01T11:00:00Z",
       "attrs": {"api": "cudaMalloc", "requested_bytes": 2147483648, "free_bytes": 1073741824}}


def _stored_ids(database: Database) -> set[str]:
    with database.engine.connect() as connection:
        return set(connection.execute(text("SELECT id FROM events")).scalars())


def test_worker_serve_bus_and_agent_bus_from_the_command_line(cluster: NatsCluster, bus: Bus,
                                                                fleet_database: Database, tmp_path: Path) -> None:
    env = {**os.environ, "GPUSLO_DATABASE_URL": fleet_database.url, "GPUSLO_RULES_DIR": str(RULES),
           "GPUSLO_AUTH_REQUIRED": "false", "GPUSLO_RULES_POLL_SECONDS": "0", "GPUSLO_BUS": ",".join(cluster.urls)}
    spool = Spool(tmp_path / "spool.db")
    spool.append([parse_event({**OOM, "id": "from-agent", "host": "node-a"})])
    spool.close()
    port = free_port()
    commands = [[GPUSLO, "worker", "--partitions", "2", "--name", "cli"],
                [GPUSLO, "serve", "--bus", ",".join(cluster.urls), "--port", str(port)],
                [GPUSLO, "agent", "--bus", ",".join(cluster.urls), "--spool", str(tmp_path / "spool.db"),
                 "--host", "node-a", "--ship-interval", "0.5"]]
    logs = [tmp_path / f"{name}.log" for name in ("worker", "serve", "agent")]
    processes = []
    for command, log in zip(commands, logs, strict=True):
        with open(log, "wb") as out:
            processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=out))
    try:
        def posted() -> bool:
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/api/v1/events",
                                    json=[{**OOM, "id": "from-http", "host": "node-b"}], timeout=5)
            except httpx.HTTPError:
                return False
            return answer.status_code == 200 and answer.json()["accepted"] == 1
        wait_for(posted, 60, "serve --bus accepting an event (after the worker wrote the routing table)", 0.5)
        wait_for(lambda: {"from-http", "from-agent"} <= _stored_ids(fleet_database), 60,
                 "the worker storing both events", 0.2)

        def violations() -> set[tuple[str, str]]:
            items = httpx.get(f"http://127.0.0.1:{port}/api/v1/violations", timeout=5).json()["items"]
            return {(v["rule_id"], v["host"]) for v in items}
        # An OOM goes to a host partition and a job partition (root-cause rules): its row is stored by whichever
        # stores it first, so the host partition's violation is waited for, not assumed with the row.
        wait_for(lambda: violations() >= {("cuda-oom", "node-a"), ("cuda-oom", "node-b")}, 60,
                 "both violations through the replica's API", 0.2)
    finally:
        for process in reversed(processes):
            process.terminate()
        codes = [process.wait(30) for process in reversed(processes)]
    assert codes == [0, 0, 0], "\n".join(log.read_text()[-1500:] for log in logs)
