"""HTTP request metrics of the web app: requests by route, method and status code, and their durations."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
UNMATCHED = "unmatched"  # requests no route matched (404s to arbitrary paths) share one label value


class HttpMetrics:
    """Labelled by the Flask endpoint name, never the raw path, so the label set is the route table."""

    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter(
            "gpuslo_http_requests", "HTTP requests answered, by route, method and status code.",
            ["route", "method", "code"], registry=registry)
        self.duration = Histogram(
            "gpuslo_http_request_duration_seconds", "Time to answer an HTTP request, by route and method.",
            ["route", "method"], buckets=HTTP_BUCKETS, registry=registry)

    def observe(self, route: str | None, method: str, code: int, seconds: float) -> None:
        name = route or UNMATCHED
        self.requests.labels(name, method, str(code)).inc()
        self.duration.labels(name, method).observe(seconds)
