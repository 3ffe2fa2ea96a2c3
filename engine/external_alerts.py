"""Alertmanager's webhook (version 4) as gpuslo events: each alert an `external_alert`, some also a native kind.

Alerts that Prometheus already raises (dcgm-exporter, vLLM metrics, node exporter) join correlations this way.
An event's id is made of the alert's fingerprint, its start and its status, so Alertmanager's repeats of a group
are duplicates, not new events. Mappings turn well-known alerts into native kinds as well (dcgm-exporter's
`DCGM_FI_DEV_XID_ERRORS` into `gpu_xid`), so shipped rules see them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuslo.engine.errors import FieldProblem

HOST_LABELS = ("Hostname", "hostname", "host", "node", "nodename", "instance")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$")
MAX_LABELS, LABEL_VALUE_MAX, TEXT_MAX = 32, 256, 1024
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def parse_rfc3339(value: Any) -> datetime | None:
    """Any RFC 3339 time (nanoseconds, offsets) in UTC, cut to microseconds; None if it is none."""
    found = _RFC3339.match(value) if isinstance(value, str) else None
    if not found:
        return None
    date, clock, fraction, zone = found.groups()
    micros = (fraction or "0")[:6].ljust(6, "0")
    try:
        moment = datetime.fromisoformat(f"{date}T{clock}.{micros}{'+00:00' if zone in 'Zz' else zone}")
    except ValueError:
        return None
    return moment.astimezone(UTC)


def _time_text(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Mapping_:
    """A well-known alert turned into a native event kind too: `matches` its labels, `attrs` builds the attrs."""

    name: str
    kind: str
    matches: Callable[[Mapping[str, str]], bool]
    attrs: Callable[[Mapping[str, str], Mapping[str, str]], dict[str, Any] | None]


def _first_int(*values: str | None) -> int | None:
    for value in values:
        if value is not None:
            found = re.search(r"\d+", value)
            if found:
                return int(found.group())
    return None


def _dcgm_xid(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any] | None:
    xid = _first_int(labels.get("xid"), labels.get("err_code"), annotations.get("xid"), annotations.get("value"))
    if xid is None or not 0 < xid < 2**16:
        return None
    return {"xid": xid, "detail": f"from Alertmanager alert {labels.get('alertname', '')}"[:TEXT_MAX]}


def _names_metric(metric: str) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: metric in labels.get("alertname", "") or labels.get("__name__") == metric


MAPPINGS: tuple[Mapping_, ...] = (
    Mapping_("dcgm-xid", "gpu_xid", _names_metric("DCGM_FI_DEV_XID_ERRORS"), _dcgm_xid),
)


@dataclass(frozen=True)
class Converted:
    """The events made from one webhook, and the problems of the alerts that could not be read."""

    events: tuple[dict[str, Any], ...]
    problems: tuple[FieldProblem, ...]


def _text_map(value: Any, limit: int) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v)[:limit] for k, v in value.items() if isinstance(v, str | int | float)}


def _host(labels: Mapping[str, str]) -> str:
    for name in HOST_LABELS:
        value = labels.get(name)
        if value:
            return value.rsplit(":", 1)[0] if name == "instance" and not value.startswith("[") else value
    return "alertmanager"


def convert(document: Any) -> Converted:
    """The events of an Alertmanager webhook document; an alert that cannot be read is a problem, not a crash."""
    if not isinstance(document, dict) or not isinstance(document.get("alerts"), list):
        return Converted((), (FieldProblem("alerts", "an Alertmanager webhook has a list 'alerts'"),))
    if str(document.get("version", "4")) != "4":
        return Converted((), (FieldProblem("version", f"version {document.get('version')!r} is not 4"),))
    events: list[dict[str, Any]] = []
    problems: list[FieldProblem] = []
    for index, alert in enumerate(document["alerts"]):
        made = _alert_events(alert, f"alerts[{index}]")
        if isinstance(made, FieldProblem):
            problems.append(made)
        else:
            events.extend(made)
    return Converted(tuple(events), tuple(problems))


def _alert_events(alert: Any, where: str) -> list[dict[str, Any]] | FieldProblem:
    if not isinstance(alert, dict):
        return FieldProblem(where, "an alert is an object")
    status = alert.get("status")
    if status not in ("firing", "resolved"):
        return FieldProblem(f"{where}.status", "must be firing or resolved")
    starts = parse_rfc3339(alert.get("startsAt"))
    if starts is None:
        return FieldProblem(f"{where}.startsAt", "must be an RFC 3339 time")
    ends = parse_rfc3339(alert.get("endsAt"))
    fingerprint = alert.get("fingerprint")
    if not isinstance(fingerprint, str) or not re.fullmatch(r"[0-9a-fA-F]{1,32}", fingerprint):
        return FieldProblem(f"{where}.fingerprint", "must be Alertmanager's hexadecimal fingerprint")
    labels = _text_map(alert.get("labels"), LABEL_VALUE_MAX)
    annotations = _text_map(alert.get("annotations"), TEXT_MAX)
    at = ends if status == "resolved" and ends is not None and ends.year > 1 else starts
    base = f"am:{fingerprint}:{starts.strftime('%Y%m%dT%H%M%S.%f')}"
    gpu = labels.get("gpu")
    envelope: dict[str, Any] = {
        "time": _time_text(at), "host": _host(labels)[:253], "source": "alertmanager",
        "labels": {k: v for k, v in list(labels.items())[:MAX_LABELS] if LABEL_NAME.match(k)},
    }
    if gpu is not None and gpu.isdigit() and int(gpu) < 1024:
        envelope["gpu"] = int(gpu)
    if labels.get("UUID"):
        envelope["gpu_uuid"] = labels["UUID"][:64]
    attrs: dict[str, Any] = {
        "alertname": labels.get("alertname", "")[:TEXT_MAX], "status": status, "fingerprint": fingerprint,
        "starts_at": str(alert.get("startsAt"))[:64],
    }
    for attr, value in (("severity", labels.get("severity")),
                        ("summary", annotations.get("summary") or annotations.get("description")),
                        ("generator_url", alert.get("generatorURL")),
                        ("ends_at", alert.get("endsAt") if status == "resolved" else None)):
        if isinstance(value, str) and value:
            attrs[attr] = value[:TEXT_MAX]
    events = [{**envelope, "id": f"{base}:{status}", "kind": "external_alert", "attrs": attrs}]
    if status == "firing":
        for mapping in MAPPINGS:
            native = mapping.attrs(labels, annotations) if mapping.matches(labels) else None
            if native is not None:
                events.append({**envelope, "id": f"{base}:{mapping.name}", "kind": mapping.kind, "attrs": native})
    return events
