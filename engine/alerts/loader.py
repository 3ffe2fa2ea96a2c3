"""Load and validate alerts.yaml (receivers, routes, inhibition, rate limits); errors say file:line:col."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuslo.engine.alerts.alertmanager import AlertmanagerReceiver
from gpuslo.engine.alerts.egress import Resolver, TargetPolicy, check_url, system_resolver
from gpuslo.engine.alerts.notification import SEVERITIES, Receiver
from gpuslo.engine.alerts.opsgenie import DEFAULT_URL as OPSGENIE_URL
from gpuslo.engine.alerts.opsgenie import OpsgenieReceiver
from gpuslo.engine.alerts.pagerduty import DEFAULT_URL as PAGERDUTY_URL
from gpuslo.engine.alerts.pagerduty import PagerDutyReceiver
from gpuslo.engine.alerts.routing import MATCH_FIELDS, AlertsConfig, InhibitRule, Matcher, RateLimit, Route
from gpuslo.engine.alerts.secrets import Secret, is_reference, resolve
from gpuslo.engine.alerts.slack import SlackReceiver
from gpuslo.engine.alerts.webhook import FORMATS, WebhookReceiver, signing_key
from gpuslo.engine.errors import ConfigError, RulebookError
from gpuslo.engine.rulebook.marked_yaml import Document, Path_, decode, load_yaml
from gpuslo.engine.units import parse_duration

log = logging.getLogger(__name__)
TOP = {"receivers", "routes", "inhibit"}
RECEIVER_FIELDS = {
    "pagerduty": {"routing_key", "url"}, "slack": {"url"}, "opsgenie": {"api_key", "url"},
    "webhook": {"url", "secret", "format"}, "alertmanager": {"url", "token", "resend_interval"},
}
COMMON = {"name", "type", "rate_limit", "allow_private_network", "allow_http"}
ROUTE_FIELDS = {"name", "match", "receivers", "group_wait", "repeat_interval", "send_resolved", "continue"}


class _Problems:
    def __init__(self, document: Document, environ: Mapping[str, str] | None, resolver: Resolver):
        self.doc, self.environ, self.resolver, self.items = document, environ, resolver, []
        self.secrets: list[Secret] = []
        self.warnings: list[str] = []
        self.declared: set[str] = set()  # receiver names, valid or not: routes naming a broken one say nothing more

    def add(self, path: Path_, message: str, *, key: bool = False) -> None:
        self.items.append(f"{self.doc.at(path, key=key)}: {message}")

    def warn(self, path: Path_, message: str) -> None:
        self.warnings.append(f"{self.doc.at(path)}: {message}")

    def mapping(self, value: Any, path: Path_, allowed: set[str], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.add(path, f"{what} must be a mapping")
            return {}
        for key in value:
            if key not in allowed:
                self.add((*path, key), f"{what}: unknown field '{key}' (known: {', '.join(sorted(allowed))})",
                         key=True)
        return value

    def secret(self, value: Any, path: Path_) -> Secret | None:
        if not isinstance(value, str):
            self.add(path, "must be a secret reference, 'env:VAR' or 'file:/path'")
            return None
        try:
            found = resolve(value, self.environ)
        except ValueError as exc:
            self.add(path, str(exc))  # the message names the reference, never a value
            return None
        self.secrets.append(found)
        return found

    def url(self, value: Any, path: Path_, target: tuple[str, TargetPolicy], *,
            secret_allowed: bool) -> str | Secret | None:
        """The receiver's URL once vetted (egress.check_url); a secret URL is named by its reference only."""
        if isinstance(value, str) and is_reference(value) and secret_allowed:
            found = self.secret(value, path)
            checked, shown = (found.value, found.ref) if found else (None, value)
        else:
            found = checked = shown = value if isinstance(value, str) else None
        if checked is None or shown is None:
            if not isinstance(value, str):
                self.add(path, "url must be a string")
            return None
        name, policy = target
        verdict = check_url(checked, shown, policy, self.resolver)
        for error in verdict.errors:
            self.add(path, f'receiver "{name}": {error}')
        if verdict.warning:
            self.warn(path, f'receiver "{name}": {verdict.warning}')
        return None if verdict.errors else found

    def flag(self, item: dict[str, Any], path: Path_, name: str) -> bool:
        value = item.get(name, False)
        if not isinstance(value, bool):
            self.add((*path, name), f"{name} must be true or false")
            return False
        return value

    def duration(self, value: Any, path: Path_, default: float) -> float:
        if value is None:
            return default
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.add(path, str(exc))
            return default


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
    problems = _Problems(document, environ, resolver)
    top = problems.mapping(document.data if document.data is not None else {}, (), TOP, "alerts config")
    receivers, limits, targets = _receivers(problems, top.get("receivers", []))
    routes = tuple(_route(problems, item, ("routes", i), receivers)
                   for i, item in enumerate(_list(problems, top.get("routes", []), ("routes",))))
    inhibit = tuple(_inhibit(problems, item, ("inhibit", i))
                    for i, item in enumerate(_list(problems, top.get("inhibit", []), ("inhibit",))))
    if problems.items:
        raise ConfigError("\n".join(problems.items))
    for warning in problems.warnings:
        log.warning("%s", warning)
    return AlertsConfig(MappingProxyType(receivers), routes, inhibit, MappingProxyType(limits), filename,
                        tuple(problems.secrets), MappingProxyType(targets), tuple(problems.warnings))


