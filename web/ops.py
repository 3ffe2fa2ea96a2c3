"""Operations endpoints: /healthz for load balancers and /metrics for Prometheus."""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuslo.web.context import current_core

log = logging.getLogger(__name__)
ops = Blueprint("ops", __name__)


def _gauge_value(gauge: Any) -> float | None:
    for family in gauge.collect():
        for sample in family.samples:
            return float(sample.value)
    return None


def _database_ok() -> bool:
    try:
        current_core().ping_database()
    except Exception:  # any failure means "unreachable" to a health check
        log.warning("health check: database unreachable", exc_info=True)
        return False
    return True


@ops.get("/healthz")
def healthz() -> tuple[Response, int]:
    """200 when the database answers and the engine is evaluating; 503 with the reason when not; always JSON."""
    core = current_core()
    status = core.rulebooks.status()
    database_ok = _database_ok()
    engine = core.engine_health()
    depth = _gauge_value(core.metrics.engine_queue_depth)
    ok = database_ok and engine.ok
    body = {
        "status": "ok" if ok else "unavailable",
        "database": "ok" if database_ok else "unreachable",
        "engine": {"status": "ok" if engine.ok else "not evaluating", "reason": engine.reason,
                   "queue_depth": int(depth) if depth is not None else None,
                   "queue_size": core.settings.engine_queue_size},
        "rulebooks": len(status.rulebooks),
        "rulebook_errors": len(status.problems),
    }
    return jsonify(body), 200 if ok else 503


@ops.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(current_core().metrics.exposed()), content_type=CONTENT_TYPE_LATEST)
