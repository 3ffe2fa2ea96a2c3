"""What a partition's evaluated batch stores, decided in the batch's transaction.

The stream is the fleet's event log, so PostgreSQL gets only the events that rows cite: the evidence of every
match, the event of every clear that can resolve a violation, and every event set aside with an error (with
`store_events="all"`, every event read as well). A clear of a rule and group key that is not open at its point of
the batch (no unresolved violation before it, no match since the last clear) resolves nothing
(transitions.apply_clear) and is left out: a resolve condition such as "fragmentation below 0.35" holds for most
samples of a healthy fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuslo.engine.events import Event
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store.engine_output import in_evaluation_order
from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.violations import Clear, Match

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
    """The results as they are stored: only the clears that can resolve something, and only the events to be
    stored among their `events` (in stream order: record_result stores matches and clears in the order of their
    events among them). A clear can resolve something when its pair is open at that point of the batch: it had an
    unresolved violation before the batch, or a match of it comes earlier, and no clear came in between."""
    open_ = unresolved(session, [c for result in results for c in result.clears]) if any(
        result.clears for result in results) else set()
    out = []
    for result in results:
        kept_clears = []
        for item in in_evaluation_order(result):
            pair = (item.rule_id, item.group_key)
            if isinstance(item, Match):
                open_.add(pair)
            elif pair in open_:
                kept_clears.append(item)
                open_.discard(pair)
        kept = replace(result, clears=tuple(kept_clears))
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
