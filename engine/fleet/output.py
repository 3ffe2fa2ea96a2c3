"""What a partition's evaluated batch stores, decided in the batch's transaction.

The stream is the fleet's event log, so PostgreSQL gets only the events that rows cite: the evidence of every
match, the event of every clear that can resolve a violation, and every event set aside with an error (with
`store_events="all"`, every event read as well). A clear whose rule and group key has no unresolved violation,
and no match in the batch, resolves nothing (transitions.apply_clear) and is left out: a resolve condition such
as "fragmentation below 0.6" holds for most samples of a healthy fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuslo.engine.events import Event
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.violations import Clear

Pair = tuple[str, str]  # (rule id, group key)
_CHUNK = 1000


def unresolved(session: Session, clears: Iterable[Clear]) -> set[Pair]:
    """The clears' (rule, group key) pairs that have an unresolved violation now."""
    pairs = sorted({(clear.rule_id, clear.group_key) for clear in clears})
    found: set[Pair] = set()
    for start in range(0, len(pairs), _CHUNK):
        chunk = pairs[start:start + _CHUNK]
        wanted = set(chunk)
        rows = session.execute(select(ViolationRow.rule_id, ViolationRow.group_key).where(
            ViolationRow.rule_id.in_(sorted({rule for rule, _ in chunk})),
            ViolationRow.group_key.in_(sorted({key for _, key in chunk})),
            ViolationRow.status != "resolved")).tuples()
        found.update(pair for pair in rows if pair in wanted)
    return found


def effective(session: Session, results: Sequence[EngineResult], *, store_all: bool) -> list[EngineResult]:
    """The results as they are stored: only the clears that can resolve something (an unresolved violation, or
    a match of the same pair among the results), and only the events to be stored among their `events` (in
    stream order: record_result stores matches and clears in the order of their events among them)."""
    matched = {(match.rule_id, match.group_key) for result in results for match in result.matches}
    live = unresolved(session, [c for result in results for c in result.clears
                                if (c.rule_id, c.group_key) not in matched]) | matched
    out = []
    for result in results:
        clears = tuple(c for c in result.clears if (c.rule_id, c.group_key) in live)
        kept = replace(result, clears=clears)
        if not store_all:
            keep = {event.id for event in cited([kept])}
            kept = replace(kept, events=tuple(event for event in result.events if event.id in keep))
        out.append(kept)
    return out


def cited(results: Sequence[EngineResult], also: Sequence[Event] = ()) -> list[Event]:
    """The events the results' rows need stored, once each: `also` first, then the evidence of every match (it may
    come from an earlier batch: a window's first event), the event of every clear and every event set aside."""
    found: dict[str, Event] = {event.id: event for event in also}
    for result in results:
        for match in result.matches:
            for event in match.explanation.evidence:
                found.setdefault(event.id, event)
        for clear in result.clears:
            found.setdefault(clear.event.id, clear.event)
        for event, _error in result.quarantined:
            found.setdefault(event.id, event)
    return list(found.values())
