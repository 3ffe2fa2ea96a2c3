"""Send one rendered request with httpx and classify the outcome: delivered, retry (with when) or dead."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

import httpx

from gpuslo.engine.alerts.egress import ForbiddenTarget
from gpuslo.engine.alerts.notification import HttpRequest
from gpuslo.engine.alerts.secrets import redact

BODY_SNIPPET = 300  # bytes of an error response kept for the attempt log
RETRYABLE_4XX = (408, 429)


@dataclass(frozen=True)
class Outcome:
    """What one send did; `retry_after` is the receiver's own wish (429/503 Retry-After), in seconds."""

    status: str  # delivered | retry | dead | gone (410: the endpoint is disabled until re-enabled)
    latency_ms: int
    response_code: int | None = None
    error: str | None = None
    retry_after: float | None = None
    body: str | None = None
    reason: str = "ok"  # one of REASONS: the label of the delivery-outcome metric


# Why a send ended as it did: a fixed set, so the metric's label values stay bounded.
REASONS = ("ok", "http_3xx", "http_4xx", "http_410", "http_429", "http_5xx", "timeout", "connection",
           "forbidden_target", "max_attempts", "max_age", "unconfigured", "rate_limited", "disabled")


def reason_of(code: int) -> str:
    """The metric reason of an HTTP status."""
    if 200 <= code < 300:
        return "ok"
    if code in (410, 429):
        return f"http_{code}"
    return "http_5xx" if code >= 500 else "http_4xx" if code >= 400 else "http_3xx"


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - now).total_seconds()) if when.tzinfo else None


def classify(code: int) -> str:
    if 200 <= code < 300:
        return "delivered"
    if code == 410:
        return "gone"  # the receiver says the endpoint is gone for good: stop sending to it at all
    if code >= 500 or code in RETRYABLE_4XX:
        return "retry"
    return "dead"  # other 4xx will not get better by retrying; 3xx: redirects are not followed on purpose


def send(client: httpx.Client, request: HttpRequest, now: datetime, *, keep_body: bool = False) -> Outcome:
    """One POST; the response body is read only on failure (or when `keep_body`), bounded in size and time.

    Give it a client from egress.GuardedClients: a target it refuses (a non-public address, plain http) is
    `dead` at once, since retrying cannot change the verdict until someone edits the config or the DNS."""
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        with client.stream(request.method, request.url, headers=dict(request.headers),
                           content=request.body) as response:
            status = classify(response.status_code)
            snippet = _snippet(response, client.timeout.read) if status != "delivered" or keep_body else ""
    except ForbiddenTarget as exc:
        return Outcome("dead", elapsed(), error=redact(str(exc), request.secrets), reason="forbidden_target")
    except httpx.TimeoutException as exc:
        return Outcome("retry", elapsed(), error=f"timeout: {type(exc).__name__}", reason="timeout")
    except httpx.HTTPError as exc:
        return Outcome("retry", elapsed(), error=redact(f"{type(exc).__name__}: {exc}", request.secrets),
                       reason="connection")
    code = response.status_code
    snippet = redact(snippet, request.secrets)
    error = None if status == "delivered" else f"HTTP {code}: {snippet}".rstrip(": ")
    wait = retry_after_seconds(response.headers.get("Retry-After"), now) if code in (429, 503) else None
    return Outcome(status, elapsed(), code, error, wait, snippet if keep_body else None, reason_of(code))


def _snippet(response: httpx.Response, budget: float | None) -> str:
    """Up to BODY_SNIPPET bytes of the body; stops at the read deadline so a slow body cannot hold a worker."""
    deadline = time.monotonic() + (budget or 5.0)
    data = b""
    try:
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) >= BODY_SNIPPET or time.monotonic() > deadline:
                break
    except httpx.HTTPError:
        pass  # the status line is what counts; a broken body only shortens the snippet
    return data[:BODY_SNIPPET].decode("utf-8", "replace").strip()