def _list(problems: _Problems, value: Any, path: Path_) -> list[Any]:
    if not isinstance(value, list):
        problems.add(path, "must be a list")
        return []
    return value


def _receivers(problems: _Problems,
               value: Any) -> tuple[dict[str, Receiver], dict[str, RateLimit], dict[str, TargetPolicy]]:
    receivers: dict[str, Receiver] = {}
    limits: dict[str, RateLimit] = {}
    targets: dict[str, TargetPolicy] = {}
    for index, item in enumerate(_list(problems, value, ("receivers",))):
        path: Path_ = ("receivers", index)
        kind = item.get("type") if isinstance(item, dict) else None
        if kind not in RECEIVER_FIELDS:
            problems.add((*path, "type"), f"receiver type must be one of {', '.join(RECEIVER_FIELDS)}")
            continue
        item = problems.mapping(item, path, COMMON | RECEIVER_FIELDS[kind], f"{kind} receiver")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            problems.add((*path, "name"), "receiver needs a name")
            continue
        if name in problems.declared:
            problems.add((*path, "name"), f"receiver '{name}' is defined twice")
        problems.declared.add(name)
        policy = TargetPolicy(allow_private_network=problems.flag(item, path, "allow_private_network"),
                              allow_http=problems.flag(item, path, "allow_http"))
        built = _BUILDERS[kind](problems, item, path, (name, policy))
        if built is not None:
            receivers[name], targets[name] = built, policy
        if "rate_limit" in item:
            limit = _rate_limit(problems, item["rate_limit"], (*path, "rate_limit"))
            if limit is not None:
                limits[name] = limit
    return receivers, limits, targets


_Target = tuple[str, TargetPolicy]  # the receiver's name and what its URL may reach


def _pagerduty(problems: _Problems, item: dict[str, Any], path: Path_, target: _Target) -> Receiver | None:
    key = problems.secret(item.get("routing_key"), (*path, "routing_key"))
    url = problems.url(item.get("url", PAGERDUTY_URL), (*path, "url"), target, secret_allowed=False)
    return PagerDutyReceiver(target[0], key, str(url)) if key and url else None


