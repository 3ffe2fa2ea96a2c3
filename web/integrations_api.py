"""Inputs from the tools fleets already run: Alertmanager's webhook (version 4) as gpuslo events."""

from __future__ import annotations

import orjson
from flask import Blueprint, Response, request

from gpuslo.engine.external_alerts import convert
from gpuslo.engine.ingest_types import IngestReport
from gpuslo.web import ingest_body
from gpuslo.web.api import read_body
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError

integrations_api = Blueprint("integrations_api", __name__, url_prefix="/api/v1/integrations")


@integrations_api.post("/alertmanager")
def alertmanager_webhook() -> tuple[Response, int]:
    """Each alert becomes an `external_alert` event (and a native one where a mapping knows it); the answer is
    the ingest report of those events. Alertmanager retries on 5xx only, so a malformed alert is a 422 item."""
    if request.mimetype != "application/json":
        raise RequestError(415, "unsupported_media_type", "Alertmanager webhooks are application/json")
    raw = read_body(current_core().settings.max_body_bytes)
    body = ingest_body.parse_json_body(raw)
    converted = convert(body.items[0] if body.single else list(body.items))
    if not converted.events and converted.problems:
        raise RequestError(422, "invalid_webhook", "; ".join(str(p) for p in converted.problems),
                           [{"field": p.path, "reason": p.reason} for p in converted.problems])
    report = current_core().ingest(list(converted.events)) if converted.events else IngestReport(())
    results = report.results
    answer = ingest_body.response_body(results)
    answer["alert_problems"] = [{"field": p.path, "reason": p.reason} for p in converted.problems]
    status = ingest_body.response_status(results, False) if results else 200
    return Response(orjson.dumps(answer), mimetype="application/json"), status
