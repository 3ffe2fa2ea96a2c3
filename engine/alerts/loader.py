"""Load and validate alerts.yaml (receivers, routes, inhibition, rate limits); errors say file:line:col."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuslo.engine.alerts.egress import Resolver, TargetPolicy, system_resolver
from gpuslo.engine.alerts.notification import SEVERITIES, Receiver
from gpuslo.engine.alerts.receiver_config import ConfigProblems
from gpuslo.engine.alerts.receivers import RECEIVER_TYPES
from gpuslo.engine.alerts.routing import MATCH_FIELDS, AlertsConfig, InhibitRule, Matcher, RateLimit, Route
from gpuslo.engine.errors import ConfigError, RulebookError
from gpuslo.engine.rulebook.marked_yaml import Path_, decode, load_yaml

log = logging.getLogger(__name__)
TOP = {"receivers", "routes", "inhibit"}
COMMON = {"name", "type", "rate_limit", "allow_private_network", "allow_http"}  # fields every receiver takes
ROUTE_FIELDS = {"name", "match", "receivers", "group_wait", "repeat_interval", "send_resolved", "continue"}


def load_alerts_config(path: Path, environ: Mapping[str, str] | None = None, *,
                       resolver: Resolver = system_resolver) -> AlertsConfig:
    """Read, validate and resolve an alerts.yaml file; ConfigError lists every problem with file:line:col.

    Receiver hosts are resolved with `resolver` and refused when not public (see egress); a host that does not
    resolve now is a warning (`AlertsConfig.warnings`, also logged): DNS may be down at start-up."""
    try:
        text = decode(path.read_bytes(), str(path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read alerts config: {exc.strerror}") from exc
    except RulebookError as exc:
        raise ConfigError(str(exc)) from exc
    return load_alerts_text(text, str(path), environ, resolver=resolver)


def load_alerts_text(text: str, filename: str, environ: Mapping[str, str] | None = None, *,
                     resolver: Resolver = system_resolver) -> AlertsConfig:
    try:
        document = load_yaml(text, filename)
    except RulebookError as exc:
        raise ConfigError(str(exc)) from exc
    problems = ConfigProblems(document, environ, resolver)
    top = problems.mapping(document.data if document.data is not None else {}, (), TOP, "alerts config")
    receivers, limits, targets = _receivers(problems, top.get("receivers", []))
    routes = tuple(_route(problems, item, ("routes", i), receivers)
                   for i, item in enumerate(problems.as_list(top.get("routes", []), ("routes",))))
    inhibit = tuple(_inhibit(problems, item, ("inhibit", i))
                    for i, item in enumerate(problems.as_list(top.get("inhibit", []), ("inhibit",))))
    if problems.items:
        raise ConfigError("\n".join(problems.items))
    for warning in problems.warnings:
        log.warning("%s", warning)
    return AlertsConfig(MappingProxyType(receivers), routes, inhibit, MappingProxyType(limits), filename,
                        tuple(problems.secrets), MappingProxyType(targets), tuple(problems.warnings))


def _receivers(problems: ConfigProblems,
               value: Any) -> tuple[dict[str, Receiver], dict[str, RateLimit], dict[str, TargetPolicy]]:
    receivers: dict[str, Receiver] = {}
    limits: dict[str, RateLimit] = {}
    targets: dict[str, TargetPolicy] = {}
    for index, item in enumerate(problems.as_list(value, ("receivers",))):
        path: Path_ = ("receivers", index)
        kind = item.get("type") if isinstance(item, dict) else None
        receiver_type = RECEIVER_TYPES.get(kind) if isinstance(kind, str) else None
        if receiver_type is None:
            problems.add((*path, "type"), f"receiver type must be one of {', '.join(RECEIVER_TYPES)}")
            continue
        item = problems.mapping(item, path, COMMON | receiver_type.fields, f"{kind} receiver")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            problems.add((*path, "name"), "receiver needs a name")
            continue
        if name in problems.declared:
            problems.add((*path, "name"), f"receiver '{name}' is defined twice")
        problems.declared.add(name)
        policy = TargetPolicy(allow_private_network=problems.flag(item, path, "allow_private_network"),
                              allow_http=problems.flag(item, path, "allow_http"))
        built = receiver_type.parse(problems, item, path, (name, policy))
        if built is not None:
            receivers[name], targets[name] = built, policy
        if "rate_limit" in item:
            limit = _rate_limit(problems, item["rate_limit"], (*path, "rate_limit"))
            if limit is not None:
                limits[name] = limit
    return receivers, limits, targets


def _rate_limit(problems: ConfigProblems, value: Any, path: Path_) -> RateLimit | None:
    value = problems.mapping(value, path, {"per_second", "per_minute", "burst"}, "rate_limit")
    per_second = value.get("per_second", (value.get("per_minute") or 0) / 60)
    burst = value.get("burst", 1)
    if not isinstance(per_second, int | float) or per_second <= 0:
        problems.add(path, "rate_limit needs a positive per_second or per_minute")
        return None
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 1:
        problems.add((*path, "burst"), "burst must be a whole number of at least 1")
        return None
    return RateLimit(float(per_second), burst)


def _matcher(problems: ConfigProblems, value: Any, path: Path_) -> Matcher:
    value = problems.mapping(value if value is not None else {}, path, {*MATCH_FIELDS, "labels"}, "matcher")
    fields: dict[str, frozenset[str]] = {}
    for name in MATCH_FIELDS:
        if name in value:
            fields[name] = _values(problems, value[name], (*path, name))
    if "severity" in fields and not fields["severity"] <= set(SEVERITIES):
        problems.add((*path, "severity"), f"severity must be among {', '.join(SEVERITIES)}")
    labels = value.get("labels", {})
    if not isinstance(labels, dict):
        problems.add((*path, "labels"), "labels must be a mapping of label to value(s)")
        labels = {}
    return Matcher(MappingProxyType(fields),
                   MappingProxyType({k: _values(problems, v, (*path, "labels", k)) for k, v in labels.items()}))


def _values(problems: ConfigProblems, value: Any, path: Path_) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in items):
        problems.add(path, "must be a string or a list of strings")
        return frozenset()
    return frozenset(str(v) for v in items)


def _route(problems: ConfigProblems, item: Any, path: Path_, receivers: Mapping[str, Receiver]) -> Route:
    item = problems.mapping(item, path, ROUTE_FIELDS, "route")
    names = item.get("receivers", [])
    names = [names] if isinstance(names, str) else problems.as_list(names, (*path, "receivers"))
    for i, name in enumerate(names):
        if name not in receivers and name not in problems.declared:
            problems.add((*path, "receivers", i), f"unknown receiver '{name}'")
    for flag in ("send_resolved", "continue"):
        if not isinstance(item.get(flag, False), bool):
            problems.add((*path, flag), f"{flag} must be true or false")
    return Route(
        name=str(item.get("name", f"route-{path[-1]}")),
        matcher=_matcher(problems, item.get("match"), (*path, "match")),
        receivers=tuple(str(n) for n in names),
        group_wait=problems.duration(item.get("group_wait"), (*path, "group_wait"), 0.0),
        repeat_interval=problems.duration(item.get("repeat_interval"), (*path, "repeat_interval"), 4 * 3600.0),
        send_resolved=item.get("send_resolved", True) is not False,
        proceed=item.get("continue", False) is True,
    )


def _inhibit(problems: ConfigProblems, item: Any, path: Path_) -> InhibitRule:
    item = problems.mapping(item, path, {"source", "target", "equal"}, "inhibit rule")
    equal = item.get("equal", [])
    equal = problems.as_list(equal, (*path, "equal"))
    if not all(isinstance(e, str) for e in equal):
        problems.add((*path, "equal"), "equal must be a list of field or label names")
        equal = []
    return InhibitRule(_matcher(problems, item.get("source"), (*path, "source")),
                       _matcher(problems, item.get("target"), (*path, "target")), tuple(equal))
