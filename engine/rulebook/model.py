"""Frozen rulebook objects: what the loader builds and the compiler, runtime and explainer read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpuslo.engine.errors import Location

if TYPE_CHECKING:
    from gpuslo.engine.slo.model import Sli

SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")

# ---- condition expressions (parsed from text, never eval'ed) ----

LiteralValue = int | float | str | bool | None


@dataclass(frozen=True)
class FieldRef:
    """A field of the current event (`alias` None) or of an earlier named pattern (`alias.field`)."""

    name: str
    alias: str | None = None

    def __str__(self) -> str:
        return f"{self.alias}.{self.name}" if self.alias else self.name


@dataclass(frozen=True)
class Literal:
    """A constant; `text` keeps the source spelling (`1GiB`, `200ms`) for explanations."""

    value: LiteralValue | tuple[LiteralValue, ...]
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Compare:
    """`left op right`; op is one of == != < <= > >= in contains matches."""

    op: str
    left: FieldRef
    right: Literal | FieldRef

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Exists:
    """`has field`: the field is present (not null)."""

    field: FieldRef

    def __str__(self) -> str:
        return f"has {self.field}"


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]

    def __str__(self) -> str:
        return " and ".join(f"({i})" if isinstance(i, Or) else str(i) for i in self.items)


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]

    def __str__(self) -> str:
        return " or ".join(str(i) for i in self.items)


@dataclass(frozen=True)
class Not:
    item: Expr

    def __str__(self) -> str:
        return f"not ({self.item})"


Expr = Compare | Exists | And | Or | Not

# ---- triggers ----


@dataclass(frozen=True)
class EventPattern:
    """One event kind with an optional condition; `alias` names it inside correlations."""

    kind: str
    condition: Expr | None = None
    alias: str = "m"
    condition_text: str | None = None


@dataclass(frozen=True)
class SingleEvent:
    """Fires on every event that matches the pattern."""

    pattern: EventPattern


@dataclass(frozen=True)
class Correlation:
    """Fires when all patterns match events that agree on `same` keys within `within_s` seconds."""

    patterns: tuple[EventPattern, ...]
    same: tuple[str, ...]
    within_s: float
    ordered: bool = False


@dataclass(frozen=True)
class Count:
    """Fires when `count` events matching the pattern, equal on `same`, fall within `within_s` seconds."""

    pattern: EventPattern
    count: int
    same: tuple[str, ...]
    within_s: float


@dataclass(frozen=True)
class Absence:
    """Fires once per `same` key when no event matching `pattern` arrives for `for_s`.

    Without `after` (a heartbeat) the silence counts from the last matching event. With `after` (an expectation)
    each event matching `after` arms its key, a matching event of the key at or after it (within `for_s`)
    disarms it, and an arming left undisarmed fires once.
    """

    pattern: EventPattern
    same: tuple[str, ...]
    for_s: float
    after: EventPattern | None = None  # the arming pattern (alias ARM_ALIAS), None for a heartbeat


Trigger = SingleEvent | Correlation | Count | Absence


@dataclass(frozen=True)
class Slo:
    id: str
    service: str
    sli: str
    objective: str
    window: str
    description: str = ""
    indicator: Sli | None = None  # the measured SLI (`indicator:`), None when the SLO is text only


CLEAR_ALIAS = "resolve"  # the alias of a rule's clearing pattern; no correlation pattern may take it
ARM_ALIAS = "after"  # the alias of an absence's arming pattern


@dataclass(frozen=True)
class Lifecycle:
    """How a rule's violations repeat, flap and resolve (`repeat_interval`, `flap_window`, `resolve`).

    `resolve_when` is the clearing pattern of `resolve: {event, if}` (alias CLEAR_ALIAS): an event matching it
    resolves the rule's violation of the group key taken from that event.
    """

    repeat_interval_s: float = 4 * 3600.0
    flap_window_s: float = 600.0
    resolve_after_s: float | None = None  # None: no quiet-period resolve
    resolve_when: EventPattern | None = None  # None: no clearing event


@dataclass(frozen=True)
class Override:
    """One site override in force: what it changed (`kind` rule/macro/list, `name`, `field`), the new value as
    written, and where the override stands. `field` is "" for a replaced macro or list."""

    kind: str
    name: str
    field: str
    value: str
    location: Location

    def __str__(self) -> str:
        field = f" {self.field}" if self.field else ""
        return f"{self.kind} {self.name}{field} = {self.value} ({self.location})"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    slo: str
    severity: str
    when: Trigger
    group_by: tuple[str, ...]
    summary: str
    remediation: str
    location: Location
    description: str = ""
    runbook: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    lifecycle: Lifecycle = Lifecycle()
    # Site overrides that changed this rule: its own fields, and the macros and lists its conditions use.
    overrides: tuple[Override, ...] = ()


def trigger_patterns(when: Trigger) -> tuple[EventPattern, ...]:
    """The event patterns of a trigger: a correlation's, else its one pattern, with an absence's arming pattern."""
    patterns = when.patterns if isinstance(when, Correlation) else (when.pattern,)
    return (*patterns, when.after) if isinstance(when, Absence) and when.after is not None else patterns


def rule_patterns(rule: Rule) -> tuple[EventPattern, ...]:
    """Every event pattern of a rule, each an engine rule of its own: the trigger's patterns, an absence's
    arming pattern (ARM_ALIAS) and the clearing pattern (CLEAR_ALIAS), which the runtime turns into a Clear."""
    clear = rule.lifecycle.resolve_when
    return (*trigger_patterns(rule.when), clear) if clear is not None else trigger_patterns(rule.when)


@dataclass(frozen=True)
class Rulebook:
    name: str
    version: str
    description: str
    slos: Mapping[str, Slo]
    rules: tuple[Rule, ...]
    source: str
    content_hash: str
    requires: str | None = None
    location: Location = Location()  # where the `rulebook:` name stands
    # The site override file applied (rules_overrides_dir), its text, and every override it made.
    override_file: str | None = None
    override_source: str = ""
    overrides: tuple[Override, ...] = ()

    @property
    def disabled(self) -> tuple[str, ...]:
        """Ids of shipped rules a site override turned off (they are not in `rules`)."""
        return tuple(o.name for o in self.overrides if o.kind == "rule" and o.field == "enabled")

    def rule(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)
