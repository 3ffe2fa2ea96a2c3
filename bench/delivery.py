"""Delivery beside a hanging receiver (issue 11): time for N notifications to a healthy receiver, alone and with
a receiver that hangs every request until the HTTP timeout, through the real DeliveryWorker on its scheduler.

    .venv/bin/python bench/delivery.py [--count 600] [--timeout 10] [--database sqlite|postgresql]

Prints both times and their ratio (1.0: the hanging receiver costs the healthy one nothing). Before issue 11
the worker sent one batch of 5 after another, so the same run took 129 s for 600 with a 10 s timeout.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import create_engine, text

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, enqueue_for_match, load_alerts_text
from gpuslo.engine.events import parse_event
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match

LOCAL = "allow_private_network: true, allow_http: true"
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


class Receiver:
    """Answers 200 at once, or (hang) holds every request open until released."""

    def __init__(self, hang: bool):
        self.count, self.release = 0, threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.count += 1
                if hang:
                    owner.release.wait(60)
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def _match(n: int, now: datetime) -> tuple[Any, Match]:
    event = parse_event({"id": f"bench-{n}-{secrets.token_hex(4)}", "kind": "cuda_oom", "time": now.isoformat(),
                         "host": f"node-{n}", "gpu": 0,
                         "attrs": {"api": "cudaMalloc", "requested_bytes": 2 << 30, "free_bytes": 1 << 30}})
    explanation = Explanation((ConditionResult("requested_bytes > 1GiB", "requested_bytes", 2 << 30, True),),
                              (event,), (ChainLink(event.id, event.kind, event.time, "oom"),))
    return event, Match("oom", "OOM", "memory", "1", "a" * 64, "availability", "99.9%", "critical",
                        f"host=node-{n}-{event.id}", MappingProxyType({"host": f"node-{n}"}), "OOM", "-", None,
                        explanation, now)


def run(database: Database, count: int, timeout_s: float, hanging: bool) -> float:
    healthy, stuck = Receiver(False), Receiver(True)
    names = {"healthy": healthy.url, **({"stuck": stuck.url} if hanging else {})}
    config = load_alerts_text("receivers:\n" + "".join(
        f'  - {{name: {n}, type: webhook, {LOCAL}, url: "{u}/hook"}}\n' for n, u in names.items())
        + f"routes:\n  - {{receivers: [{', '.join(names)}]}}\n", "alerts.yaml", {})
    now = datetime.now(UTC)
    with database.session() as session:
        for n in range(count):
            event, match = _match(n, now)
            repository.store_events(session, [event], now=now)
            view = violations.record_match(session, match, now=now)
            enqueue_for_match(session, view, config=config, public_url="https://gpuslo.example", now=now)
    worker = DeliveryWorker(database, config, DeliveryPolicy(timeout_s=timeout_s, lease_s=timeout_s * 3 + 60))
    scheduler = BackgroundScheduler(timezone=UTC)
    worker.install(scheduler)
    started = time.monotonic()
    scheduler.start()
    try:
        while healthy.count < count:
            time.sleep(0.01)
        return time.monotonic() - started
    finally:
        scheduler.shutdown(wait=False)
        stuck.close()
        worker.close()
        healthy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    results = {}
    for hanging in (False, True):
        if args.database == "sqlite":
            url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        else:
            name = f"gpuslo_bench_{secrets.token_hex(4)}"
            with create_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT").connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
            url = POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{name}"
        database = Database(url)
        database.upgrade()
        try:
            results[hanging] = run(database, args.count, args.timeout, hanging)
        finally:
            database.dispose()
            if args.database == "postgresql":
                with create_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT").connect() as connection:
                    connection.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    alone, beside = results[False], results[True]
    print(f"{args.database}: {args.count} deliveries to a healthy receiver: alone {alone:.2f} s, beside a receiver "
          f"hanging {args.timeout:g} s per request {beside:.2f} s (ratio {beside / alone:.2f}, "
          f"+{beside - alone:.2f} s)")


if __name__ == "__main__":
    main()
