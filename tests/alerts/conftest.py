"""Real HTTP receivers on 127.0.0.1 that answer from a script, stored violations, and a movable clock."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import Any

import pytest

from gpuslo.engine.events import Event
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedReceiver:
    """An HTTP server whose answers come from `script` (then 200): ("status", code[, headers[, body]]),
    ("hang", seconds), ("slow_body", code, seconds). Every request is recorded before it is answered."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.script: deque[tuple[Any, ...]] = deque()
        self.release = threading.Event()
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with owner.lock:
                    owner.requests.append(Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                                   body))
                    step = owner.script.popleft() if owner.script else ("status", 200)
                owner.answer(self, step)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, handler: BaseHTTPRequestHandler, step: tuple[Any, ...]) -> None:
        kind = step[0]
        try:
            if kind == "hang":
                self.release.wait(step[1])
                return
            code = step[1]
            if kind == "slow_body":
                handler.send_response(code)
                handler.send_header("Content-Length", "1000")
                handler.end_headers()
                for _ in range(int(step[2] * 10)):
                    handler.wfile.write(b"x")
                    handler.wfile.flush()
                    if self.release.wait(0.1):
                        return
                return
            headers = step[2] if len(step) > 2 else {}
            body = (step[3] if len(step) > 3 else '{"status":"ok"}').encode()
            handler.send_response(code)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.requests)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_server() -> Iterator[Callable[[], ScriptedReceiver]]:
    made: list[ScriptedReceiver] = []

    def make() -> ScriptedReceiver:
        made.append(ScriptedReceiver())
        return made[-1]

    yield make
    for server in made:
        server.close()


@pytest.fixture
def refused_url() -> str:
    """An address where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class Clock:
    def __init__(self, now: datetime = T0):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def build_match(evidence: list[Event], **overrides: Any) -> Match:
    latest = max(evidence, key=lambda e: e.time)
    explanation = Explanation(
        conditions=(ConditionResult("requested_bytes > 1GiB", "requested_bytes", 2 * 1024**3, True),),
        evidence=tuple(evidence), chain=tuple(ChainLink(e.id, e.kind, e.time, e.kind) for e in evidence))
    fields: dict[str, Any] = {
        "rule_id": "oom-storm", "rule_title": "OOM storm", "rulebook": "memory", "rulebook_version": "1",
        "rulebook_hash": "a" * 64, "slo": "availability", "slo_objective": "99.9%", "severity": "critical",
        "group_key": f"host={latest.host},gpu={latest.gpu}",
        "group": MappingProxyType({"host": latest.host, "gpu": latest.gpu}),
        "summary": f"OOMs on {latest.host}", "remediation": "lower the batch size", "runbook": None,
        "explanation": explanation, "seen_at": latest.time, "labels": MappingProxyType({"team": "serving"}),
    }
    fields.update(overrides)
    return Match(**fields)


@pytest.fixture
def record(make_event: Callable[..., Event]) -> Callable[..., tuple[Any, ViolationView]]:
    """`record(database, **match_overrides)`: store an event and record a match; returns (session-less) view.

    Pass `host=`/`gpu=` for the event's place; `enqueue=` a callable(session, view) run in the same transaction.
    """

    def run(database: Database, *, host: str = "node-a", gpu: int = 0, enqueue: Any = None,
            now: datetime = T0, **overrides: Any) -> tuple[Any, ViolationView]:
        event = make_event(host=host, gpu=gpu)
        with database.session() as session:
            repository.store_events(session, [event], now=now)
            view = violations.record_match(session, build_match([event], **overrides), now=now)
            extra = enqueue(session, view) if enqueue else None
        return extra, view

    return run


def _verify_standard_webhook(secrets: list[str], headers: dict[str, str], body: bytes) -> bool:
    """An independent Standard Webhooks verifier: any v1 signature matching any of the secrets."""
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    given = [s.split(",", 1)[1] for s in headers["webhook-signature"].split(" ") if s.startswith("v1,")]
    for secret in secrets:
        key = base64.b64decode(secret[len("whsec_"):])
        expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
        if any(hmac.compare_digest(expected, g) for g in given):
            return True
    return False


@pytest.fixture
def verify_standard_webhook() -> Callable[[list[str], dict[str, str], bytes], bool]:
    return _verify_standard_webhook


from alertmanager_support import alertmanager  # noqa: E402,F401  (the real-Alertmanager fixture)