def _slack(problems: _Problems, item: dict[str, Any], path: Path_, target: _Target) -> Receiver | None:
    if not (isinstance(item.get("url"), str) and is_reference(item["url"])):
        problems.add((*path, "url"), "a Slack webhook URL is a secret: write it as 'env:VAR' or 'file:/path'")
        return None
    url = problems.url(item["url"], (*path, "url"), target, secret_allowed=True)
    return SlackReceiver(target[0], url) if isinstance(url, Secret) else None


def _opsgenie(problems: _Problems, item: dict[str, Any], path: Path_, target: _Target) -> Receiver | None:
    key = problems.secret(item.get("api_key"), (*path, "api_key"))
    url = problems.url(item.get("url", OPSGENIE_URL), (*path, "url"), target, secret_allowed=False)
    return OpsgenieReceiver(target[0], key, str(url)) if key and url else None


def _webhook(problems: _Problems, item: dict[str, Any], path: Path_, target: _Target) -> Receiver | None:
    url = problems.url(item.get("url"), (*path, "url"), target, secret_allowed=True)
    refs = item.get("secret", [])
    refs = [refs] if isinstance(refs, str) else refs
    secrets = []
    for i, ref in enumerate(_list(problems, refs, (*path, "secret"))):
        where = (*path, "secret", i) if isinstance(item.get("secret"), list) else (*path, "secret")
        found = problems.secret(ref, where)
        if found is not None:
            try:
                signing_key(found.value)
            except ValueError as exc:
                problems.add(where, f"{found.ref}: {exc}")
                continue
            secrets.append(found)
    if len(secrets) > 2:
        problems.add((*path, "secret"), "at most two secrets: the new one and the one being rotated out")
    fmt = item.get("format", "standard")
    if fmt not in FORMATS:
        problems.add((*path, "format"), f"format must be one of {', '.join(FORMATS)}")
        return None
    return WebhookReceiver(target[0], url, tuple(secrets), fmt) if url else None


def _alertmanager(problems: _Problems, item: dict[str, Any], path: Path_, target: _Target) -> Receiver | None:
    url = problems.url(item.get("url"), (*path, "url"), target, secret_allowed=False)
    token = problems.secret(item["token"], (*path, "token")) if "token" in item else None
    interval = problems.duration(item.get("resend_interval"), (*path, "resend_interval"), 60.0)
    if interval < 1:
        problems.add((*path, "resend_interval"), "resend_interval must be at least 1s")
        return None
    if "token" in item and token is None:
        return None
    return AlertmanagerReceiver(target[0], str(url), token, interval) if url else None


_BUILDERS: dict[str, Callable[[_Problems, dict[str, Any], Path_, _Target], Receiver | None]] = {
    "pagerduty": _pagerduty, "slack": _slack, "opsgenie": _opsgenie, "webhook": _webhook,
    "alertmanager": _alertmanager,
}


def _rate_limit(problems: _Problems, value: Any, path: Path_) -> RateLimit | None:
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


def _matcher(problems: _Problems, value: Any, path: Path_) -> Matcher:
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


def _values(problems: _Problems, value: Any, path: Path_) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in items):
        problems.add(path, "must be a string or a list of strings")
        return frozenset()
    return frozenset(str(v) for v in items)


def _route(problems: _Problems, item: Any, path: Path_, receivers: Mapping[str, Receiver]) -> Route:
    item = problems.mapping(item, path, ROUTE_FIELDS, "route")
    names = item.get("receivers", [])
    names = [names] if isinstance(names, str) else _list(problems, names, (*path, "receivers"))
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


def _inhibit(problems: _Problems, item: Any, path: Path_) -> InhibitRule:
    item = problems.mapping(item, path, {"source", "target", "equal"}, "inhibit rule")
    equal = item.get("equal", [])
    equal = _list(problems, equal, (*path, "equal"))
    if not all(isinstance(e, str) for e in equal):
        problems.add((*path, "equal"), "equal must be a list of field or label names")
        equal = []
    return InhibitRule(_matcher(problems, item.get("source"), (*path, "source")),
                       _matcher(problems, item.get("target"), (*path, "target")), tuple(equal))
