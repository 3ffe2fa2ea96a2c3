"""Times every request and counts it by route, method and status code (engine.metrics_http)."""

from __future__ import annotations

import time

from flask import Flask, Response, g, request

from gpuslo.web.context import current_core


def init_app(app: Flask) -> None:
    @app.before_request
    def _start_clock() -> None:
        g.request_started = time.perf_counter()

    @app.after_request
    def _count(response: Response) -> Response:
        started = g.get("request_started")
        if started is not None:
            current_core().metrics.http.observe(request.endpoint, request.method, response.status_code,
                                                time.perf_counter() - started)
        return response
