"""Query string → ViolationFilter / EventFilter and paging, with a precise 400 for every bad value."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from werkzeug.datastructures import MultiDict

from gpuslo.engine.events import KINDS
from gpuslo.engine.rulebook.model import SEVERITIES
from gpuslo.engine.store.notifications import NotificationFilter
from gpuslo.engine.store.outbox_models import NOTIFICATION_STATUSES
from gpuslo.engine.store.read_models import EventFilter, ViolationFilter
from gpuslo.engine.violations import STATUSES
from gpuslo.web.errors import RequestError

MAX_PAGE_SIZE = 500
_TEXT_MAX = 253


@dataclass(frozen=True)
class Paging:
    page: int
    page_size: int


class _Problems:
    """Collects every bad parameter so one 400 names them all."""

    def __init__(self, args: MultiDict[str, str], allowed: tuple[str, ...]):
        self.args = args
        self.details: list[dict[str, Any]] = []
        for name in sorted(set(args) - set(allowed)):
            self.add(name, "unknown parameter (allowed: " + ", ".join(allowed) + ")")

    def add(self, param: str, reason: str) -> None:
        self.details.append({"param": param, "reason": reason})

    def value(self, name: str, convert: Callable[[str], Any] = str) -> Any:
        values = [v for v in self.args.getlist(name) if v.strip()]
        if not values:
            return None
        if len(values) > 1:
            self.add(name, "give this parameter once")
            return None
        try:
            return convert(values[0].strip())
        except ValueError as exc:
            self.add(name, str(exc))
            return None

    def raise_if_any(self) -> None:
        if self.details:
            names = ", ".join(d["param"] for d in self.details)
            raise RequestError(400, "bad_query", f"bad query parameter: {names}", self.details)


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in options:
            raise ValueError(f"{text!r} is not one of: " + ", ".join(options))
        return text
    return convert


def _text(text: str) -> str:
    if len(text) > _TEXT_MAX:
        raise ValueError(f"longer than {_TEXT_MAX} characters")
    return text


def _free_text(text: str) -> str:
    """Any text; a search longer than a summary could match nothing, so it is cut rather than refused."""
    return text[:_TEXT_MAX]


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        if not text.isdigit():
            raise ValueError(f"{text[:40]!r} is not a whole number")
        number = int(text)
        if not low <= number <= high:
            raise ValueError(f"{number} is outside {low}..{high}")
        return number
    return convert


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with an offset (`2025-01-01T00:00:00Z`), returned in UTC."""
    normal = re.sub(r"[zZ]$", "+00:00", text)
    # An unencoded "+02:00" in a URL arrives as " 02:00".
    normal = re.sub(r" (\d\d:\d\d)$", r"+\1", normal)
    try:
        moment = datetime.fromisoformat(normal)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not an RFC 3339 time such as 2025-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text[:40]!r} has no time zone; add Z or an offset such as +02:00")
    return moment.astimezone(UTC)


def _time_range(problems: _Problems) -> tuple[datetime | None, datetime | None]:
    since = problems.value("since", parse_time)
    until = problems.value("until", parse_time)
    if since is not None and until is not None and since > until:
        problems.add("until", "is before since")
    return since, until


def _paging(problems: _Problems, default_page_size: int) -> Paging:
    page = problems.value("page", _int_between(1, 1_000_000)) or 1
    default_size = min(default_page_size, MAX_PAGE_SIZE)
    size = problems.value("page_size", _int_between(1, MAX_PAGE_SIZE)) or default_size
    return Paging(page, size)


VIOLATION_PARAMS = ("status", "severity", "slo", "rule", "host", "gpu", "q", "since", "until", "page",
                    "page_size")
EVENT_PARAMS = ("kind", "host", "gpu", "job", "since", "until", "page", "page_size")
CHART_PARAMS = ("host", "gpu", "endpoint", "model", "since", "until")
NOTIFICATION_PARAMS = ("status", "receiver", "page", "page_size")
ALL = "all"


def violation_filter(args: MultiDict[str, str], default_page_size: int) -> tuple[ViolationFilter, Paging]:
    """Filters of GET /violations (API and UI); `rule` (a rule id) and `host` are exact or, ending in `*`, a
    prefix; `q` is free text matched as a substring of host, rule, title and summary."""
    problems = _Problems(args, VIOLATION_PARAMS)
    status = problems.value("status", _choice(STATUSES))
    severity = problems.value("severity", _choice(SEVERITIES))
    slo = problems.value("slo", _text)
    rule_id = problems.value("rule", _text)
    host = problems.value("host", _text)
    gpu = problems.value("gpu", _int_between(0, 1023))
    text = problems.value("q", _free_text)
    since, until = _time_range(problems)
    paging = _paging(problems, default_page_size)
    problems.raise_if_any()
    found = ViolationFilter(status=status, severity=severity, slo=slo, rule_id=rule_id, host=host, gpu=gpu,
                            since=since, until=until, text=text)
    return found, paging


def event_filter(args: MultiDict[str, str], default_page_size: int) -> tuple[EventFilter, Paging]:
    """Filters of GET /events (API and UI)."""
    problems = _Problems(args, EVENT_PARAMS)
    kind = problems.value("kind", _choice(KINDS))
    host = problems.value("host", _text)
    gpu = problems.value("gpu", _int_between(0, 1023))
    job = problems.value("job", _text)
    since, until = _time_range(problems)
    paging = _paging(problems, default_page_size)
    problems.raise_if_any()
    return EventFilter(kind=kind, host=host, gpu=gpu, job=job, since=since, until=until), paging


@dataclass(frozen=True)
class ChartFilter:
    """What a chart page shows: one host (and GPU, endpoint, model) over a time range; all optional."""

    host: str | None = None
    gpu: int | None = None
    endpoint: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def chart_filter(args: MultiDict[str, str]) -> ChartFilter:
    """Filters of the chart pages (/charts/tokens, /charts/memory)."""
    problems = _Problems(args, CHART_PARAMS)
    host = problems.value("host", _text)
    gpu = problems.value("gpu", _int_between(0, 1023))
    endpoint = problems.value("endpoint", _free_text)
    model = problems.value("model", _free_text)
    since, until = _time_range(problems)
    problems.raise_if_any()
    return ChartFilter(host, gpu, endpoint, model, since, until)


def notification_filter(args: MultiDict[str, str], default_page_size: int,
                        default_status: str | None = None) -> tuple[NotificationFilter, Paging]:
    """Filters of GET /notifications (API and UI); `status=all` lifts the page's default status."""
    problems = _Problems(args, NOTIFICATION_PARAMS)
    status = problems.value("status", _choice((*NOTIFICATION_STATUSES, ALL))) or default_status
    receiver = problems.value("receiver", _text)
    paging = _paging(problems, default_page_size)
    problems.raise_if_any()
    return NotificationFilter(status=None if status == ALL else status, receiver=receiver), paging
