"""The fact protocol: an event becomes one flat fact per loaded plan that reads its kind (plan.py's keys), with
an id the runtime owns and the plan's text tests computed into 0/1 keys."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.events import ENVELOPE_FIELDS, Event
from gpuslo.engine.plan import Plan
from gpuslo.engine.rulebook.operators import holds

SID = "0"
_FACT_ENVELOPE = frozenset({"id", "sid", "kind", "ts"})  # keys every fact has before its fields are copied
_FACT_SERIAL = itertools.count()  # fact ids unique in the process: every ruleset shares one C core


def fact_id() -> str:
    """A fact id no other fact of this process has."""
    return f"f{next(_FACT_SERIAL)}"


@dataclass(frozen=True)
class FactFields:
    """The event fields a plan's facts copy, as (fact key, name), sorted by where the event keeps them."""

    envelope: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]  # name: the label's key
    attrs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, plan: Plan) -> FactFields:
        fields = [(key, key.replace("__", ".")) for key in sorted(plan.keys) if key not in _FACT_ENVELOPE]
        return cls(tuple((key, name) for key, name in fields if name in ENVELOPE_FIELDS),
                   tuple((key, name[len("labels."):]) for key, name in fields if name.startswith("labels.")),
                   tuple((key, name) for key, name in fields
                         if name not in ENVELOPE_FIELDS and not name.startswith("labels.")))


def make_fact(event: Event, plan: Plan, fields: FactFields, timestamp: float) -> dict[str, Any]:
    """The fact of an event for one plan, at event time `timestamp` (the stream clock's reading of it)."""
    fact: dict[str, Any] = {"id": fact_id(), "sid": SID, "kind": event.kind, "ts": timestamp}
    for key, name in fields.envelope:
        value = getattr(event, name)
        if value is not None:
            fact[key] = value
    for source, copied in ((event.labels, fields.labels), (event.attrs, fields.attrs)):
        for key, name in copied:
            value = source.get(name)
            if value is not None:
                fact[key] = value
    for test in plan.text_tests:
        observed = event.get(test.field)
        if observed is not None:  # absent stays absent, so neither the test nor its negation holds
            fact[test.key] = 1 if holds(test.op, observed, test.pattern) else 0
    return fact
