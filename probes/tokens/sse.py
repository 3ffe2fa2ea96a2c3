"""Streaming client for OpenAI-compatible completions: server-sent events parsed as bytes arrive."""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

import httpx

from gpuslo.engine.errors import ProbeError

Api = Literal["chat", "completions"]
PATHS: Mapping[str, str] = MappingProxyType({"chat": "/v1/chat/completions", "completions": "/v1/completions"})
MAX_LINE_CHARS = 1 << 20
_LINE_END = re.compile(r"\r\n|\r|\n")
# Chat deltas carry generated text in any of these; reasoning models stream thoughts before content.
_DELTA_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")


class SseError(ProbeError):
    """The stream is not valid server-sent events or not OpenAI-style chunks."""


@dataclass(frozen=True)
class SseMessage:
    """One dispatched server-sent event."""

    data: str
    event: str = "message"


class SseDecoder:
    """Incremental SSE parser (WHATWG rules): feed it bytes, get the events completed so far."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""

    def feed(self, raw: bytes) -> list[SseMessage]:
        """Parse the bytes; raises SseError when one line grows past MAX_LINE_CHARS."""
        self._buffer += self._utf8.decode(raw)
        messages: list[SseMessage] = []
        pos = 0
        for match in _LINE_END.finditer(self._buffer):
            # A trailing CR may be the first half of a CRLF split across reads: wait for more.
            if match.group() == "\r" and match.end() == len(self._buffer):
                break
            message = self._line(self._buffer[pos:match.start()])
            if message is not None:
                messages.append(message)
            pos = match.end()
        self._buffer = self._buffer[pos:]
        if len(self._buffer) > MAX_LINE_CHARS:
            raise SseError(f"malformed SSE: a line longer than {MAX_LINE_CHARS} characters")
        return messages

    def _line(self, line: str) -> SseMessage | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            message = SseMessage("\n".join(self._data), self._event or "message")
            self._data, self._event = [], ""
            return message
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


@dataclass(frozen=True)
class Chunk:
    """What one `data:` payload means: end of stream, or a chunk that may carry a token."""

    done: bool = False
    has_token: bool = False


def _choice_has_token(choice: Mapping[str, Any], api: Api) -> bool:
    if api == "completions":
        return bool(choice.get("text"))
    delta = choice.get("delta")
    return isinstance(delta, dict) and any(delta.get(name) for name in _DELTA_FIELDS)


def interpret(data: str, api: Api) -> Chunk:
    """Classify one `data:` payload; raises SseError on malformed JSON or an in-stream error object."""
    if data.strip() == "[DONE]":
        return Chunk(done=True)
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise SseError(f"malformed SSE data: {data[:120]!r}") from exc
    if not isinstance(payload, dict):
        raise SseError(f"malformed SSE data: {data[:120]!r}")
    if payload.get("error"):
        error = payload["error"]
        detail = error.get("message", error) if isinstance(error, dict) else error
        raise SseError(f"server error in stream: {str(detail)[:200]}")
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return Chunk()
    return Chunk(has_token=any(isinstance(c, dict) and _choice_has_token(c, api) for c in choices))


@dataclass(frozen=True)
class StreamRequest:
    """One streaming completion to send."""

    url: str
    api: Api
    model: str
    prompt: str
    max_tokens: int
    timeout_s: float
    request_id: str
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def body(self) -> dict[str, Any]:
        """The JSON body; deterministic sampling so runs are comparable."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "stream": True,
                                "temperature": 0}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        return body


@dataclass(frozen=True)
class StreamResult:
    """Monotonic arrival time of every token chunk and of the end, and why the stream ended when it did not end
    well."""

    request_id: str
    start_ns: int
    start_wall_ns: int
    token_ns: tuple[int, ...]
    done: bool
    status: int | None
    error: str | None
    end_ns: int


class StreamObserver(Protocol):
    """Told of a request's progress while it is in flight (wall times in nanoseconds since the epoch)."""

    def sending(self, wall_ns: int) -> None:
        """The request is about to be sent."""

    def first_token(self, wall_ns: int, ttft_ns: int) -> None:
        """The first token arrived, `ttft_ns` after the request was sent."""


def resolve_endpoint(url: str, api: Api | None) -> tuple[str, Api]:
    """Full URL and API kind from either a base URL (`http://host:8000`) or a full completions URL."""
    stripped = url.rstrip("/")
    for kind, path in PATHS.items():
        if stripped.endswith(path):
            return stripped, kind  # type: ignore[return-value]
    chosen: Api = api or "chat"
    base = stripped[: -len("/v1")] if stripped.endswith("/v1") else stripped
    return base + PATHS[chosen], chosen


def _read(response: httpx.Response, request: StreamRequest, deadline_ns: int,
          token_ns: list[int], on_first: Callable[[int], None]) -> bool:
    """Consume the event stream; True when it ended with [DONE]. Raises SseError or httpx errors."""
    decoder = SseDecoder()
    for raw in response.iter_bytes():
        arrived = time.monotonic_ns()
        for message in decoder.feed(raw):
            chunk = interpret(message.data, request.api)
            if chunk.done:
                return True
            if chunk.has_token:
                token_ns.append(arrived)
                if len(token_ns) == 1:
                    on_first(arrived)
        if arrived > deadline_ns:
            raise httpx.ReadTimeout("overall deadline passed")
    return False


def stream_completion(client: httpx.Client, request: StreamRequest,
                      observer: StreamObserver | None = None) -> StreamResult:
    """Send the request and time every token chunk; failures end up in `error`, never raised. `observer` hears
    of the sending and of the first token as they happen (it runs on this thread: keep it quick)."""
    token_ns: list[int] = []
    status: int | None = None
    done = False
    error: str | None = None
    headers = {"Accept": "text/event-stream", "X-Request-Id": request.request_id, **request.headers}
    start_wall_ns = time.time_ns()
    if observer is not None:
        observer.sending(start_wall_ns)
    start_ns = time.monotonic_ns()  # after the observer: its work is not the endpoint's time to first token
    deadline_ns = start_ns + int(request.timeout_s * 1e9)

    def on_first(arrived_ns: int) -> None:
        if observer is not None:
            observer.first_token(start_wall_ns + arrived_ns - start_ns, arrived_ns - start_ns)

    try:
        with client.stream("POST", request.url, json=request.body(), headers=headers,
                           timeout=httpx.Timeout(request.timeout_s)) as response:
            status = response.status_code
            if status >= 400:
                error = f"http {status}"
            else:
                done = _read(response, request, deadline_ns, token_ns, on_first)
                if not done:
                    error = "stream ended without [DONE]"
    except httpx.TimeoutException:
        error = f"timeout after {request.timeout_s:g}s"
    except SseError as exc:
        error = str(exc)
    except httpx.ConnectError as exc:
        error = f"connect failed: {exc}"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return StreamResult(request_id=request.request_id, start_ns=start_ns, start_wall_ns=start_wall_ns,
                        token_ns=tuple(token_ns), done=done, status=status, error=error,
                        end_ns=time.monotonic_ns())
