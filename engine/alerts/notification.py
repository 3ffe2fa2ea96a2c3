"""What crosses from the engine to a receiver: a frozen Notification, the HTTP request a receiver renders from
it, and the Receiver protocol every receiver module implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

ACTIONS: tuple[str, ...] = ("trigger", "acknowledge", "resolve")
SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")


def dedup_key_for(violation_id: int) -> str:
    """The stable key of a violation at every receiver: one violation is one incident."""
    return f"gpuslo-{violation_id}"


def violation_url(public_url: str, violation_id: int) -> str:
    return f"{public_url.rstrip('/')}/violations/{violation_id}"


@dataclass(frozen=True)
class Notification:
    """One message about one violation; `payload` of the outbox row is `to_dict()`, without any secret."""

    dedup_key: str
    action: str
    severity: str
    summary: str
    url: str
    rule: str
    rule_title: str
    slo: str
    violation_id: int
    host: str | None = None
    gpu: int | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    group: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    first_seen: str | None = None
    last_seen: str | None = None
    occurrences: int = 1
    runbook: str | None = None
    test: bool = False

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"notification action {self.action!r} is not one of {', '.join(ACTIONS)}")
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "group", MappingProxyType(dict(self.group)))

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in Notification.__dataclass_fields__}
        out["labels"], out["group"] = dict(self.labels), dict(self.group)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notification:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def match_fields(self) -> dict[str, Any]:
        """The fields routes and inhibition rules match on: severity, slo, rule, host, gpu and labels."""
        return {"severity": self.severity, "slo": self.slo, "rule": self.rule, "host": self.host,
                "gpu": self.gpu, "labels": dict(self.labels)}


@dataclass(frozen=True)
class HttpRequest:
    """A rendered request; `secrets` are the values to scrub from anything logged or stored about it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    secrets: tuple[str, ...] = ()


class Receiver(Protocol):
    """A destination that turns a Notification into one HTTP request; sending is the transport's job."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str:
        """The receiver's `type:` in alerts.yaml."""
        ...

    @property
    def actions(self) -> frozenset[str]:
        """The notification actions it is sent (Alertmanager has no acknowledge)."""
        ...

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        """The request for this notification; `message_id` is stable across retries (the outbox row)."""
        ...


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, ending with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
