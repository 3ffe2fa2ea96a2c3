"""In-process probe: wrap a server's own token iterator and report the same events as the active probe."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

from gpuslo.engine.events import Event
from gpuslo.probes.tokens.measure import DEFAULT_STALL_MS, EventContext, RequestTracker, request_events, summarize

T = TypeVar("T")


def measure_stream(iterator: Iterable[T], *, sink: Callable[[Event], None], endpoint: str, model: str,
                   host: str | None = None, stall_threshold_ms: float = DEFAULT_STALL_MS,
                   request_id: str | None = None, is_token: Callable[[T], bool] | None = None,
                   labels: Mapping[str, str] | None = None, gpu: int | None = None) -> Iterator[T]:
    """Yield every item of `iterator` unchanged and hand the request's events to `sink`: `token_request` start
    now, first_token when the first token comes (keep `sink` quick: it runs in the token loop), and when the
    stream ends, raises or is closed, `token_latency`, the `token_stall`s and `token_request` done or error.

    The clock starts now (the call), so TTFT includes the wait for the first item. Items for which
    `is_token` says False (e.g. empty keep-alive chunks) pass through without counting as tokens.
    An exception from the iterator is reported as `error` and then re-raised. `gpu` (the GPU generating the
    tokens) goes into every event, so rules can join them with that GPU's events.
    """
    ctx = EventContext(host=host or socket.gethostname(), endpoint=endpoint, model=model,
                       labels=MappingProxyType(dict(labels or {})), gpu=gpu)
    request_id = request_id or f"inproc-{uuid.uuid4().hex}"
    tracker = RequestTracker(ctx, request_id, sink)
    start_wall_ns = time.time_ns()
    tracker.sending(start_wall_ns)
    return _measured(iter(iterator), sink, ctx, stall_threshold_ms, request_id, is_token, tracker,
                     start_wall_ns, time.monotonic_ns())


def _measured(source: Iterator[T], sink: Callable[[Event], None], ctx: EventContext, stall_ms: float,
              request_id: str, is_token: Callable[[T], bool] | None, tracker: RequestTracker,
              start_wall_ns: int, start_ns: int) -> Iterator[T]:
    token_ns: list[int] = []
    error: str | None = None
    try:
        for item in source:
            if is_token is None or is_token(item):
                token_ns.append(time.monotonic_ns())
                if len(token_ns) == 1:
                    tracker.first_token(start_wall_ns + token_ns[0] - start_ns, token_ns[0] - start_ns)
            yield item
    except GeneratorExit:
        error = f"stream closed by consumer after {len(token_ns)} tokens"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        end_ns = time.monotonic_ns()
        summary = summarize(start_ns, token_ns, stall_ms)
        for event in request_events(ctx, summary, request_id=request_id, start_ns=start_ns,
                                    start_wall_ns=start_wall_ns, error=error):
            sink(event)
        tracker.finished(start_wall_ns + end_ns - start_ns, summary, error)
