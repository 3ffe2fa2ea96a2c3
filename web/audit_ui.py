"""The audit log page (/audit) and the query-string parsing its API twin shares."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Blueprint, render_template, request
from werkzeug.datastructures import MultiDict

from gpuslo.engine.store.audit import AuditFilter
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import MAX_PAGE_SIZE, parse_time

audit_ui = Blueprint("audit_ui", __name__)
AUDIT_PARAMS = ("actor", "action", "target", "since", "until", "page", "page_size", "format")
FORMATS = ("csv", "json")


@dataclass(frozen=True)
class AuditQuery:
    filters: AuditFilter
    page: int
    page_size: int
    format: str | None


def _whole(text: str, low: int, high: int) -> int:
    if not text.isdigit() or not low <= int(text) <= high:
        raise ValueError(f"must be a whole number within {low}..{high}")
    return int(text)


def audit_query(args: MultiDict[str, str], default_page_size: int) -> AuditQuery:
    """Filters, paging and export format from a query string; one 400 names every bad parameter."""
    details: list[dict[str, str]] = [{"param": name, "reason": "unknown parameter"}
                                     for name in sorted(set(args) - set(AUDIT_PARAMS))]
    values: dict[str, object] = {}
    for name in AUDIT_PARAMS:
        text = (args.get(name) or "").strip()
        if not text:
            continue
        try:
            if name in ("since", "until"):
                values[name] = parse_time(text)
            elif name == "page":
                values[name] = _whole(text, 1, 1_000_000)
            elif name == "page_size":
                values[name] = _whole(text, 1, MAX_PAGE_SIZE)
            elif name == "format" and text not in FORMATS:
                raise ValueError("must be csv or json")
            elif len(text) > 200:
                raise ValueError("longer than 200 characters")
            else:
                values[name] = text
        except ValueError as exc:
            details.append({"param": name, "reason": str(exc)})
    if details:
        raise RequestError(400, "bad_query", "bad query parameter: " + ", ".join(d["param"] for d in details),
                           details)
    filters = AuditFilter(**{k: v for k, v in values.items()  # type: ignore[arg-type]
                             if k in ("actor", "action", "target", "since", "until")})
    return AuditQuery(filters, int(values.get("page", 1)),  # type: ignore[call-overload]
                      int(values.get("page_size", min(default_page_size, MAX_PAGE_SIZE))),  # type: ignore[call-overload]
                      values.get("format"))  # type: ignore[arg-type]


@audit_ui.get("/audit")
def audit_page() -> str:
    query = audit_query(request.args, current_core().settings.page_size)
    page = current_core().accounts.audit_page(query.filters, page=query.page, page_size=query.page_size)
    export_args = {k: v for k, v in request.args.items() if k not in ("page", "page_size", "format") and v.strip()}
    return render_template("audit.html", page=page, args=request.args, export_args=export_args)
