"""Helpers of the ingest hardening tests: the live server handle, event bodies, strict JSON, metric samples."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from gpuslo.engine.events import format_time
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import Base

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"


@dataclass(frozen=True)
class Live:
    url: str
    core: Any

    def post(self, body: object | bytes, content_type: str = "application/json") -> httpx.Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(f"{self.url}/api/v1/events", content=data, headers={"Content-Type": content_type},
                          timeout=60)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=60)

    def events(self, query: str = "page_size=500") -> dict[str, Any]:
        response = self.get(f"/api/v1/events?{query}")
        assert response.status_code == 200, response.text
        return strict_json(response.text)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of /metrics (0 when the series does not exist)."""
        wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def samples(self, name: str) -> dict[str, float]:
        """Every sample of a metric family: labels text → value."""
        found = {}
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                key, value = line.rsplit(" ", 1)
                found[key[len(name):]] = float(value)
        return found

    def idle(self) -> None:
        assert self.core.wait_idle(30), "the engine did not become idle"


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity (which are not JSON)."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in an API answer is not JSON")
    return json.loads(text, parse_constant=refuse)


def now_time(seconds: float = 0.0) -> str:
    return format_time(datetime.now(UTC) + timedelta(seconds=seconds))


def xid_event(event_id: str, **fields: Any) -> dict[str, Any]:
    """A valid gpu_xid event (Xid 79: the GPU fell off the bus; one violation per host and GPU) a minute ago."""
    body: dict[str, Any] = {"id": event_id, "kind": "gpu_xid", "time": now_time(-60), "host": "node-a", "gpu": 0,
                            "attrs": {"xid": 79, "pci_bus": "0000:3b:00"}}
    body.update(fields)
    return body


def clear_rows(database: Database) -> None:
    """Empty every table. The audit log is append-only for the application (migration 0006_delivery_sessions):
    on PostgreSQL the superuser empties it in replica mode (no triggers); on SQLite it is left as it is."""
    with database.engine.begin() as connection:
        postgres = connection.dialect.name == "postgresql"
        if postgres:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
        for table in reversed(Base.metadata.sorted_tables):
            if postgres or table.name != "audit_log":
                connection.execute(table.delete())


def wait_for(predicate: Any, timeout: float = 10.0, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"not true within {timeout} s")
