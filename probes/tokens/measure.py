"""Measurement: token arrival times → TTFT, inter-token quantiles and stalls → events; a request's progress →
token_request events."""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import Event

SOURCE = "tokens"
DEFAULT_STALL_MS = 200.0
_ERROR_MAX = 1024
_NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class Stall:
    """One inter-token gap at or above the threshold; `token_index` is the 0-based token that ended it."""

    token_index: int
    gap_ms: float
    at_ns: int


@dataclass(frozen=True)
class StreamSummary:
    """What one stream measured; latency fields are None when there were too few tokens to define them."""

    tokens: int
    ttft_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    itl_max_ms: float | None
    itl_max_at_ms: float | None  # when the worst gap ended, in ms after the request started
    gaps_ms: tuple[float, ...]
    stalls: tuple[Stall, ...]


@dataclass(frozen=True)
class EventContext:
    """Envelope fields shared by every event a probe emits."""

    host: str
    endpoint: str
    model: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source: str = SOURCE
    # The GPU serving the endpoint: correlations join token events with GPU-side events on (host, gpu).
    gpu: int | None = None
    # The W3C trace context the probe sent with the request (traceparent), so a stall links to its trace.
    trace_id: str | None = None
    span_id: str | None = None


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of values with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ms(ns: int) -> float:
    return round(ns / _NS_PER_MS, 3)


def summarize(start_ns: int, token_ns: Sequence[int], stall_threshold_ms: float = DEFAULT_STALL_MS
              ) -> StreamSummary:
    """Summarize one stream from its start and the monotonic arrival time of each token."""
    gaps_ns = [later - earlier for earlier, later in zip(token_ns, token_ns[1:], strict=False)]
    gaps_ms = tuple(_ms(gap) for gap in gaps_ns)
    stalls = tuple(
        Stall(token_index=index + 1, gap_ms=gap, at_ns=token_ns[index + 1])
        for index, gap in enumerate(gaps_ms) if gap >= stall_threshold_ms
    )
    return StreamSummary(
        tokens=len(token_ns),
        ttft_ms=_ms(token_ns[0] - start_ns) if token_ns else None,
        itl_p50_ms=round(quantile(gaps_ms, 0.5), 3) if gaps_ms else None,
        itl_p99_ms=round(quantile(gaps_ms, 0.99), 3) if gaps_ms else None,
        itl_max_ms=max(gaps_ms) if gaps_ms else None,
        itl_max_at_ms=_ms(token_ns[gaps_ms.index(max(gaps_ms)) + 1] - start_ns) if gaps_ms else None,
        gaps_ms=gaps_ms,
        stalls=stalls,
    )


def new_trace() -> tuple[str, str]:
    """A fresh W3C trace id and span id (random, never all zeros)."""
    while True:
        trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
        if int(trace_id, 16) and int(span_id, 16):
            return trace_id, span_id


def traceparent(trace_id: str, span_id: str) -> str:
    """The W3C `traceparent` header value of a sampled span."""
    return f"00-{trace_id}-{span_id}-01"


def new_event_id() -> str:
    """A unique event id (the idempotency key)."""
    return f"tokens-{uuid.uuid4().hex}"


def wall_time(wall_ns: int) -> datetime:
    """A UTC datetime from nanoseconds since the epoch, exact to the microsecond."""
    seconds, rest = divmod(wall_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)


def _event(ctx: EventContext, kind: str, when: datetime, attrs: Mapping[str, Any],
           message: str | None = None) -> Event:
    clean = {name: value for name, value in attrs.items() if value is not None}
    return Event(id=new_event_id(), kind=kind, time=when, host=ctx.host, gpu=ctx.gpu, source=ctx.source,
                 labels=MappingProxyType(dict(ctx.labels)), attrs=MappingProxyType(clean), message=message,
                 trace_id=ctx.trace_id, span_id=ctx.span_id)


def request_events(ctx: EventContext, summary: StreamSummary, *, request_id: str, start_ns: int,
                   start_wall_ns: int, error: str | None = None) -> list[Event]:
    """One `token_latency` event for the request (timed at its start) and one `token_stall` per stall
    (timed at the token that ended it)."""
    attrs = {"endpoint": ctx.endpoint, "model": ctx.model, "ttft_ms": summary.ttft_ms,
             "itl_p50_ms": summary.itl_p50_ms, "itl_p99_ms": summary.itl_p99_ms,
             "itl_max_ms": summary.itl_max_ms, "itl_max_at_ms": summary.itl_max_at_ms, "tokens": summary.tokens,
             "stalls": len(summary.stalls),
             "requests": 1, "error": error[:_ERROR_MAX] if error else None}
    events = [_event(ctx, "token_latency", wall_time(start_wall_ns), attrs)]
    for stall in summary.stalls:
        when = wall_time(start_wall_ns + (stall.at_ns - start_ns))
        events.append(_event(ctx, "token_stall", when, {
            "gap_ms": stall.gap_ms, "token_index": stall.token_index, "request_id": request_id,
            "endpoint": ctx.endpoint, "model": ctx.model}))
    return events


class RequestTracker:
    """One request's `token_request` events, each handed to `sink` as it happens: `start` when the request is
    sent, `first_token` when its first token arrives, `done` or `error` when it ends. Rules see a request that
    hangs while it still hangs (rules/latency.yaml: first-token-missing)."""

    def __init__(self, ctx: EventContext, request_id: str, sink: Callable[[Event], None]) -> None:
        self._ctx, self._request_id, self._sink = ctx, request_id, sink

    def sending(self, wall_ns: int) -> None:
        self._emit("start", wall_ns)

    def first_token(self, wall_ns: int, ttft_ns: int) -> None:
        self._emit("first_token", wall_ns, ttft_ms=_ms(ttft_ns))

    def finished(self, wall_ns: int, summary: StreamSummary, error: str | None) -> None:
        """The request ended at `wall_ns`, with an error or not."""
        self._emit("error" if error else "done", wall_ns, ttft_ms=summary.ttft_ms, tokens=summary.tokens,
                   error=error[:_ERROR_MAX] if error else None)

    def _emit(self, phase: str, wall_ns: int, **attrs: Any) -> None:
        ctx = self._ctx
        self._sink(_event(ctx, "token_request", wall_time(wall_ns), {
            "request_id": self._request_id, "phase": phase, "endpoint": ctx.endpoint, "model": ctx.model, **attrs}))


@dataclass(frozen=True)
class WindowStats:
    """Quantiles over a scrape window, as a passive probe derives them from histogram deltas."""

    window_s: float
    requests: int | None = None
    tokens: int | None = None
    ttft_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None


def window_event(ctx: EventContext, stats: WindowStats, when: datetime) -> Event:
    """One `token_latency` event summarizing a window of many requests."""
    attrs = {"endpoint": ctx.endpoint, "model": ctx.model, "window_s": round(stats.window_s, 3),
             "requests": stats.requests, "tokens": stats.tokens, "ttft_ms": stats.ttft_ms,
             "itl_p50_ms": stats.itl_p50_ms, "itl_p99_ms": stats.itl_p99_ms}
    return _event(ctx, "token_latency", when, attrs)
