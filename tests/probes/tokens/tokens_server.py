"""A real OpenAI-style streaming server for the token-probe tests: scripted stalls, failures, a metrics page."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Seconds slept before each token: 20 ms to the first, 10 ms apart, 300 ms before token 7, 250 ms before 15.
STALL_SCRIPT: tuple[float, ...] = tuple(
    0.020 if i == 0 else 0.300 if i == 7 else 0.250 if i == 15 else 0.010 for i in range(20))
QUICK_SCRIPT: tuple[float, ...] = (0.005,) * 5
HANG_S = 3.0


@dataclass
class Served:
    """What the server saw and did for one request: token send times on the shared monotonic clock."""

    path: str
    body: dict[str, Any]
    request_id: str
    sent_ns: list[int] = field(default_factory=list)
    traceparent: str = ""


class StreamServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.served: list[Served] = []
        self.metrics_text = ""
        self.metrics_status = 200
        self.stopping = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hang up mid-stream on purpose (timeouts, [DONE] then close): not worth a traceback."""

    def find(self, request_id: str) -> Served:
        return next(s for s in self.served if s.request_id == request_id)


def _chunk(api: str, text: str | None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
    if api == "chat":
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": "cmpl-test", "object": obj, "created": 1736000000, "model": "tiny", "choices": [choice]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # or the kernel holds small writes back and adds gaps of its own
    server: StreamServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = self.server.metrics_text.encode()
        self.send_response(self.server.metrics_status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        scenario, _, rest = self.path.lstrip("/").partition("/")
        api = "chat" if rest.endswith("chat/completions") else "completions"
        served = Served(self.path, body, self.headers.get("X-Request-Id", ""),
                        traceparent=self.headers.get("traceparent", ""))
        self.server.served.append(served)
        getattr(self, f"_scenario_{scenario}")(api, served)

    # ---- wire helpers ----
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _frame(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _event(self, payload: dict[str, Any] | str, sep: str = "\n") -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._frame(f"data: {text}{sep}{sep}".encode())

    def _tokens(self, api: str, served: Served, script: Sequence[float]) -> None:
        if api == "chat":
            self._event(_chunk(api, "", role=True))  # vLLM's role-only first chunk: not a token
        for index, delay in enumerate(script):
            time.sleep(delay)
            self._event(_chunk(api, f" t{index}"))
            served.sent_ns.append(time.monotonic_ns())

    def _finish(self, api: str, done: bool = True) -> None:
        self._event(_chunk(api, None if api == "chat" else "", finish="length"))
        if done:
            self._event("[DONE]")
        self._frame(b"")

    # ---- scenarios, chosen by the first path segment ----
    def _scenario_stalls(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, STALL_SCRIPT)
        self._finish(api)

    def _scenario_quick(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT)
        self._finish(api)

    def _scenario_http503(self, api: str, served: Served) -> None:
        body = b'{"error": {"message": "server overloaded", "code": 503}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _scenario_hang(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT[:2])
        self.server.stopping.wait(HANG_S)

    def _scenario_silent(self, api: str, served: Served) -> None:
        """Answers 200 and opens the stream, then sends no token at all (a request stuck before its prefill)."""
        self._start_stream()
        if api == "chat":
            self._event(_chunk(api, "", role=True))
        self.server.stopping.wait(HANG_S)

    def _scenario_cut(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT)
        self._finish(api, done=False)

    def _scenario_abort(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT[:3])
        self.wfile.write(b"40\r\ndata: {\"id\"")  # half a frame, then the connection drops
        self.close_connection = True

    def _scenario_malformed(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT[:2])
        self._event('{"id": "cmpl-test", "choices": [')
        self._finish(api)

    def _scenario_inerror(self, api: str, served: Served) -> None:
        self._start_stream()
        self._tokens(api, served, QUICK_SCRIPT[:2])
        self._event({"error": {"message": "CUDA out of memory", "code": 500}})

    def _scenario_split(self, api: str, served: Served) -> None:
        """CRLF line ends, comments, multi-byte text, each event dribbled out three bytes per write."""
        self._start_stream()
        self._frame(b": keep-alive\r\n\r\n")
        for index in range(6):
            payload = json.dumps(_chunk(api, f" é€{index}"), ensure_ascii=False).encode()
            wire = b"data: " + payload + b"\r\n\r\n"
            for start in range(0, len(wire), 3):
                self._frame(wire[start:start + 3])
            served.sent_ns.append(time.monotonic_ns())
        self._frame(b"data: [DONE]\r\n\r\n")
        self._frame(b"")
