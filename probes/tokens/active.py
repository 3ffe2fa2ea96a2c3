"""Active probe: send a streaming completion on a schedule and report its per-token latency."""

from __future__ import annotations

import dataclasses
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import httpx

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.events import Event
from gpuslo.probes.tokens.measure import (
    DEFAULT_STALL_MS,
    EventContext,
    RequestTracker,
    new_trace,
    request_events,
    summarize,
    traceparent,
)
from gpuslo.probes.tokens.sse import Api, StreamRequest, resolve_endpoint, stream_completion

if TYPE_CHECKING:
    from apscheduler.job import Job
    from apscheduler.schedulers.base import BaseScheduler

Sink = Callable[[Event], None]


@dataclass(frozen=True)
class ActiveProbeConfig:
    """What to send and how to judge it. `url` is a base URL or a full `/v1/(chat/)completions` URL."""

    url: str
    model: str
    prompt: str = "Count from one to fifty in words, separated by spaces."
    max_tokens: int = 64
    stall_threshold_ms: float = DEFAULT_STALL_MS
    timeout_s: float = 30.0
    api: Api | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpu: int | None = None  # index of the GPU behind the endpoint, put in every event (joins GPU-side events)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"token probe url: expected http:// or https://, got {self.url!r}")
        if self.max_tokens < 1 or self.timeout_s <= 0 or self.stall_threshold_ms <= 0:
            raise ConfigError("token probe: max_tokens, timeout_s and stall_threshold_ms must be positive")
        if self.gpu is not None and not 0 <= self.gpu <= 1023:
            raise ConfigError(f"token probe gpu: expected an index from 0 to 1023, got {self.gpu}")


class ActiveTokenProbe:
    """Measures one endpoint per `run_once()`; every outcome, failures included, becomes events."""

    def __init__(self, config: ActiveProbeConfig, *, host: str | None = None,
                 client: httpx.Client | None = None) -> None:
        self.config = config
        self.url, self.api = resolve_endpoint(config.url, config.api)
        self.context = EventContext(host=host or socket.gethostname(), endpoint=self.url,
                                    model=config.model, labels=config.labels, gpu=config.gpu)
        # No proxies from the environment: a buffering proxy would hide the very gaps we measure.
        self._client = client or httpx.Client(trust_env=False)
        self._owns_client = client is None

    def run_once(self, sink: Sink | None = None) -> list[Event]:
        """Send one streaming request; return its events in the order they were made: `token_request` start and
        first_token (while it is in flight), then `token_latency`, one `token_stall` per stall, and
        `token_request` done or error. `sink` gets each event the moment it is made (keep it quick: it runs
        between reads of the stream), so a request that hangs is seen while it hangs."""
        events: list[Event] = []

        def emit(event: Event) -> None:
            events.append(event)
            if sink is not None:
                sink(event)

        trace_id, span_id = new_trace()
        context = dataclasses.replace(self.context, trace_id=trace_id, span_id=span_id)
        request = StreamRequest(url=self.url, api=self.api, model=self.config.model,
                                prompt=self.config.prompt, max_tokens=self.config.max_tokens,
                                timeout_s=self.config.timeout_s, request_id=f"gpuslo-{uuid.uuid4().hex}",
                                headers={**self.config.headers, "traceparent": traceparent(trace_id, span_id)})
        tracker = RequestTracker(context, request.request_id, emit)
        result = stream_completion(self._client, request, tracker)
        summary = summarize(result.start_ns, result.token_ns, self.config.stall_threshold_ms)
        for event in request_events(context, summary, request_id=result.request_id, start_ns=result.start_ns,
                                    start_wall_ns=result.start_wall_ns, error=result.error):
            emit(event)
        tracker.finished(result.start_wall_ns + result.end_ns - result.start_ns, summary, result.error)
        return events

    def schedule(self, scheduler: BaseScheduler, interval_s: float, sink: Sink) -> Job:
        """Run every `interval_s` seconds on the scheduler, handing each event to `sink`.

        Runs never overlap: a slow endpoint delays the next probe instead of piling requests on it."""
        def job() -> None:
            self.run_once(sink)

        return scheduler.add_job(job, "interval", seconds=interval_s, id=f"tokens:{self.url}",
                                 name=f"token probe {self.url}", max_instances=1, coalesce=True,
                                 replace_existing=True)

    def close(self) -> None:
        """Close the HTTP client if this probe made it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ActiveTokenProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
