"""What a receiver module needs to parse its part of alerts.yaml: the problem collector (file:line:col for every
error), checked secrets, URLs and durations, and the ReceiverType entry each module exports for the registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.alerts.egress import Resolver, TargetPolicy, check_url
from gpuslo.engine.alerts.notification import Receiver
from gpuslo.engine.alerts.secrets import Secret, is_reference, resolve
from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.units import parse_duration

Target = tuple[str, TargetPolicy]  # the receiver's name and what its URL may reach


class ConfigProblems:
    """Collects every problem of one alerts.yaml with its place; receivers' parsers report through it."""

    def __init__(self, document: Document, environ: Mapping[str, str] | None, resolver: Resolver):
        self.doc, self.environ, self.resolver = document, environ, resolver
        self.items: list[str] = []
        self.secrets: list[Secret] = []
        self.warnings: list[str] = []
        self.declared: set[str] = set()  # receiver names, valid or not: routes naming a broken one say nothing more

    def add(self, path: Path_, message: str, *, key: bool = False) -> None:
        self.items.append(f"{self.doc.at(path, key=key)}: {message}")

    def warn(self, path: Path_, message: str) -> None:
        self.warnings.append(f"{self.doc.at(path)}: {message}")

    def mapping(self, value: Any, path: Path_, allowed: set[str] | frozenset[str], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.add(path, f"{what} must be a mapping")
            return {}
        for key in value:
            if key not in allowed:
                self.add((*path, key), f"{what}: unknown field '{key}' (known: {', '.join(sorted(allowed))})",
                         key=True)
        return value

    def as_list(self, value: Any, path: Path_) -> list[Any]:
        if not isinstance(value, list):
            self.add(path, "must be a list")
            return []
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

    def url(self, value: Any, path: Path_, target: Target, *, secret_allowed: bool) -> str | Secret | None:
        """The receiver's URL once vetted (egress.check_url); a secret URL is named by its reference only."""
        found: str | Secret
        if isinstance(value, str) and is_reference(value) and secret_allowed:
            secret = self.secret(value, path)
            if secret is None:
                return None
            found, checked, shown = secret, secret.value, secret.ref
        elif isinstance(value, str):
            found = checked = shown = value
        else:
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


# Builds one receiver from its checked mapping (unknown fields already reported), or None after adding problems.
ReceiverParser = Callable[[ConfigProblems, dict[str, Any], Path_, Target], Receiver | None]


@dataclass(frozen=True)
class ReceiverType:
    """One `type:` of receiver in alerts.yaml: the fields it takes beside the common ones, and its parser."""

    name: str
    fields: frozenset[str]
    parse: ReceiverParser
