"""Which violations a bad request is charged to: those open for its place at its time whose rule's SLO is the
request's SLO (burn alerts excluded: they are the symptom, not a cause).

Open at t: first seen at or before t and not resolved before t. Its place: the same host, and the same GPU
or no GPU (a host-wide violation) when the request names a GPU; without a GPU, the same host, or the same
endpoint or model in the violation's group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuslo.engine.events import Event


@dataclass(frozen=True)
class OpenViolation:
    """The columns of a violation that attribution reads."""

    id: int
    rule_id: str
    slo: str
    host: str | None
    gpu: int | None
    group: Mapping[str, Any]
    first_seen: datetime
    resolved_at: datetime | None


def covers(violation: OpenViolation, slo_id: str, event: Event) -> bool:
    """True when a bad request of `slo_id` is charged to the violation."""
    if violation.slo != slo_id or violation.first_seen > event.time:
        return False
    if violation.resolved_at is not None and violation.resolved_at < event.time:
        return False
    if event.gpu is not None:
        return violation.host == event.host and violation.gpu in (None, event.gpu)
    if violation.host == event.host:
        return True
    return any(event.get(name) is not None and violation.group.get(name) == event.get(name)
               for name in ("endpoint", "model"))
