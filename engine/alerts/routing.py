"""Routing model and decisions: which receivers a notification goes to, what inhibits it, rate limits."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpuslo.engine.alerts.egress import TargetPolicy
from gpuslo.engine.alerts.notification import Receiver
from gpuslo.engine.alerts.secrets import Secret, secret_fragments

MATCH_FIELDS = ("severity", "slo", "rule", "host", "gpu")


@dataclass(frozen=True)
class Matcher:
    """Every given field must hold one of its values; an empty matcher matches everything."""

    fields: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    labels: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))

    def matches(self, subject: Mapping[str, Any]) -> bool:
        for name, allowed in self.fields.items():
            value = subject.get(name)
            if value is None or str(value) not in allowed:
                return False
        labels = subject.get("labels") or {}
        return all(labels.get(name) in allowed for name, allowed in self.labels.items())


@dataclass(frozen=True)
class Route:
    """Notifications matching `matcher` go to `receivers`; the first matching route wins unless `proceed`."""

    name: str
    matcher: Matcher
    receivers: tuple[str, ...]
    group_wait: float = 0.0
    repeat_interval: float = 4 * 3600.0
    send_resolved: bool = True
    proceed: bool = False


@dataclass(frozen=True)
class InhibitRule:
    """An active violation matching `source` mutes those matching `target` that agree on every `equal` field."""

    source: Matcher
    target: Matcher
    equal: tuple[str, ...]


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: `burst` sends at once, refilled at `per_second`."""

    per_second: float
    burst: int


@dataclass(frozen=True)
class AlertsConfig:
    """The loaded alerts.yaml: receivers by name, routes in order, inhibition rules and rate limits."""

    receivers: Mapping[str, Receiver]
    routes: tuple[Route, ...]
    inhibit: tuple[InhibitRule, ...] = ()
    rate_limits: Mapping[str, RateLimit] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<memory>"
    secrets: tuple[Secret, ...] = ()  # every resolved secret: scrubbed from all errors and logs
    targets: Mapping[str, TargetPolicy] = field(default_factory=lambda: MappingProxyType({}))
    warnings: tuple[str, ...] = ()  # located, e.g. a receiver host that did not resolve at load time

    def secret_values(self) -> tuple[str, ...]:
        """Every secret, plus the parts of secret URLs a receiver may echo alone (a Slack token in a path)."""
        return secret_fragments(s.value for s in self.secrets)

    def target_policy(self, receiver: str) -> TargetPolicy:
        """What `receiver` may reach; public https only unless its config allowed more."""
        return self.targets.get(receiver, TargetPolicy())


@dataclass(frozen=True)
class Target:
    """One receiver a notification goes to and the route that chose it."""

    receiver: str
    route: Route


def route(config: AlertsConfig, subject: Mapping[str, Any]) -> list[Target]:
    """The receivers for a notification's match fields, in route order, each receiver once."""
    chosen: dict[str, Target] = {}
    for candidate in config.routes:
        if not candidate.matcher.matches(subject):
            continue
        for name in candidate.receivers:
            chosen.setdefault(name, Target(name, candidate))
        if not candidate.proceed:
            break
    return list(chosen.values())


def _field(subject: Mapping[str, Any], name: str) -> Any:
    if name in subject and name != "labels":
        return subject[name]
    return (subject.get("labels") or {}).get(name, (subject.get("group") or {}).get(name))


def inhibited_by(rules: Sequence[InhibitRule], target: Mapping[str, Any],
                 active: Iterable[Mapping[str, Any]]) -> str | None:
    """Why `target` is muted by one of the `active` violations' match fields, or None when it is not."""
    candidates = list(active)
    for rule in rules:
        if not rule.target.matches(target):
            continue
        for source in candidates:
            if source.get("violation_id") == target.get("violation_id") or not rule.source.matches(source):
                continue
            if all(_field(source, name) is not None and _field(source, name) == _field(target, name)
                   for name in rule.equal):
                same = ", ".join(f"{name}={_field(target, name)}" for name in rule.equal)
                return f"inhibited by violation {source.get('violation_id')} ({source.get('rule')}; {same})"
    return None


class TokenBuckets:
    """Per-receiver token buckets; the delivery worker holds one for its lifetime (times in seconds)."""

    def __init__(self, limits: Mapping[str, RateLimit]):
        self._limits = dict(limits)
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, receiver: str, now: float) -> float:
        """0.0 when a send may go now (a token is spent), else the seconds until a token is due."""
        limit = self._limits.get(receiver)
        if limit is None:
            return 0.0
        with self._lock:
            tokens, at = self._state.get(receiver, (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + max(0.0, now - at) * limit.per_second)
            if tokens >= 1.0:
                self._state[receiver] = (tokens - 1.0, now)
                return 0.0
            self._state[receiver] = (tokens, now)
            return (1.0 - tokens) / limit.per_second
