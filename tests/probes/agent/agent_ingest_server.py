"""A real tiny ingest server on 127.0.0.1 that records what it got and answers like POST /api/v1/events."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class IngestLog:
    """Every request seen, every event stored (deduplicated by id, as the server does), and a mode."""

    # "ok"; "fail" (500); "reject:<id>" (that id answered rejected); "lose_once" (store the first batch,
    # then drop the connection without an answer, as when a server dies after its commit).
    mode: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)
    stored: dict[str, str] = field(default_factory=dict)
    received_ids: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, items: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        results = []
        with self.lock:
            for index, item in enumerate(items):
                event_id = item.get("id")
                body = json.dumps(item, sort_keys=True)
                self.received_ids.append(event_id)
                if self.mode == f"reject:{event_id}":
                    status = "rejected"
                elif event_id in self.stored:
                    status = "duplicate" if self.stored[event_id] == body else "conflict"
                    if status == "conflict":
                        self.conflicts.append(event_id)
                else:
                    self.stored[event_id] = body
                    status = "accepted"
                results.append({"index": index, "id": event_id, "status": status, "problems": []})
        counts = {s: sum(1 for r in results if r["status"] == s)
                  for s in ("accepted", "duplicate", "rejected", "conflict")}
        return 200, {**counts, "results": results}


def _handler(log: IngestLog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with log.lock:
                log.requests.append({"path": self.path, "headers": dict(self.headers), "body": raw})
            if log.mode == "fail":
                self._reply(500, {"error": {"status": 500, "code": "internal_server_error"}})
                return
            status, body = log.answer(json.loads(raw))
            if log.mode == "lose_once":
                log.mode = "ok"
                self.close_connection = True
                return
            self._reply(status, body)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
            return

    return Handler


class IngestServer:
    """Start on a free port (or a given one), stop on close."""

    def __init__(self, port: int = 0, mode: str = "ok"):
        self.log = IngestLog(mode=mode)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self.log))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
