"""Frozen engine/store objects → plain JSON values, one rule for all: times in RFC 3339 UTC."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from pathlib import PurePath
from typing import Any

from gpuslo.engine.events import Event, format_time


def to_json(value: Any) -> Any:
    """A JSON-ready copy of a view, event, mapping or sequence (datetimes become RFC 3339 strings)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, Event):
        return value.to_dict()
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    return str(value)


def page_json(page: Any) -> dict[str, Any]:
    """`{items, page, page_size, total, has_next}` of a store Page."""
    return {"items": [to_json(item) for item in page.items], "page": page.page, "page_size": page.page_size,
            "total": page.total, "has_next": page.has_next}


def stored_event_json(stored: Any) -> dict[str, Any]:
    """An event as stored: its canonical form plus when it was received and processed."""
    out = {**stored.event.to_dict(), "received_at": to_json(stored.received_at),
           "processed_at": to_json(stored.processed_at)}
    if getattr(stored, "time_sent", None) is not None:
        out["time_sent"] = stored.time_sent  # the time as the client wrote it (an offset, nanoseconds)
    if getattr(stored, "error", None) is not None:
        out["error"] = stored.error  # quarantined: why the engine could not evaluate or store it
    return out


def rulebook_json(rulebook: Any) -> dict[str, Any]:
    """A loaded rulebook: header, SLOs and a summary of each rule."""
    return {
        "name": rulebook.name, "version": rulebook.version, "description": rulebook.description,
        "hash": rulebook.content_hash,
        "slos": {slo_id: to_json(slo) for slo_id, slo in rulebook.slos.items()},
        "rules": [{"id": r.id, "title": r.title, "slo": r.slo, "severity": r.severity,
                   "location": str(r.location), "overridden": [_override_json(o) for o in r.overrides]}
                  for r in rulebook.rules],
        # the site override in force (rules_overrides_dir), or null; its text is covered by "hash"
        "site_override": None if rulebook.override_file is None else {
            "file": rulebook.override_file, "disabled": list(rulebook.disabled),
            "changes": [_override_json(o) for o in rulebook.overrides]},
    }


def _override_json(override: Any) -> dict[str, Any]:
    return {"kind": override.kind, "name": override.name, "field": override.field, "value": override.value,
            "location": str(override.location)}
