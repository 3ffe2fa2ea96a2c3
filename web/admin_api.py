"""Administration API under /api/v1 (admin permission): the audit log and its export, tokens, rulebook reload."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify, request, stream_with_context

from gpuslo.engine.errors import ConfigError
from gpuslo.web.access import current_actor
from gpuslo.web.audit_ui import audit_query
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.incident_input import request_values
from gpuslo.web.serialize import page_json, rulebook_json, to_json

admin_api = Blueprint("admin_api", __name__, url_prefix="/api/v1")
_EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


@admin_api.get("/audit")
def list_audit() -> Response:
    """A page of the audit log (newest first), or with ?format=csv|json the whole filtered log, streamed."""
    query = audit_query(request.args, current_core().settings.page_size)
    accounts = current_core().accounts
    if query.format is None:
        page = accounts.audit_page(query.filters, page=query.page, page_size=query.page_size)
        return jsonify(page_json(page) | {"items": [e.to_dict() for e in page.items]})
    stream = accounts.audit_export(query.filters, query.format)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Response(stream_with_context(stream), content_type=_EXPORT_TYPES[query.format], headers={
        "Content-Disposition": f'attachment; filename="gpuslo-audit-{stamp}.{query.format}"'})


@admin_api.get("/tokens")
def list_tokens() -> Response:
    return jsonify({"items": [to_json(t.to_dict()) for t in current_core().accounts.tokens()]})


@admin_api.post("/tokens")
def create_token() -> tuple[Response, int]:
    """`{"name": ..., "scopes": [...]}`; the answer holds the clear token, shown this once only."""
    values = request_values()
    name, scopes = values.get("name"), values.get("scopes")
    if not isinstance(name, str) or not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise RequestError(400, "bad_request", "give a name (text) and scopes (a list of text)")
    try:
        token, clear = current_core().accounts.create_token(name=name, scopes=scopes,
                                                            actor=current_actor() or "anonymous",
                                                            source=request.remote_addr)
    except ConfigError as exc:
        raise RequestError(400, "bad_request", str(exc)) from None
    return jsonify(to_json(token.to_dict()) | {"token": clear}), 201


@admin_api.post("/tokens/<int:token_id>/revoke")
def revoke_token(token_id: int) -> Response:
    token = current_core().accounts.revoke_token(token_id, actor=current_actor() or "anonymous",
                                                 source=request.remote_addr)
    return jsonify(to_json(token.to_dict()))


@admin_api.post("/rulebooks/reload")
def reload_rulebooks() -> Response:
    status = current_core().rulebooks.reload(actor=current_actor() or "anonymous", source=request.remote_addr)
    return jsonify({"rulebooks": [rulebook_json(rb) for rb in status.rulebooks],
                    "problems": [str(p) for p in status.problems], "loaded_at": to_json(status.loaded_at)})
