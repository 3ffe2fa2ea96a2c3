"""In-process probe: wrap a server's own token iterator and report the same events as the active probe."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

from gpuslo.engine.events import Event
from gpuslo.probes.tokens.measure import DEFAULT_STALL_MS, EventContext, request_events, summarize

T = TypeVar("T")


def measure_stream(iterator: Iterable[T], *, sink: Callable[[Event], None], endpoint: str, model: str,
                   host: str | None = None, stall_threshold_ms: float = DEFAULT_STALL_MS,
                   request_id: str | None = None, is_token: Callable[[T], bool] | None = None,
                   labels: Mapping[str, str] | None = None, gpu: int | None = None) -> Iterator[T]:
    """Yield every item of `iterator` unchanged; when it ends, raises or is closed, hand its events to `sink`.

    The clock starts now (the call), so TTFT includes the wait for the first item. Items for which
    `is_token` says False (e.g. empty keep-alive chunks) pass through without counting as tokens.
    An exception from the iterator is reported as `error` and then re-raised. `gpu` (the GPU generating the
    tokens) goes into every event, so rules can join them with that GPU's events.
    """
    ctx = EventContext(host=host or socket.gethostname(), endpoint=endpoint, model=model,
                       labels=MappingProxyType(dict(labels or {})), gpu=gpu)
    return _measured(iter(iterator), sink, ctx, stall_threshold_ms, request_id or f"inproc-{uuid.uuid4().hex}",
                     is_token, time.time_ns(), time.monotonic_ns())


def _measured(source: Iterator[T], sink: Callable[[Event], None], ctx: EventContext, stall_ms: float,
              request_id: str, is_token: Callable[[T], bool] | None, start_wall_ns: int,
              start_ns: int) -> Iterator[T]:
    token_ns: list[int] = []
    error: str | None = None
    try:
        for item in source:
            if is_token is None or is_token(item):
                token_ns.append(time.monotonic_ns())
            yield item
    except GeneratorExit:
        error = f"stream closed by consumer after {len(token_ns)} tokens"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        summary = summarize(start_ns, token_ns, stall_ms)
        for event in request_events(ctx, summary, request_id=request_id, start_ns=start_ns,
                                    start_wall_ns=start_wall_ns, error=error):
            sink(event)
