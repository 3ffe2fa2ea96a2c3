"""The one error tree of gpuslo; every error says where and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a source file; any part may be unknown."""

    file: str | None = None
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        parts = [self.file or "<input>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)


class GpusloError(Exception):
    """Base of every error gpuslo raises on purpose."""


class ConfigError(GpusloError):
    """A setting is missing or malformed."""


@dataclass(frozen=True)
class FieldProblem:
    """One reason an input object was refused: the JSON path of the field and the rule it broke."""

    path: str
    reason: str
    code: str = "invalid"  # one of engine/event_checks.py REASONS: the metric label, never the raw value

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class EventError(GpusloError):
    """An event failed validation; `problems` names every bad field."""

    def __init__(self, problems: list[FieldProblem] | tuple[FieldProblem, ...]):
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class RulebookProblem:
    """One rulebook error with its location, rule and optional hint."""

    location: Location
    message: str
    rule_id: str | None = None
    hint: str | None = None

    def __str__(self) -> str:
        rule = f' rule "{self.rule_id}":' if self.rule_id else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.location}:{rule} {self.message}{hint}"


class RulebookError(GpusloError):
    """A rulebook could not be loaded; `problems` lists every error found, in file order."""

    def __init__(self, problems: list[RulebookProblem] | tuple[RulebookProblem, ...]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class StoreError(GpusloError):
    """The database refused or failed an operation."""


class TransactionConflict(StoreError):
    """PostgreSQL aborted the transaction for a concurrent one (deadlock, serialization failure): nothing of it
    was written, and the same transaction run again normally succeeds."""


class ConflictError(StoreError):
    """An idempotency key was reused with a different body."""


class NotFoundError(StoreError):
    """The violation or silence asked for does not exist."""


class InvalidTransition(StoreError):
    """A lifecycle action is not allowed in the violation's or silence's current state (HTTP 409)."""


class InvalidSilence(StoreError):
    """A silence was refused: unknown matcher, empty matchers, or an end before its start (HTTP 400)."""


class EngineError(GpusloError):
    """The rules engine failed or is overloaded."""


class RulebookNotLoaded(EngineError):
    """One rulebook the engine could not compile or register; the others of the load are not at fault."""

    def __init__(self, name: str, file: str | None, reason: str):
        self.name, self.file, self.reason = name, file, reason
        super().__init__(f"rulebook {name!r}: {reason}")


class ProbeError(GpusloError):
    """A probe cannot run here; the message says what is missing and how to fix it."""


class DeliveryError(GpusloError):
    """A notification could not be delivered."""
