"""Key spaces and partitions: which worker partitions an event must reach so that every window it can join meets
its other events in one place.

A rule's key is what its matches must share: `same:` for windowed rules (correlation, count, absence), `group_by`
for single-event rules (so that every match of one violation is folded by one partition, in stream order). Equal
keys imply an equal value of any one field of the key, so a rule is partitioned by one field of its key (`host`
when the key has it, else `job`, else its first field); a rule with an empty key is fleet-wide (one partition).
A key space is that field; each has P partitions (one for the fleet-wide space), and an event goes to the
partition of each key space that has a rule reading its kind.

A measured SLO (its `indicator:`) is counted per group of its `group_by`, so it has a key space too, chosen from
`group_by` the same way; its request kind is routed there, and only that space's partitions count it: each
request is counted once, in the one partition holding its group (engine/fleet/slis.py).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.events import Event
from gpuslo.engine.rulebook.model import Absence, Rule, Rulebook, SingleEvent, rule_patterns
from gpuslo.engine.slo.model import Sli

SUBJECT_ROOT = "gpuslo.ev"
FLEET_SPACE = "fleet"  # the key space of rules with an empty key: one partition
_PREFERRED = ("host", "job")


def rule_key(rule: Rule) -> tuple[str, ...]:
    """The fields every match of the rule shares."""
    return rule.group_by if isinstance(rule.when, SingleEvent) else rule.when.same


def space_of(rule: Rule) -> str:
    """The field a rule is partitioned by ("fleet" when its key is empty)."""
    return _space(rule_key(rule))


def sli_space(sli: Sli) -> str:
    """The field an SLI is counted by: one of its group_by ("fleet" when it has none)."""
    return _space(sli.group_by)


def slis_of(rulebooks: Sequence[Rulebook]) -> tuple[Sli, ...]:
    """The measured SLIs, one per SLO id (the first rulebook that measures it, as the counter loads them)."""
    found: dict[str, Sli] = {}
    for rulebook in rulebooks:
        for slo in rulebook.slos.values():
            if slo.indicator is not None:
                found.setdefault(slo.id, slo.indicator)
    return tuple(found.values())


def _space(key: tuple[str, ...]) -> str:
    for field in _PREFERRED:
        if field in key:
            return field
    return key[0] if key else FLEET_SPACE


def _token(space: str) -> str:
    """A space name as one subject token (field paths such as labels.model have dots)."""
    return space.replace(".", "_")


@dataclass(frozen=True)
class Partition:
    """One partition of a key space: its subject on the stream and its lock number in PostgreSQL."""

    space: str
    index: int
    number: int  # unique across the routing table; the advisory lock's key
    partitions: int  # how many its key space has

    @property
    def name(self) -> str:
        return f"{_token(self.space)}.{self.index}"

    @property
    def subject(self) -> str:
        return f"{SUBJECT_ROOT}.{self.name}"


@dataclass(frozen=True)
class KeySpace:
    """A partitioning field, how many partitions it has, and the event kinds its rules read."""

    field: str
    partitions: int
    kinds: frozenset[str]


@dataclass(frozen=True)
class RoutingTable:
    """Every key space of the loaded rulebooks; what publishers route by and workers claim."""

    spaces: tuple[KeySpace, ...]

    @classmethod
    def of(cls, rulebooks: Sequence[Rulebook], partitions: int) -> RoutingTable:
        if not 1 <= partitions <= 4096:
            raise ConfigError(f"fleet partitions: must be within 1..4096, got {partitions}")
        kinds: dict[str, set[str]] = {}
        for rulebook in rulebooks:
            for rule in rulebook.rules:
                kinds.setdefault(space_of(rule), set()).update(p.kind for p in rule_patterns(rule))
        for sli in slis_of(rulebooks):
            kinds.setdefault(sli_space(sli), set()).add(sli.kind)
        return cls(tuple(KeySpace(space, 1 if space == FLEET_SPACE else partitions, frozenset(found))
                         for space, found in sorted(kinds.items())))

    def all_partitions(self) -> tuple[Partition, ...]:
        found, number = [], 0
        for space in self.spaces:
            for index in range(space.partitions):
                found.append(Partition(space.field, index, number, space.partitions))
                number += 1
        return tuple(found)

    def route(self, event: Event) -> tuple[Partition, ...]:
        """The partitions this event must reach, one per key space that reads its kind."""
        found, number = [], 0
        for space in self.spaces:
            if event.kind in space.kinds:
                index = partition_index(event, space)
                found.append(Partition(space.field, index, number + index, space.partitions))
            number += space.partitions
        return tuple(found)

    def to_json(self) -> bytes:
        return json.dumps({"spaces": [{"field": s.field, "partitions": s.partitions, "kinds": sorted(s.kinds)}
                                      for s in self.spaces]}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RoutingTable:
        try:
            body = json.loads(data)
            return cls(tuple(KeySpace(str(s["field"]), int(s["partitions"]), frozenset(map(str, s["kinds"])))
                             for s in body["spaces"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"fleet routing table: not a table written by a gpuslo worker: {exc}") from exc


def partition_index(event: Event, space: KeySpace) -> int:
    """Stable across processes and Python versions (crc32, never hash()); an event without the field goes to a
    fixed partition, where its key-less matches meet."""
    return value_index(event.get(space.field), space.partitions)


def value_index(value: object, partitions: int) -> int:
    """The partition of one value of a space's field (an event's, or one parsed back from a stored group key:
    a group key spells a value as str() does, and None as empty)."""
    if partitions == 1:
        return 0
    text = "" if value is None else str(value)
    return zlib.crc32(text.encode()) % partitions


def rulebooks_for(rulebooks: Sequence[Rulebook], space: str) -> tuple[Rulebook, ...]:
    """The rulebooks with only the rules of one key space, and only its SLIs measured (the other SLOs stay,
    text only): what a partition's evaluator runs."""
    return tuple(replace(rulebook, rules=tuple(r for r in rulebook.rules if space_of(r) == space),
                         slos={name: slo if slo.indicator is None or sli_space(slo.indicator) == space
                               else replace(slo, indicator=None) for name, slo in rulebook.slos.items()})
                 for rulebook in rulebooks)


def longest_window(rulebooks: Sequence[Rulebook]) -> float:
    """The longest `within`/`for` of the rules: how far back a new owner replays to rebuild window state."""
    windows = [0.0 if isinstance(r.when, SingleEvent) else r.when.for_s if isinstance(r.when, Absence)
               else r.when.within_s for rulebook in rulebooks for r in rulebook.rules]
    return max(windows, default=0.0)
