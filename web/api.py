"""The JSON API under /api/v1: ingest events, browse violations, events and rulebooks."""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify, request

from gpuslo.engine.events import event_json_schema
from gpuslo.engine.ingest_types import IngestReport
from gpuslo.engine.store.read_models import RulebookVersionView
from gpuslo.web import ingest_body
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import event_filter, violation_filter
from gpuslo.web.serialize import page_json, rulebook_json, stored_event_json, to_json

api = Blueprint("api", __name__, url_prefix="/api/v1")
_READ_CHUNK = 256 * 1024  # bodies without a Content-Length (chunked) are read in pieces of this size


def read_body(limit: int) -> bytes:
    """The raw body, refused with 413 by its Content-Length or once more than `limit` bytes arrive."""
    too_large = RequestError(413, "body_too_large", f"request body is larger than the limit of {limit} bytes")
    declared = request.content_length
    if declared is not None and declared > limit:
        raise too_large
    # read(n) allocates an n-byte buffer first: n = limit + 1 cost ~2 ms per small POST (8 MiB zeroed).
    chunks, size = [], 0
    while chunk := request.stream.read(min(_READ_CHUNK, limit + 1 - size) if declared is None else declared + 1):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise too_large
    return b"".join(chunks)


@api.post("/events")
def post_events() -> tuple[Response, int]:
    """Ingest one event, an array of events or NDJSON; one verdict per item, nothing half-written."""
    settings = current_core().settings
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise RequestError(415, "unsupported_encoding", f"Content-Encoding {encoding} is not accepted")
    body_format = ingest_body.check_content_type(request.mimetype, request.mimetype_params.get("charset"))
    raw = read_body(settings.max_body_bytes)
    body = ingest_body.parse_body(raw, body_format, settings.max_events_per_request)
    items = ingest_body.decodable(body)
    # Bad NDJSON lines never reach the core; when every line is bad there is nothing to hand over.
    report = current_core().ingest(items) if items else IngestReport(())
    g.ingest_counted = True  # every item is now counted once: accepted, duplicate or rejected
    for problem in ingest_body.refused_early(body):
        current_core().ingest_rejected(problem)
    results = ingest_body.merge_results(body, report)
    answer = Response(ingest_body.response_json(results), mimetype="application/json")
    return answer, ingest_body.response_status(results, body.single)


@api.after_request
def count_refused_ingest(response: Response) -> Response:
    """Count an ingest request refused whole (its events never counted one by one), by status: bad JSON,
    401/403, 413, 415, 429, a database that does not answer (503)."""
    if (request.endpoint == "api.post_events" and response.status_code >= 400
            and not g.get("ingest_counted", False)):
        current_core().ingest_refused(response.status_code)
    return response


@api.get("/schema/event")
def event_schema() -> Response:
    response = jsonify(event_json_schema())
    response.mimetype = "application/schema+json"
    return response


@api.get("/violations")
def list_violations() -> Response:
    filters, paging = violation_filter(request.args, current_core().settings.page_size)
    page = current_core().queries.violations(filters, page=paging.page, page_size=paging.page_size)
    return jsonify(page_json(page))


@api.get("/violations/<int:violation_id>")
def get_violation(violation_id: int) -> Response:
    detail = current_core().queries.violation(violation_id)
    if detail is None:
        raise RequestError(404, "not_found", f"no violation with id {violation_id}")
    return jsonify(to_json(detail))


@api.get("/events")
def list_events() -> Response:
    filters, paging = event_filter(request.args, current_core().settings.page_size)
    page = current_core().queries.events(filters, page=paging.page, page_size=paging.page_size)
    out = page_json(page)
    out["items"] = [stored_event_json(item) for item in page.items]
    return jsonify(out)


def _version_json(version: RulebookVersionView) -> dict[str, object]:
    """A stored rulebook version without its source text (which can be large)."""
    out: dict[str, object] = to_json(version)
    out.pop("source", None)
    return out


@api.get("/rulebooks")
def list_rulebooks() -> Response:
    rulebooks = current_core().rulebooks
    status = rulebooks.status()
    return jsonify({
        "rulebooks": [rulebook_json(rb) for rb in status.rulebooks],
        "problems": [str(p) for p in status.problems],
        "loaded_at": to_json(status.loaded_at),
        "versions": [_version_json(v) for v in rulebooks.versions()],
    })

